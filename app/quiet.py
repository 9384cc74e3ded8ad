"""Keep library noise out of the user's console: it goes to a log file unless ``--verbose``.

transformers, datasets, TRL and friends print FutureWarnings, "Loading weights" and
"Generating train split" progress bars and advice meant for their developers. The `sparring`
process sets itself up once at start-up, before any of them is imported:

- their tqdm progress bars are switched off (through the environment, so child processes,
  such as the trainer ``sparring retrain`` spawns, inherit it);
- Python warnings and log records (TRL's and accelerate's loggers propagate to the root
  logger) are written to the log file; transformers' and datasets' own console loggers are
  limited to errors;
- file descriptor 2 points at the log file, so whatever a child process or a C library writes
  to stderr lands there too, while ``sys.stderr`` (sparring's messages, progress, errors and
  tracebacks) keeps writing to the console.

The log is ``SPARRING_DATA_DIR/sparring.log`` (default ``sparring-data/sparring.log``),
appended to, one header line per command.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

LOG_NAME = "sparring.log"

QUIET_ENVIRONMENT = {
    "TQDM_DISABLE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' bars ("Loading weights") follow this one
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "DATASETS_VERBOSITY": "error",
    "TRL_EXPERIMENTAL_SILENCE": "1",  # TRL's warning that GRPO's rollout_func is experimental
}
"""set unless the user set them: what switches the libraries' console output off"""


@dataclass(frozen=True)
class StartUp:
    """What the ``sparring`` entry point hands the CLI's callback: set this process's console
    up there. Tests that call the typer app in-process do not pass it and keep their streams."""


def log_path() -> Path | None:
    """Where library output goes: the data directory's log; None when the settings are invalid
    (the command itself then reports them, and nothing is written anywhere)."""
    from app.settings import SettingsError, load_settings

    try:
        return Path(load_settings().data_dir) / LOG_NAME
    except SettingsError:
        return None


def quiet_console(path: Path) -> bool:
    """Send library output of this process and its children to ``path``; False (nothing
    changed) when the log cannot be opened or stderr is not a file descriptor."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        log = open(path, "a", buffering=1, encoding="utf-8")  # open as long as the process lives
        stderr_fd = sys.stderr.fileno()
    except (OSError, ValueError, AttributeError):
        return False
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    log.write(f"\n== {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: "
              f"{shlex.join(['sparring', *sys.argv[1:]])}\n")
    console = os.fdopen(os.dup(stderr_fd), "w", buffering=1, encoding=sys.stderr.encoding,
                        errors=sys.stderr.errors or "backslashreplace")
    sys.stderr.flush()
    os.dup2(log.fileno(), stderr_fd)
    sys.stderr = console
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.captureWarnings(True)
    return True
