"""`sparring serve` in a real browser: headless Chromium (Debian's `chromium`, driven by its own
--dump-dom and --screenshot flags) against a uvicorn server on a SQLite store.

Opens the episodes page, filtered and searched, an episode and the compare page; checks what
the DOM shows (after HTMX ran: the live poll reaches the server), that a model's markup ran
nowhere, and that every screenshot is a picture, not a blank page.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from factories import record_episode
from uvicorn_thread import serving

from storage.engine import open_store
from storage.records import EpisodeStatus
from storage.recorder import Recorder

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH: `scripts/setup --dev` installs it (apt-get install chromium)"
)
PAYLOAD = '<img src=x onerror="document.body.dataset.pwned=1"> the critic says 12 is wrong'


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A served store: two succeeded episodes of smollm2@base, a failed one of actor@v1 on the
    same task whose last turn carries markup; and the paths the server was asked for."""
    from starlette.requests import Request

    from app.server.app import create_app

    url = f"sqlite:///{tmp_path_factory.mktemp('served') / 'store.db'}"
    engine = open_store(url)
    with Recorder(engine, batch_size=64, flush_interval_s=0.01) as recorder:
        ok = [record_episode(recorder, minute=m, task_id=f"t{m}") for m in range(2)]
        failed = record_episode(recorder, minute=2, task_id="t0", policy="actor@v1", status=EpisodeStatus.FAILED,
                                reward=0.0, turns=1)
    engine.dispose()
    engine = open_store(url)  # the failed episode's turn: markup in the response (written directly)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE turn_payloads SET response = ? WHERE turn_id = ?", (PAYLOAD, failed.turns[0].id))
    engine.dispose()
    app = create_app(url)
    asked: list[str] = []

    @app.middleware("http")
    async def remember(request: Request, call_next):  # noqa: ANN001, ANN202
        asked.append(request.url.path)
        return await call_next(request)

    with serving(app) as port:
        yield {"base": f"http://127.0.0.1:{port}", "ok": ok, "failed": failed, "asked": asked}


def _open(site: dict, path: str, shot: Path, *, wait_ms: int = 1500) -> str:
    """The page's DOM after ``wait_ms`` of (virtual) time, and its screenshot saved to ``shot``."""
    profile = shot.with_suffix(".profile")
    result = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--no-first-run", f"--user-data-dir={profile}", "--window-size=1280,900",
         f"--virtual-time-budget={wait_ms}", f"--screenshot={shot}", "--dump-dom", site["base"] + path],
        capture_output=True, text=True, timeout=90,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _assert_not_blank(shot: Path) -> None:
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[0] >= 800 and pixels.shape[1] >= 1200
    assert pixels[..., :3].var() > 0.003, f"{shot} looks blank"


def test_browse_filter_search_episode_and_compare(site: dict, tmp_path: Path):
    ok, failed = site["ok"], site["failed"]
    everything = _open(site, "/", tmp_path / "episodes.png", wait_ms=6500)  # past one live poll (5 s)
    assert all(e.start.id[:8] in everything for e in [*ok, failed])
    assert "/fragments/episodes" in site["asked"], "HTMX's live poll never reached the server"
    _assert_not_blank(tmp_path / "episodes.png")

    filtered = _open(site, "/?status=failed", tmp_path / "failed.png")
    assert failed.start.id[:8] in filtered and not any(e.start.id[:8] in filtered for e in ok)
    searched = _open(site, "/?q=critic+says", tmp_path / "search.png")
    assert failed.start.id[:8] in searched and "1 matching" in searched

    episode = _open(site, f"/episodes/{failed.start.id}", tmp_path / "episode.png")
    assert "the critic says 12 is wrong" in episode
    assert "data-pwned" not in episode and "&lt;img src=x" in episode  # shown as text, never run
    _assert_not_blank(tmp_path / "episode.png")

    compare = _open(site, "/compare?a=smollm2@base&b=actor@v1&task_id=t0", tmp_path / "compare.png")
    assert "What changed on t0" in compare and "succeeded" in compare and "failed" in compare
    assert "data-pwned" not in compare
    _assert_not_blank(tmp_path / "compare.png")
