"""The learning-curve and ratings plots of `sparring report`, drawn for the viewer.

``evaluation.report`` reads the series and retrain rounds and draws them; the PNGs are kept in
a folder per state of the report (a digest of its runs), so a page view redraws nothing until
a new evaluation or round lands.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
import threading
from pathlib import Path

from sqlalchemy import Engine

from evaluation.report import StoreReport, read_report, write_page

PNG_NAME = re.compile(r"^series-\d+\.png$")


class Plots:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="sparring-serve-plots-"))
        self._lock = threading.Lock()

    def current(self, engine: Engine, store: str) -> tuple[StoreReport, str]:
        """The report and the name of the folder its PNGs are in (drawn if new)."""
        report = read_report(engine)
        key = hashlib.sha256(repr([(p.run_id, p.started_at) for s in report.series for p in s.points]
                                  + [(r["run_id"], r["role"]) for r in report.rounds]).encode()).hexdigest()[:16]
        with self._lock:
            folder = self.root / key
            if report.series and not folder.exists():
                staging = Path(tempfile.mkdtemp(dir=self.root))
                write_page(report, staging, store=store)
                staging.rename(folder)
        return report, key

    def png(self, key: str, name: str) -> Path | None:
        """The PNG ``name`` of the report state ``key``; None if there is none (or the name is not one)."""
        if not re.fullmatch(r"[0-9a-f]{16}", key) or not PNG_NAME.match(name):
            return None
        path = self.root / key / name
        return path if path.is_file() else None
