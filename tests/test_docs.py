"""The manual builds with MkDocs in strict mode (a broken link or a missing page is an error), its
generated pages hold what the code says, every results page says what was run where, and no file
of the project counts the team's work periods."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import Settings
from graphs.registry import game_registry

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
ORDINALS = (
    "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|"
    "fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|thirtieth|fortieth|twenty-\\w+|thirty-\\w+|"
    "\\d+(?:st|nd|rd|th)"
)
WORK_PERIOD = re.compile(rf"\b(?:{ORDINALS})[-\s]+sessions?\b", re.IGNORECASE)
"""an ordinal followed by the word the README used for the team's work periods"""
SCANNED = ("README.md", "docs", "app", "graphs", "training", "evaluation", "storage", "bench")


def test_the_work_period_pattern_is_caught():
    word = "session"  # the examples are assembled, so this file itself names no work period
    assert WORK_PERIOD.search(f"as measured in the {'eleven'}th {word}, 2026-11-25")
    assert WORK_PERIOD.search(f"the {'twentie'}th\n{word}'s run") and WORK_PERIOD.search(f"Twenty-first {word}")
    assert not WORK_PERIOD.search(f"a database {word}") and not WORK_PERIOD.search(f"the first {word}less run")


def test_no_file_counts_work_periods():
    found = []
    for top in SCANNED:
        paths = [ROOT / top] if (ROOT / top).is_file() else sorted((ROOT / top).rglob("*"))
        for path in paths:
            if path.suffix not in (".md", ".py", ".html", ".yml", ".yaml", ".txt", ".toml") or not path.is_file():
                continue
            for match in WORK_PERIOD.finditer(path.read_text(encoding="utf-8", errors="replace")):
                found.append(f"{path.relative_to(ROOT)}: {match.group(0)!r}")
    assert not found, "say what was run, when and on which machine instead:\n" + "\n".join(found)


def test_every_results_page_says_when_where_and_what():
    pages = [p for p in RESULTS.glob("*.md") if p.name != "index.md"]
    assert len(pages) >= 10
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert re.match(r"\d{4}-\d\d-\d\d-[a-z0-9-]+\.md$", page.name), f"{page.name}: name it DATE-what-was-run.md"
        assert text.startswith("# "), f"{page.name} has no title"
        assert re.search(r"machine|CPU|GPU|Xeon|EPYC|H200", text), f"{page.name} names no machine"
        assert re.search(r"`[^`]*(sparring|python|pytest)[^`]*`", text), f"{page.name} gives no command"
    for image in RESULTS.glob("*.png"):  # every plot is shown on a page
        assert any(f"]({image.name})" in p.read_text(encoding="utf-8") for p in pages), f"{image.name} is on no page"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs", reason="MkDocs comes with `scripts/setup --dev` (requirements-dev.txt)")
    pytest.importorskip("mkdocs_gen_files", reason="mkdocs-gen-files comes with `scripts/setup --dev`")
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"},  # a plugin's banner
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def test_the_manual_builds_strict_with_every_page(site):
    for page in ("getting-started", "concepts", "playing", "datasets", "training", "evaluation", "viewer",
                 "scaling", "troubleshooting", "settings", "cli", "results"):
        assert (site / page / "index.html").is_file(), page


def test_game_pages_hold_the_registry_facts(site):
    for name, game in game_registry().items():
        html = _page(site, f"games/{name}")
        assert "At a glance" in html and game.description.split(":")[0][:40] in html
        for seat in game.seats:
            assert f"<code>{seat.name}</code>" in html, (name, seat.name)
        for seat, gate in game.gate_metrics.items():
            assert f"<code>{gate.name}</code>" in html
        for bot in game.bots:
            assert f"scripted:{bot}" in html


def test_settings_and_cli_references_are_generated(site):
    settings = _page(site, "settings")
    for field in Settings.model_fields:
        assert f"SPARRING_{field.upper()}" in settings
    cli = _page(site, "cli")
    for command in ("sparring play", "sparring runs show", "sparring episodes list", "sparring retrain"):
        assert f"{command}</h2>" in cli or f"{command}<a" in cli, command


def test_the_results_index_lists_every_results_page(site):
    index = _page(site, "results")
    for page in RESULTS.glob("*.md"):
        if page.name != "index.md":
            assert f'href="{page.stem}/"' in index, page.name
