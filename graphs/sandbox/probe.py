"""What this machine lets the sandbox use, found once per process by trying it."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from graphs.sandbox import cgroup, confine

HERE = Path(__file__).resolve().parent
BOOT = f"import sys; sys.path.insert(0, {str(HERE)!r}); import runner; runner.main()"
"""the program the sandboxed interpreter runs: this folder's runner"""
PYTHON_FLAGS = ("-P", "-S", "-B")
"""no script folder or site-packages on sys.path, no bytecode files written"""
DEFAULT_RUN_AS = 64000
"""the uid the code runs as when sparring runs as root: root ignores RLIMIT_NPROC and file
permissions, so the sandbox never runs code as root"""
_PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Layers:
    landlock_abi: int
    """0: no Landlock"""
    seccomp: bool
    namespaces: bool
    """user, network and PID namespaces (util-linux ``unshare``) work here"""
    drop_to: int | None
    """the uid the code runs as (via ``setpriv``) when sparring runs as root; None: sparring's own"""
    uid: int
    """the uid the code runs as"""
    setpriv: str | None
    unshare: str | None
    python: str = ""
    """the interpreter that runs the code"""
    python_paths: tuple[str, ...] = ()
    """its installation folders (readable under Landlock when reads are ``system``)"""
    python_reads: tuple[str, ...] = ()
    """the narrow read allow-list (reads ``python``): the standard library without its
    site-packages, the files the interpreter has mapped, the folder of the C library"""
    cgroup: str | None = None
    """the memory cgroup under which each run gets its own; None where none can be made"""
    startable: str | None = None
    """why the sandbox cannot start an interpreter at all; None when it can"""

    def missing(self) -> dict[str, str]:
        """What strict mode needs and this machine lacks: kind -> why."""
        missing = {}
        if not self.landlock_abi:
            missing["filesystem"] = "no Landlock to confine writes (needs Linux >= 5.13 with Landlock enabled)"
        if not (self.namespaces or self.seccomp):
            missing["network"] = ("neither a network namespace (unshare --user --net failed) nor a seccomp "
                                  "filter (Linux on x86_64 or aarch64) to deny sockets")
        if self.uid == 0:
            missing["processes"] = ("the code would run as root, which RLIMIT_NPROC does not bind (install "
                                    "util-linux's setpriv to run it as an unprivileged uid)")
        return missing

    def prefix(self) -> list[str]:
        """The command that starts the sandboxed interpreter, without the interpreter."""
        command: list[str] = []
        if self.drop_to is not None and self.setpriv:
            command += [self.setpriv, f"--reuid={self.drop_to}", f"--regid={self.drop_to}", "--clear-groups", "--"]
        if self.namespaces and self.unshare:
            gid = self.drop_to if self.drop_to is not None else os.getgid()
            command += [self.unshare, "--user", f"--map-user={self.uid}", f"--map-group={gid}", "--net", "--pid",
                        "--fork", "--kill-child", "--"]
        return command


@functools.cache
def probe(run_as: int = DEFAULT_RUN_AS) -> Layers:
    """The layers this machine offers and the interpreter that runs under them (cached: the
    answer does not change while sparring runs)."""
    root = os.geteuid() == 0
    setpriv, unshare = shutil.which("setpriv"), shutil.which("unshare")
    drop_to = run_as if root and setpriv else None
    uid = drop_to if drop_to is not None else os.getuid()
    found = Layers(confine.landlock_abi(), confine.seccomp_supported(), False, drop_to, uid, setpriv, unshare)
    failures = []
    for namespaces in ((True, False) if unshare else (False,)):
        layers = replace(found, namespaces=namespaces)
        for python in _interpreters():
            started = _start(layers, python)
            if isinstance(started, tuple):
                paths, reads = started
                group = cgroup.parent()
                return replace(layers, python=python, python_paths=paths, python_reads=reads,
                               cgroup=None if group is None else str(group))
            failures.append(started)
    return replace(found, startable="; ".join(dict.fromkeys(failures)))


def _interpreters() -> list[str]:
    """sparring's interpreter, then the same Python version on PATH: the code's uid may not be
    allowed into the folder of the first (a virtual environment under /root)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [sys.executable, shutil.which(version, path="/usr/local/bin:/usr/bin:/bin")]
    return list(dict.fromkeys(p for p in found if p))


_PATHS = ("import json, sys, sysconfig; print(json.dumps([[sys.base_prefix, sysconfig.get_path('stdlib'), "
          "sysconfig.get_path('platstdlib')], sorted({l.split()[-1] for l in open('/proc/self/maps') "
          "if l.split()[-1].startswith('/')})]))")
_SYSTEM_READS = ("/bin", "/usr/bin", "/usr/lib/locale", "/etc/ld.so.cache", "/etc/localtime")
"""besides the standard library: programs the code may start, locale data, the loader's cache"""
_PACKAGES = ("site-packages", "dist-packages")


def _start(layers: Layers, python: str) -> tuple[tuple[str, ...], tuple[str, ...]] | str:
    """The interpreter's installation folders and narrow read allow-list when it starts under
    these layers and can read the runner, else why it cannot."""
    command = [*layers.prefix(), python, *PYTHON_FLAGS, "-c", BOOT.replace("runner.main()", _PATHS)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, cwd="/",
                              env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{command[0]}: {exc}"
    if done.returncode != 0:
        return f"`{' '.join(command[:-2])}` failed: {done.stderr.strip()[-300:] or f'exit code {done.returncode}'}"
    folders, mapped = json.loads(done.stdout)
    return tuple(os.path.realpath(p) for p in folders), _narrow_reads(folders[1:], mapped)


def _narrow_reads(stdlib: list[str], mapped: list[str]) -> tuple[str, ...]:
    """The read allow-list narrower than the system folders: each entry of the standard
    library but its installed packages, the files mapped at start, the C library's folder
    (where the extension modules' libraries are), and ``_SYSTEM_READS``."""
    reads: set[str] = set(_SYSTEM_READS)
    for folder in dict.fromkeys(os.path.realpath(p) for p in stdlib):
        try:
            reads.update(os.path.join(folder, name) for name in os.listdir(folder) if name not in _PACKAGES)
        except OSError:
            continue
    for path in mapped:
        reads.add(os.path.realpath(path))
        if os.path.basename(path).startswith("libc.so"):
            reads.add(os.path.dirname(os.path.realpath(path)))
    return tuple(sorted(reads))
