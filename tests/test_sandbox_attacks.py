"""Attacks on the sandbox and its judge, one per finding of the trust campaign: code that tries
to pass without being right passes nothing, code never makes ``Sandbox.run`` raise, and each
bound (memory per run, disk bytes and files, reads) holds."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from graphs.code_debug.bots import cheater
from graphs.code_debug.tasks import SHIPPED
from graphs.sandbox import Limits, Sandbox, Status, Violation
from graphs.sandbox.probe import probe

pytestmark = pytest.mark.skipif(probe().missing() != {} or probe().startable is not None,
                                reason="this machine cannot give the sandbox its strict layers: "
                                       f"{probe().missing() or probe().startable}")

TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(5, 7) == 12"]
REFERENCE = "def add(a, b):\n    return a + b\n"

ALWAYS_EQUAL = ("class Anything:\n    def __eq__(self, other):\n        return True\n"
                "    def __ne__(self, other):\n        return False\n"
                "def add(a, b):\n    return Anything()\n")
INT_SUBCLASS = ("class Sly(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
                "def add(a, b):\n    return Sly(0)\n")
PATCH_RUNNER = ("import sys\nsys.modules['runner']._check = lambda test, scope: None\n"
                "def add(a, b):\n    return 0\n")
IMPORT_RUNNER = "import runner\nrunner._check = lambda test, scope: None\ndef add(a, b):\n    return 0\n"
FRAME_RUNNER = ("import sys\nframe = sys._getframe()\nwhile frame.f_back is not None:\n    frame = frame.f_back\n"
                "g = frame.f_globals\ng['_check'] = lambda *a: None\n"
                "g['_emit'] = lambda fd, line: None\n"
                "def add(a, b):\n    return 0\n")
FORGED_REPORT = ("import os\nfor fd in range(3, 64):\n    try:\n        for i in range(3):\n"
                 "            os.write(fd, b'{\"test\": %d, \"passed\": true, \"value\": 0}\\n' % i)\n"
                 "        os.write(fd, b'{\"done\": true}\\n{\"exit\": 0, \"signal\": null, \"cpu_s\": 0.1}\\n')\n"
                 "    except OSError:\n        pass\nos._exit(0)\n")
FORGED_INTERNAL = ("import os\nfor fd in range(3, 64):\n    try:\n"
                   "        os.write(fd, b'{\"internal\": \"RuntimeError: forged\"}\\n')\n"
                   "    except OSError:\n        pass\nos._exit(0)\n")
PASSED_KEY = ("import os\ndef add(a, b):\n    return a * b + 5\n"
              "for fd in range(3, 64):\n    try:\n"
              "        os.write(fd, b'{\"test\": 0, \"passed\": true, \"value\": 3}\\n')\n"
              "    except OSError:\n        pass\n")


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    """(8 + 2) x 256 MiB within run_memory_mb: the same 8 processes with or without a memory cgroup."""
    return Sandbox(Limits(cpu_s=1, wall_s=30, memory_mb=256, file_size_mb=1, processes=8, run_memory_mb=2560))


@pytest.mark.parametrize("code", [ALWAYS_EQUAL, INT_SUBCLASS, PATCH_RUNNER, IMPORT_RUNNER, FRAME_RUNNER,
                                  FORGED_REPORT, FORGED_INTERNAL, PASSED_KEY],
                         ids=["always-equal", "int-subclass", "patch-runner", "import-runner", "frame-runner",
                              "forged-report", "forged-internal", "forged-line-before-its-own"])
def test_a_trick_passes_no_test_and_never_makes_the_sandbox_raise(sandbox, code):
    result = sandbox.run(code, TESTS, REFERENCE)
    assert result.passed == 0 and result.status != Status.PASSED, result.failures()


def test_the_honest_fix_still_passes_and_a_wrong_value_is_shown(sandbox):
    assert sandbox.run(REFERENCE, TESTS, REFERENCE).status == Status.PASSED
    result = sandbox.run(ALWAYS_EQUAL, TESTS, REFERENCE)
    assert result.checks[0].error == "AssertionError: got <solution.Anything object>"


def test_the_harness_is_neither_importable_nor_in_sys_modules(sandbox):
    code = ("import sys\ndef where():\n    try:\n        import runner\n    except ImportError as exc:\n"
            "        return [type(exc).__name__, sorted(m for m in ('runner', 'plain', 'guard', 'confine') "
            "if m in sys.modules)]\n    return 'imported'\n")
    result = sandbox.run(code, ["assert where() == ['ModuleNotFoundError', []]"])
    assert result.status == Status.PASSED, result.failures()


def test_the_expected_values_never_enter_the_run(sandbox):
    code = ("import sys\ndef add(a, b):\n    seen = []\n    frame = sys._getframe()\n    while frame:\n"
            "        seen += [repr(v) for v in frame.f_locals.values()]\n        frame = frame.f_back\n"
            "    return str(424241 + 1) in ' '.join(seen)\n")
    result = sandbox.run(code, ["assert add(1, 2) == 424242"])
    assert result.checks[0].error == "AssertionError: got False"


def test_a_trace_test_compares_calls_with_the_reference(sandbox):
    reference = "def rotate(items, k):\n    return items[k:] + items[:k]\n"
    tests = ["def test_keeps_items():\n    items = [1, 2, 3, 4, 5]\n    assert sorted(rotate(items, 2)) == items\n"
             "    assert items == [1, 2, 3, 4, 5]", "assert rotate([1, 2], 0) is not None"]
    assert sandbox.run(reference, tests, reference).status == Status.PASSED
    mutating = "def rotate(items, k):\n    items.reverse()\n    items.reverse()\n    return items[k:] + items[:k]\n"
    assert sandbox.run(mutating, tests, reference).status == Status.PASSED  # same values, same calls
    lying = ("class Anything(list):\n    def __eq__(self, other):\n        return True\n"
             "def rotate(items, k):\n    return Anything()\n")
    result = sandbox.run(lying, tests, reference)
    assert result.passed == 0 and result.checks[0].error == "AssertionError"
    assert result.checks[1].error == "the code's calls gave other values than the reference's"
    untrusted = sandbox.run(reference, tests)
    assert untrusted.status == Status.PASSED and [c.trusted for c in untrusted.checks] == [False, False]


def test_the_cheater_bot_passes_no_shipped_task(sandbox):
    tasks = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    for task in [tasks[0], tasks[40], *[t for t in tasks if any(x.startswith("def test") for x in t["tests"])][:1]]:
        answer = cheater([{"role": "user", "content": f"```python\n{task['buggy']}```"}], None)
        code = answer.split("```python\n", 1)[1].rsplit("```", 1)[0]
        result = sandbox.run(code, task["tests"], task["reference"])
        assert result.passed == 0 and result.status != Status.PASSED, (task["id"], result.failures())


def test_a_deep_tree_is_judged_and_cleaned_up():
    """Deeper than shutil.rmtree's recursion (about 1,000 levels on Python 3.11)."""
    code = ("import os\ndef grow():\n    print(os.getcwd(), flush=True)\n    for _ in range(1500):\n"
            "        os.mkdir('d')\n        os.chdir('d')\n    return 1\n")
    result = Sandbox(Limits(cpu_s=10, wall_s=30, files=5000)).run(code, ["assert grow() == 1"])
    assert result.status == Status.PASSED, result.failures()
    workdir = result.stdout.strip().splitlines()[0]
    assert workdir.startswith(os.path.realpath(tempfile.gettempdir())) and not Path(workdir).exists()


def test_code_nested_past_the_compiler_is_a_syntax_error(sandbox):
    result = sandbox.run("x = " + "(" * 100000 + ")" * 100000 + "\n", ["assert x == ()"])
    assert result.status == Status.SYNTAX_ERROR


@pytest.mark.parametrize(("code", "why"), [
    ("def fill():\n    for i in range(80):\n        open(f'f{i}', 'wb').write(b'x' * 1000000)\n",
     "more than 64 MiB"),
    ("def fill():\n    for i in range(50000):\n        open(f'f{i}', 'w').close()\n", "more than 1000 files"),
], ids=["bytes", "files"])
def test_the_working_folder_is_bounded_in_bytes_and_files(code, why):
    result = Sandbox(Limits(cpu_s=5, wall_s=30)).run(code, ["fill()"])
    assert (result.status, result.violation) == (Status.VIOLATION, Violation.DISK), result.failures()
    assert result.cause == f"stopped at the disk limit: {why}"


@pytest.mark.skipif(probe().cgroup is None, reason="no memory cgroup can be made here")
def test_memory_is_bounded_per_run_across_processes():
    code = ("import os\ndef hog():\n    kids = []\n    for _ in range(6):\n        pid = os.fork()\n"
            "        if pid == 0:\n            block = b'x' * (200 << 20)\n            import time\n"
            "            time.sleep(5)\n            os._exit(0)\n        kids.append(pid)\n"
            "    for pid in kids:\n        os.waitpid(pid, 0)\n")
    sandbox = Sandbox(Limits(cpu_s=5, wall_s=20, memory_mb=256, run_memory_mb=512, processes=8))
    assert "memory: cgroup, 512 MiB for the whole run" in sandbox.describe()
    result = sandbox.run(code, ["hog()"])
    assert (result.status, result.violation) == (Status.VIOLATION, Violation.MEMORY), result.failures()
    assert "512 MiB" in result.cause


def test_without_a_cgroup_processes_times_memory_stay_within_the_run_total():
    sandbox = Sandbox(Limits(memory_mb=256, run_memory_mb=1024, processes=16), layers=replace(probe(), cgroup=None))
    assert sandbox.processes == 2
    assert "memory: no cgroup here; 2 processes + 2 x 256 MiB, within 1024 MiB for the whole run" in sandbox.describe()
    result = sandbox.run("import os\ndef bomb():\n    while True:\n        os.fork()\n", ["bomb()"])
    assert result.violation == Violation.PROCESSES


@pytest.mark.parametrize("path", ["/etc/hostname", "/etc/passwd", str(SHIPPED)])
def test_reads_are_narrower_than_the_system_folders_by_default(sandbox, path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not on this machine")
    code = f"def peek():\n    try:\n        return len(open({path!r}).read()) * 0\n    except OSError as exc:\n" \
           "        return type(exc).__name__\n"
    assert sandbox.run(code, ["assert peek() == 'PermissionError'"]).status == Status.PASSED
    broad = Sandbox(Limits(cpu_s=1, wall_s=30), reads="system")
    if path.startswith("/etc"):
        assert broad.run(code, ["assert peek() == 0"]).status == Status.PASSED


def test_the_standard_library_still_imports_under_the_narrow_reads(sandbox):
    code = "import json, decimal, sqlite3, zlib, subprocess\ndef ok():\n    return json.dumps([1])\n"
    result = sandbox.run(code, ["assert ok() == '[1]'"])
    assert result.status == Status.PASSED, result.failures()
