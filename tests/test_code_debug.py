"""code-debug: code in answers, seeded mutations, the shipped tasks and task files, and the
game played (in the sandbox), logged, measured, built into datasets and judged (tests, and a
judge model's quality score), through the runner and the CLI; one test on the bundled model."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from cli_calls import cli, refused
from game_runs import play_one_run
from model_logs import as_model_turns
from sqlalchemy import select
from unconstrained import UnconstrainedBackend

from graphs.code_debug.code import extract_code
from graphs.code_debug.game import GAME
from graphs.code_debug.make_tasks import tasks_of
from graphs.code_debug.mutate import mutate, mutations, normalise
from graphs.code_debug.tasks import DATA, SHIPPED, load_code_tasks, read_tasks, split_of
from graphs.policies.base import SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.registry import scripted_bot
from graphs.sandbox import Limits, Sandbox
from graphs.sandbox.probe import probe
from graphs.tasks.base import Task, TaskSourceError
from storage.engine import open_store
from storage.models import Episode, EpisodePayload, Judgment, Reward, Turn
from training.datasets import build_snapshot, load_snapshot
from training.datasets.errors import EmptyDatasetError

needs_sandbox = pytest.mark.skipif(bool(probe().missing()) or probe().startable is not None,
                                   reason=f"no strict sandbox here: {probe().missing() or probe().startable}")
SHIPPED_ROWS = [json.loads(line) for line in SHIPPED.read_text().splitlines()]


# --- code, mutations and tasks -------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("Here:\n```python\ndef f(x):\n    return x\n```\nDone.", "def f(x):\n    return x\n"),
    ("```\nimport os\n```\n```py\ndef g():\n    pass\n```", "def g():\n    pass\n"),
    ("Fixed:\n```python\ndef f(x):\n    return x + 1", "def f(x):\n    return x + 1\n"),  # cut off before the fence
    ("The fix is\ndef f(x):\n    return x\n", "def f(x):\n    return x\n"),
    ("I do not know.", None),
])
def test_the_code_of_an_answer_is_found(text, expected):
    assert extract_code(text) == expected


def test_a_mutation_changes_one_place_and_another_undoes_it():
    code = normalise("def f(xs):\n    # comment\n    return [x for x in xs if x < 2 and x != 0]\n")
    found = mutations(code)
    assert {m.kind for m in found} == {"comparison", "boolean", "constant"}
    assert "'<' became '<=' on line 2" in [m.description for m in found]
    assert all(code in [undo.code for undo in mutations(m.code)] for m in found)
    assert mutate(code, seed=3) == mutate(code, seed=3) and mutate("x = y\n", seed=0) is None


def _passes(code: str, test: str) -> bool:
    """A test run in-process, as the sandbox's runner runs it (the shipped tasks are trusted code)."""
    scope: dict = {"__name__": "solution"}
    exec(code, scope)
    before = set(scope)
    try:
        exec(test, scope)
        for name in [n for n in scope if n not in before and n.startswith("test") and callable(scope[n])]:
            scope[name]()
    except Exception:
        return False
    return True


def test_over_fifty_tasks_ship_each_reference_passing_and_each_bug_failing_a_test():
    tasks = read_tasks(SHIPPED, split=None)
    assert len(tasks) >= 50 and len({t.id for t in tasks}) == len(tasks)
    for task in tasks:
        assert all(_passes(task.answer, test) for test in task.meta["tests"]), task.id
        assert not all(_passes(task.meta["buggy"], test) for test in task.meta["tests"]), task.id
        assert normalise(task.answer) in [m.code for m in mutations(task.meta["buggy"])], task.id  # one site
    train, heldout = (load_code_tasks("code-debug", n=None, seed=0, split=s) for s in ("train", "heldout"))
    assert len(train) + len(heldout) == len(tasks) and len(heldout) >= 20
    assert {t.split for t in train} == {"train"} and {t.split for t in heldout} == {"heldout"}
    assert not {t.id.split("/")[0] for t in train} & {t.id.split("/")[0] for t in heldout}  # split by reference
    assert [t.id for t in load_code_tasks("code-debug", n=5, seed=1, split="train")] == [
        t.id for t in load_code_tasks("code-debug", n=5, seed=1, split="train")]
    assert split_of("sum-list/1") == split_of("sum-list/2")


@needs_sandbox
def test_the_shipped_bugs_are_what_the_seeded_maker_makes():
    references = [json.loads(line) for line in (DATA / "references.jsonl").read_text().splitlines()]
    sandbox = Sandbox(Limits(cpu_s=2, wall_s=30))
    for row in references[:2]:
        made, problem = tasks_of(row, sandbox)
        assert problem is None and made == [r for r in SHIPPED_ROWS if r["id"].split("/")[0] == row["id"]]


GOOD = {"description": "Add one.", "reference": "def inc(x):\n    return x + 1\n",
        "buggy": "def inc(x):\n    return x + 2\n", "tests": ["assert inc(1) == 2"]}


@pytest.mark.parametrize(("line", "expected"), [
    ("[1, 2]", "tasks.jsonl:2: expected a JSON object like"),
    ({k: v for k, v in GOOD.items() if k != "tests"}, "tasks.jsonl:2: 'tests' must be a non-empty list of strings"),
    ({k: v for k, v in GOOD.items() if k != "reference"}, "tasks.jsonl:2: missing key 'reference'"),
    ({**GOOD, "buggy": "def inc(x):\n    return x +\n"},
     "tasks.jsonl:2: 'buggy' is not valid Python (invalid syntax at line 2 of it)"),
    ({**GOOD, "tests": ["assert inc(1) ==="]}, "tasks.jsonl:2: 'test 1' is not valid Python"),
    ("{not json", "tasks.jsonl:2: not valid JSON"),
    ({**GOOD, "id": "a"}, "tasks.jsonl:2: id 'a' is used twice (first at tasks.jsonl:1)"),
])
def test_a_task_file_of_the_wrong_shape_names_the_file_line_and_fix(tmp_path, line, expected):
    path = tmp_path / "tasks.jsonl"
    second = line if isinstance(line, str) else json.dumps(line)
    path.write_text(json.dumps({**GOOD, "id": "a"}) + "\n" + second + "\n")
    with pytest.raises(TaskSourceError) as caught:
        load_code_tasks(str(path), n=None, seed=0)
    assert expected in str(caught.value)


def test_task_files_and_specs(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "buggy": None, "id": "no-bug"}) + "\n")
    tasks = load_code_tasks(str(path), n=None, seed=0)
    assert sorted(t.id for t in tasks) == ["mine.jsonl:1", "no-bug"] and {t.split for t in tasks} == {"eval"}
    assert next(t for t in tasks if t.id == "no-bug").meta["buggy"] is None
    with pytest.raises(TaskSourceError, match="unknown task source 'arithmetic' for code-debug"):
        load_code_tasks("arithmetic", n=1, seed=0)
    with pytest.raises(TaskSourceError, match="have the splits train, heldout"):
        load_code_tasks("code-debug", n=1, seed=0, split="eval")


# --- played through the runner -------------------------------------------------------------------


def _task_of(messages, tasks: list[Task]) -> Task:
    return next(t for t in tasks if t.question in messages[0]["content"])


def _play(store_url: str, tasks: list[Task], policies: dict[str, Policy], **options):
    engine = open_store(store_url)
    report, run_id = play_one_run(engine, GAME, tasks, policies, concurrency=3, **options)
    return engine, report, run_id


def _answer(code: str) -> str:
    return f"Here is the fix.\n\n```python\n{code}```"


def _bot(function) -> Policy:
    """A scripted policy whose answers are never cut (a scripted token is a byte)."""
    return Policy(ScriptedBackend.from_function(function), SamplingParams(max_new_tokens=4096))


@needs_sandbox
def test_played_logged_measured_and_built_into_every_kind(store_url, tmp_path):
    tasks = load_code_tasks("code-debug", n=5, seed=0, split="train")
    asked: Counter[str] = Counter()

    def right_first(messages, request) -> str:  # the first sample of a task fixes it, the second keeps the bug
        task = _task_of(messages, tasks)
        asked[task.id] += 1
        return _answer(task.answer if asked[task.id] == 1 else task.meta["buggy"])

    engine, report, run_id = _play(store_url, [t for t in tasks for _ in range(2)],
                                   {"fixer": _bot(right_first)})
    assert report.count("succeeded") == 10 and sorted(e.reward for e in report.episodes) == [0.0] * 5 + [1.0] * 5
    assert {e.outcome["bug_source"] for e in report.episodes} == {"task"}
    with engine.connect() as conn:
        judged = list(conn.execute(select(Judgment.rubric, Judgment.judge_policy, Judgment.scored_seat,
                                          Judgment.score)))
        statuses = Counter(r.info["status"] for r in conn.execute(select(Reward).where(Reward.name == "correct")))
    assert len(judged) == 10 and {j[:3] for j in judged} == {("tests", "sandbox", "fixer")}
    assert Counter(score == 1.0 for *_, score in judged) == {True: 5, False: 5} and statuses == {"passed": 5,
                                                                                               "failed": 5}
    metrics = GAME.metrics(engine, run_id).metrics
    rate = metrics["tests_pass_rate"]
    assert (rate.value, rate.n) == (0.5, 5) and rate.low <= 0.5 <= rate.high
    assert metrics["final_pass_rate"].value == 0.5 and 0.5 < metrics["tests_passed_fraction"].value < 1.0
    assert (metrics["violation_rate"].value, metrics["violation_rate"].n) == (0.0, 10)
    assert metrics["syntax_error_rate"].value == 0.0 and "code_quality" not in metrics

    as_model_turns(store_url, "fixer")
    rows = {}
    for kind in ("sft", "dpo", "kto", "ppo", "reward"):
        built = build_snapshot(engine, kind, "fixer", game="code-debug", base_model="bundled", out_dir=tmp_path / kind)
        rows[kind] = list(load_snapshot(engine, built.id, role="fixer", base_model="bundled", kind=kind))
        assert rows[kind], kind
    assert len(rows["sft"]) == 5 and all(r["reward"] == 1.0 for r in rows["sft"])
    assert len(rows["dpo"]) == 5 and {r["pair_kind"] for r in rows["dpo"]} == {"group"}
    assert all(r["chosen_reward"] == 1.0 and r["rejected_reward"] < 0.5 for r in rows["dpo"])
    assert sorted(r["reward"] for r in rows["ppo"])[5:] == [1.0] * 5  # credit: (all pass + share passed) / 2
    assert all(r["prompt"][0]["content"].startswith("This Python function has a bug.") for r in rows["ppo"])
    assert all("Its tests say:\n" in r["prompt"][0]["content"] and "FAILED assert" in r["prompt"][0]["content"]
               for r in rows["ppo"])


HOSTILE = {  # what a fix may try, and the violation it must end as
    "cpu_time": "def {name}(*args):\n    while True:\n        pass\n",
    "processes": "import os\ndef {name}(*args):\n    while True:\n        os.fork()\n",
    "memory": "def {name}(*args):\n    return bytearray(10 * 1024 ** 3)\n",
    "filesystem": "def {name}(*args):\n    open('/tmp/code-debug-escape-{pid}', 'w').write('x')\n",
    "network": "import socket\ndef {name}(*args):\n    socket.create_connection(('127.0.0.1', 5432), timeout=1)\n",
}


@needs_sandbox
def test_fixes_that_break_the_sandbox_are_judged_failures_and_the_batch_goes_on(store_url, monkeypatch):
    tasks = load_code_tasks("code-debug", n=6, seed=2, split="train")
    kinds = [*HOSTILE, "secret"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-code-debug-test")

    def hostile(messages, request) -> str:
        task = _task_of(messages, tasks)
        name = task.answer.split("def ", 1)[1].split("(", 1)[0]
        kind = kinds[tasks.index(task)]
        if kind == "secret":
            return _answer(f"import os\ndef {name}(*args):\n    return os.environ.get('OPENAI_API_KEY')\n")
        return _answer(HOSTILE[kind].format(name=name, pid=os.getpid()))

    engine, report, run_id = _play(store_url, tasks, {"fixer": _bot(hostile)},
                                   cpu_seconds=1)
    by_kind = {kinds[tasks.index(next(t for t in tasks if t.id == e.task_id))]: e for e in report.episodes}
    assert all(e.status == "succeeded" and e.reward == 0.0 for e in report.episodes)
    for kind in HOSTILE:
        violation = by_kind[kind].outcome["violation"]
        assert violation == kind or (kind == "cpu_time" and violation == "wall_time"), (kind, by_kind[kind].outcome)
    assert by_kind["secret"].outcome["statuses"] == ["failed"] and by_kind["secret"].outcome["violation"] is None
    assert not Path(f"/tmp/code-debug-escape-{os.getpid()}").exists()
    metrics = GAME.metrics(engine, run_id).metrics
    assert (metrics["violation_rate"].value, metrics["violation_rate"].n) == (5 / 6, 6)
    assert metrics["tests_passed_fraction"].value <= 1 / 6


@needs_sandbox
def test_the_cheater_fixer_scores_nothing_and_makes_no_positive_row(store_url, tmp_path):
    """An object equal to everything, the runner patched, a forged report: every fix is judged
    failed, so no reward is positive and no SFT row is made."""
    with_trace_test = [t for t in load_code_tasks("code-debug", n=None, seed=0, split="train")
                       if any(test.startswith("def test") for test in t.meta["tests"])][:1]
    tasks = load_code_tasks("code-debug", n=3, seed=0, split="train") + with_trace_test
    cheat = Policy(scripted_bot("cheater"), SamplingParams(max_new_tokens=4096))
    engine, report, run_id = _play(store_url, tasks, {"fixer": cheat})
    assert [e.status for e in report.episodes] == ["succeeded"] * len(tasks)
    assert all(e.reward == 0.0 and e.outcome["statuses"] != ["passed"] for e in report.episodes)
    with engine.connect() as conn:
        rewards = list(conn.execute(select(Reward.name, Reward.value).where(
            Reward.name.in_(["correct", "tests_passed"]))))
    assert len(rewards) == 2 * len(tasks) and all(value == 0.0 for _, value in rewards)
    as_model_turns(store_url, "fixer")
    with pytest.raises(EmptyDatasetError, match=f"left out: below_threshold={len(tasks)}"):
        build_snapshot(engine, "sft", "fixer", game="code-debug", base_model="bundled", out_dir=tmp_path)


@needs_sandbox
def test_a_second_attempt_sees_what_the_first_failed_and_makes_a_refinement_pair(store_url, tmp_path):
    tasks = load_code_tasks("code-debug", n=3, seed=0, split="train")

    def late(messages, request) -> str:
        task = _task_of(messages, tasks)
        if len(messages) == 1:
            return "I think it is fine as it is."  # no code at all
        assert messages[-1]["content"].startswith("Your fix does not pass yet. The tests say:\nYour answer held no")
        return _answer(task.answer)

    engine, report, run_id = _play(store_url, tasks, {"fixer": _bot(late)},
                                   attempts=2)
    assert [e.outcome["statuses"] for e in report.episodes] == [["no_code", "passed"]] * 3
    metrics = GAME.metrics(engine, run_id).metrics
    assert (metrics["tests_pass_rate"].value, metrics["final_pass_rate"].value) == (0.0, 1.0)
    assert metrics["no_code_rate"].value == 0.5
    as_model_turns(store_url, "fixer")
    built = build_snapshot(engine, "dpo", "fixer", game="code-debug", base_model="bundled", out_dir=tmp_path)
    pairs = list(load_snapshot(engine, built.id, role="fixer", base_model="bundled", kind="dpo"))
    assert len(pairs) == 3 and {p["pair_kind"] for p in pairs} == {"refinement"}


@needs_sandbox
def test_the_breaker_writes_the_bug_and_a_bug_that_fails_no_test_is_replaced(store_url, tmp_path):
    tasks = load_code_tasks("code-debug", n=4, seed=0, split="train")
    file = tmp_path / "nobug.jsonl"
    file.write_text(json.dumps({**GOOD, "buggy": None}) + "\n")
    unshipped = load_code_tasks(str(file), n=None, seed=0)

    def oracle(messages, request) -> str:
        return _answer(_task_of(messages, tasks + unshipped).answer)

    def lazy(messages, request) -> str:  # hands the correct code back: no bug
        return _answer(extract_code(messages[0]["content"]) or "")

    mutator = Policy(scripted_bot("mutator"), SamplingParams(max_new_tokens=4096))
    engine, report, run_id = _play(store_url, tasks, {"fixer": _bot(oracle), "breaker": mutator}, bugs="breaker")
    assert report.count("succeeded") == 4 and all(e.reward == 1.0 for e in report.episodes)
    sources = Counter(e.outcome["bug_source"] for e in report.episodes)
    assert sources["breaker"] >= 1 and set(sources) <= {"breaker", "task"}
    assert GAME.metrics(engine, run_id).metrics["bug_valid_rate"].value == sources["breaker"] / 4

    engine, report, _ = _play(store_url, tasks[:1] + unshipped, {
        "fixer": _bot(oracle), "breaker": _bot(lazy)},
        bugs="breaker")
    assert sorted(e.outcome["bug_source"] for e in report.episodes) == ["mutator", "task"]
    with engine.connect() as conn:
        valid = list(conn.execute(select(Reward.value).where(Reward.name == "bug_valid", Reward.seat == "breaker")
                                  .join(Turn, Turn.id == Reward.turn_id).where(Turn.policy == "scripted:lazy")))
    assert valid == [(0.0,), (0.0,)]


@needs_sandbox
def test_a_judge_model_scores_code_quality_and_a_nonsense_one_fails_only_its_episode(store_url):
    tasks = load_code_tasks("code-debug", n=3, seed=0, split="heldout")

    def judge(messages, request) -> str:
        return "No idea." if tasks[0].question in messages[-1]["content"] else "Clear and minimal.\nScore: 4"

    policies = {"fixer": _bot(lambda m, r: _answer(_task_of(m, tasks).answer)),
                "judge": Policy(UnconstrainedBackend(judge, bot_name="rubric-judge"), SamplingParams(temperature=0))}
    engine, report, run_id = _play(store_url, tasks, policies)
    failed = [e for e in report.episodes if e.status == "failed"]
    assert len(failed) == 1 and failed[0].task_id == tasks[0].id and "JudgeError" in failed[0].error
    assert [e.outcome["quality"] for e in report.episodes if e.status == "succeeded"] == [0.75, 0.75]
    quality = GAME.metrics(engine, run_id).metrics["code_quality"]
    assert (quality.value, quality.n) == (0.75, 2)
    with engine.connect() as conn:
        scored = list(conn.execute(select(Judgment.score).where(Judgment.rubric == "code_quality",
                                                                Judgment.judge_policy == "scripted:rubric-judge")))
    assert scored == [(0.75,), (0.75,)]


# --- through the CLI ------------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPARRING_DATABASE_URL", f"sqlite:///{tmp_path / 'code.db'}")
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SPARRING_SEATS", "{}")
    return tmp_path


@needs_sandbox
def test_played_built_and_evaluated_from_the_cli_with_scripted_seats(env):
    out = cli("play", "code-debug", "-n", "8", "-c", "4", "--samples", "2", "--temperature", "0.7",
              "--max-new-tokens", "4096", "--seat", "fixer=scripted:mutation-undo", "--format", "json")
    played = json.loads(out.strip().splitlines()[-1])[0]
    assert played["succeeded"] == 8 and 0.0 <= played["tests_pass_rate"] <= 1.0
    as_model_turns(f"sqlite:///{env / 'code.db'}", "fixer")
    for kind in ("kto", "ppo"):
        built = json.loads(cli("datasets", "build", kind, "--role", "fixer", "--game", "code-debug",
                               "--format", "json"))[0]
        assert built["rows"] == 8, (kind, built)

    metrics = {m["metric"]: m for m in json.loads(cli(
        "eval", "--game", "code-debug", "-n", "6", "--seat", "fixer=scripted:mutation-undo", "--max-new-tokens",
        "4096", "--bugs", "breaker", "--format", "json"))}
    assert {"tests_pass_rate", "final_pass_rate", "tests_passed_fraction", "violation_rate", "syntax_error_rate",
            "no_code_rate", "bug_valid_rate"} <= set(metrics)
    assert _failed_episodes(env) == [], "an episode failed: its stage and error above"
    for name in ("tests_pass_rate", "tests_passed_fraction", "violation_rate"):
        m = metrics[name]
        assert m["n"] == 6 and m["low"] <= m["value"] <= m["high"], m


def _failed_episodes(env: Path) -> list[tuple[str, str | None, str | None]]:
    """(task, stage, error) of each failed episode of the store: a failure's cause, not only its count."""
    engine = open_store(f"sqlite:///{env / 'code.db'}")
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(Episode.task_id, Episode.error_stage, EpisodePayload.error)
                                     .join(EpisodePayload, EpisodePayload.episode_id == Episode.id)
                                     .where(Episode.status == "failed")))
    finally:
        engine.dispose()


def test_bad_input_is_refused_with_the_fix(env):
    assert "--turns: not an option of code-debug (its options: --bugs, --attempts, --sandbox, --cpu-seconds)" in (
        refused("play", "code-debug", "--turns", "2"))
    assert "bugs must be one of task, breaker, got 'mine'" in refused("play", "code-debug", "--bugs", "mine")
    assert "sandbox must be one of strict, degraded" in refused("play", "code-debug", "--sandbox", "off")
    bad = env / "gsm8k.jsonl"
    bad.write_text(json.dumps({"question": "What is 2 + 2?", "answer": "#### 4"}) + "\n")
    assert "gsm8k.jsonl:1: missing key 'description'" in refused("play", "code-debug", "--tasks", str(bad))
    assert "mutation-undo" in refused("play", "code-debug", "--seat", "fixer=scripted:fixall")


@pytest.mark.slow
@needs_sandbox
def test_retrain_plays_trains_and_gates_the_fixer_on_a_tiny_model(env, monkeypatch):
    """The tiny random model writes no working fix, so every fixer turn earns 0: PPO rows (their
    advantage is 0, but the round runs through build, train and gate), a candidate and a gate."""
    from tiny_model import save_tiny_model

    monkeypatch.setenv("SPARRING_MODEL", str(save_tiny_model(env / "tiny")))
    out = cli("retrain", "--game", "code-debug", "--roles", "fixer", "--trainer", "ppo", "--once", "--practice", "4",
              "--every-episodes", "8", "--samples", "2", "--eval-tasks", "4", "--max-new-tokens", "8",
              "--max-steps", "1", "--min-rows", "8", "--format", "json")
    (round_,), report = (json.loads(line) for line in out.strip().splitlines()[-2:])
    assert round_["role"] == "fixer" and round_["candidate"] == "fixer@v1", round_
    assert round_["status"] in ("promoted", "rejected") and round_["rows"] >= 8, round_
    assert [m["metric"] for m in report] == list(GAME.report_metrics)


@pytest.mark.slow
@needs_sandbox
def test_the_bundled_model_fixes_code_and_its_fixes_are_judged(env, monkeypatch):
    monkeypatch.delenv("SPARRING_CACHE_DIR")  # the default model cache: converted once per machine
    out = cli("play", "code-debug", "-n", "4", "-c", "4", "--tasks", "code-debug", "--split", "heldout",
              "--max-new-tokens", "96", "--temperature", "0", "--format", "json")
    played = json.loads(out.strip().splitlines()[-1])[0]
    assert played["succeeded"] == 4 and 0.0 <= played["tests_pass_rate"] <= 1.0
    engine = open_store(f"sqlite:///{env / 'code.db'}")
    with engine.connect() as conn:
        fixes = list(conn.execute(select(Turn.served_by, Turn.parsed).where(Turn.seat == "fixer")))
        statuses = [r.info["status"] for r in conn.execute(select(Reward).where(Reward.name == "correct"))]
    assert len(fixes) == 4 and {served for served, _ in fixes} == {"bundled"}
    assert len(statuses) == 4 and set(statuses) <= {"passed", "failed", "syntax_error", "violation", "crashed",
                                                    "no_code"}
