"""The sandbox for model-written code: every limit is proved by code that breaks it, and each
ends as a judged result naming the cause, never as an exception."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from graphs.sandbox import Limits, Mode, Sandbox, SandboxUnavailable, Status, Violation
from graphs.sandbox.probe import probe

pytestmark = pytest.mark.skipif(probe().missing() != {} or probe().startable is not None,
                                reason="this machine cannot give the sandbox its strict layers: "
                                       f"{probe().missing() or probe().startable}")


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    """(8 + 2) x 256 MiB within run_memory_mb: the same 8 processes with or without a memory cgroup."""
    return Sandbox(Limits(cpu_s=1, wall_s=30, memory_mb=256, file_size_mb=1, processes=8, run_memory_mb=2560))


def _leftovers(marker: str) -> list[str]:
    """Processes whose command line holds ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(pid)
    return found


def test_tests_pass_and_fail_with_what_the_code_gave(sandbox):
    code = "def add(a, b):\n    return a + b + (a == 2)\n"
    result = sandbox.run(code, ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0"])
    assert (result.status, result.passed, result.total) == (Status.FAILED, 2, 3)
    assert result.checks[1].error == "AssertionError: got 5"
    assert result.cause == "2 of 3 tests pass; test 2 fails"
    assert "FAILED assert add(2, 2) == 4\n  AssertionError: got 5" in result.failures()
    assert sandbox.run(code.replace(" + (a == 2)", ""), ["assert add(2, 2) == 4"]).status == Status.PASSED


def test_an_infinite_loop_is_stopped():
    started = time.monotonic()
    result = Sandbox(Limits(cpu_s=1, wall_s=2)).run("def spin():\n    while True:\n        pass\n", ["spin()"])
    assert result.status == Status.VIOLATION and result.violation in (Violation.CPU_TIME, Violation.WALL_TIME)
    assert result.checks[0].error.startswith("not run: stopped after") and time.monotonic() - started < 10


def test_the_limits_are_in_force_inside(sandbox):
    """What the kernel holds the code to (the loop above may meet the wall clock first on a busy machine)."""
    check = ("import resource\n"
             "assert resource.getrlimit(resource.RLIMIT_CPU) == (1, 2)\n"
             "assert resource.getrlimit(resource.RLIMIT_AS) == (256 << 20, 256 << 20)\n"
             "assert resource.getrlimit(resource.RLIMIT_FSIZE) == (1 << 20, 1 << 20)\n"
             "assert resource.getrlimit(resource.RLIMIT_NPROC)[0] >= 8\n"
             "assert resource.getrlimit(resource.RLIMIT_CORE) == (0, 0)")
    result = sandbox.run("", [check])
    assert result.status == Status.PASSED, result.failures()


def test_a_sleeper_past_the_wall_clock_is_killed_with_every_process_it_started():
    marker = "61.%d" % os.getpid()
    code = ("import os, time\n"
            "def hide():\n"
            "    if os.fork() == 0:\n"
            "        os.setsid()\n"
            f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n"
            "    time.sleep(60)\n")
    started = time.monotonic()
    result = Sandbox(Limits(cpu_s=1, wall_s=2)).run(code, ["hide()"])
    assert (result.status, result.violation) == (Status.VIOLATION, Violation.WALL_TIME)
    assert result.cause == "stopped after 2 s of wall-clock time" and time.monotonic() - started < 10
    time.sleep(0.2)
    assert _leftovers(f"sleep {marker}") == []


def test_a_fork_bomb_is_stopped_at_the_process_limit(sandbox):
    code = "import os\ndef bomb():\n    while True:\n        os.fork()\n"
    result = sandbox.run(code, ["bomb()", "assert 1 + 1 == 2"])
    assert (result.status, result.violation) == (Status.VIOLATION, Violation.PROCESSES)
    assert result.checks[0].error.startswith("BlockingIOError") and result.checks[1].passed
    assert result.cause == "stopped at the process limit: os.fork (test 1)"


def test_a_10_gb_allocation_is_refused(sandbox):
    result = sandbox.run("def hog():\n    return bytearray(10 * 1024 ** 3)\n", ["hog()"])
    assert (result.status, result.violation) == (Status.VIOLATION, Violation.MEMORY)
    assert result.checks[0].error == "MemoryError"


def test_a_file_past_the_size_limit_is_refused(sandbox):
    result = sandbox.run("def fill():\n    open('big', 'w').write('x' * (5 << 20))\n", ["fill()"])
    assert (result.status, result.violation) == (Status.VIOLATION, Violation.FILE_SIZE)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A fresh folder in /tmp that any uid may write to, so only the sandbox stands in the way."""
    folder = Path(tempfile.mkdtemp(prefix="sparring-test-outside-", dir="/tmp"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_write_outside_the_directory_is_denied_and_one_inside_works(sandbox, shared_tmp):
    target = shared_tmp / "escaped.txt"
    code = f"def escape():\n    open({str(target)!r}, 'w').write('x')\n"
    result = sandbox.run(code, ["escape()"])
    assert (result.status, result.violation) == (Status.VIOLATION, Violation.FILESYSTEM)
    assert result.checks[0].error.startswith("PermissionError: [Errno 13]")  # the kernel's refusal
    assert not target.exists()
    inside = "def keep():\n    open('note.txt', 'w').write('x')\n    return open('note.txt').read()\n"
    assert sandbox.run(inside, ["assert keep() == 'x'"]).status == Status.PASSED


def test_a_socket_connect_is_denied_tcp_and_unix(sandbox, shared_tmp):
    with socket.socket() as server, socket.socket(socket.AF_UNIX) as unix_server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        unix_path = shared_tmp / "db.sock"
        unix_server.bind(str(unix_path))
        unix_path.chmod(0o777)
        unix_server.listen()
        port = server.getsockname()[1]
        tcp = f"import socket\ndef call():\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n"
        unix = f"import socket\ndef call():\n    socket.socket(socket.AF_UNIX).connect({str(unix_path)!r})\n"
        for code in (tcp, unix):
            result = sandbox.run(code, ["call()"])
            assert (result.status, result.violation) == (Status.VIOLATION, Violation.NETWORK), result.cause


def test_no_secret_is_inherited(sandbox, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.setenv("SPARRING_DATABASE_URL", "postgresql://user:pw@host/db")
    monkeypatch.setenv("HF_TOKEN", "hf_abc")
    code = "import os\ndef key():\n    return os.environ.get('OPENAI_API_KEY')\n"
    result = sandbox.run(code, ["assert key() == 'sk-test-123'",
                                "import os\nassert sorted(os.environ) == ['HOME', 'LANG', 'PATH', 'PYTHONHASHSEED', "
                                "'PYTHONIOENCODING', 'TMPDIR'], sorted(os.environ)"])
    assert (result.status, result.checks[0].error) == (Status.FAILED, "AssertionError: got None")
    assert result.checks[1].passed, result.checks[1].error


def test_code_that_does_not_compile_or_ends_the_process(sandbox):
    result = sandbox.run("def f(:\n    pass\n", ["f()"])
    assert (result.status, result.cause) == (Status.SYNTAX_ERROR, "the code does not compile: invalid syntax (line 1)")
    result = sandbox.run("import os\ndef f():\n    os._exit(3)\n", ["f()"])
    assert result.status == Status.CRASHED and "exit code 3" in result.cause
    result = sandbox.run("raise ValueError('at import')\ndef f():\n    return 1\n", ["assert f() == 1"])
    assert result.checks[0].error == "the code raised ValueError: at import when loaded"


def test_strict_mode_refuses_a_machine_without_the_kernel_layers_and_degraded_mode_denies_in_python(shared_tmp):
    bare = replace(probe(), landlock_abi=0, seccomp=False, namespaces=False)
    with pytest.raises(SandboxUnavailable, match=r"filesystem: no Landlock.*network: neither.*--sandbox degraded"):
        Sandbox(mode=Mode.STRICT, layers=bare)
    degraded = Sandbox(Limits(cpu_s=1, wall_s=30), Mode.DEGRADED, layers=bare)
    assert degraded.deny == {"filesystem", "network", "native"} and "audit hook: denies" in degraded.describe()[-1]
    code = (f"import socket\ndef write():\n    open({str(shared_tmp / 'x')!r}, 'w')\n"
            "def connect():\n    socket.socket()\n")
    result = degraded.run(code, ["write()", "connect()"])
    assert result.violation == Violation.FILESYSTEM and "sandbox: open(" in result.checks[0].error
    assert "denied (network)" in result.checks[1].error and not (shared_tmp / "x").exists()


def test_one_bad_run_never_stops_the_others(sandbox):
    jobs = [("def f():\n    return 1\n", ["assert f() == 1"]),
            ("def f():\n    return bytearray(10 ** 10)\n", ["f()"]),
            ("def f(:\n", ["f()"])]
    with ThreadPoolExecutor(3) as pool:
        statuses = [r.status for r in pool.map(lambda job: sandbox.run(*job), jobs)]
    assert statuses == [Status.PASSED, Status.VIOLATION, Status.SYNTAX_ERROR]
