"""Task sources: the arithmetic generator, GSM8K/MATH JSONL files, Hugging Face specs."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from graphs.tasks import default_split, load_tasks
from graphs.tasks.arithmetic import LEVELS, SPLITS, frames_of, problems
from graphs.tasks.arithmetic_families import FAMILIES
from graphs.tasks.arithmetic_frames import FRAMES, GROUPS
from graphs.tasks.base import TaskSourceError

DATA = Path(__file__).parents[1].parent / "shared" / "data"
needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"evaluation data folder {DATA} is absent (it is not part of a user's checkout)"
)


# --- arithmetic ----------------------------------------------------------------------------


def test_no_two_splits_share_a_problem_and_none_repeats_within_one() -> None:
    per_split = 1_000
    questions: dict[str, set[str]] = {}
    for split in SPLITS:
        tasks = [task for level in LEVELS for task in islice(problems(split, level), per_split)]
        questions[split] = {task.question for task in tasks}
        assert len(questions[split]) == len(tasks) == per_split * len(LEVELS)  # no repeats within a split
        assert len({task.id for task in tasks}) == len(tasks)
    for first, second in [(a, b) for a in SPLITS for b in SPLITS if a < b]:
        assert not questions[first] & questions[second], (first, second)


def test_template_held_out_splits_share_no_wording_with_training() -> None:
    """dev and unseen problems come from frames no train (or heldout) problem uses, and each
    other's neither: a held-out result says whether a skill carries over to other wordings."""
    templates = {split: {t.meta["template"] for level in LEVELS for t in islice(problems(split, level), 600)}
                 for split in SPLITS}
    assert templates["heldout"] <= templates["train"]
    for held in ("dev", "unseen"):
        assert not templates[held] & templates["train"], held
    assert not templates["dev"] & templates["unseen"]
    assert len({frame.id for frame in FRAMES}) == len(FRAMES) and len({f.text for f in FRAMES}) == len(FRAMES)


def test_every_trained_family_is_asked_in_other_words_too_and_two_are_held_out_whole() -> None:
    for level in LEVELS:
        trained = set(frames_of(level, "train"))
        for group in ("dev", "unseen"):
            assert trained <= set(frames_of(level, group)), (level, group)
    never_trained = {f.name for f in FAMILIES.values()} - {FAMILIES[f.family].name for f in FRAMES
                                                            if f.group == "train"}
    assert never_trained == {"compare", "div-add"}


def test_level_one_has_thirty_wordings_and_every_operation_in_training() -> None:
    level_one = [f for f in FRAMES if FAMILIES[f.family].level == 1]
    assert len(level_one) >= 30
    trained = list(islice(problems("train", 1), 400))
    operations = {op for t in trained for op in re.findall(r" ([-+*/]) ", t.meta["expression"])}
    assert operations == {"+", "-", "*", "/"}
    counts = {family: sum(t.meta["family"] == family for t in trained) for family in ("add", "sub", "mul", "div")}
    assert min(counts.values()) >= 60, counts  # families come in about equal numbers


def test_problems_are_deterministic_and_named_by_split_level_and_index() -> None:
    first = list(islice(problems("unseen", 2), 18))
    again = list(islice(problems("unseen", 2), 18))
    assert first == again
    task = first[17]
    assert task.id == "arith-unseen-L2-000017"
    assert (task.source, task.split, task.difficulty, task.meta["level"]) == ("arithmetic", "unseen", "L2", 2)
    assert FAMILIES[task.meta["family"]].level == 2 and task.meta["steps"] == 2


def _evaluate(expression: str) -> float:
    return eval(compile(ast.parse(expression, mode="eval"), "<expression>", "eval"), {"__builtins__": {}})


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("group", GROUPS)
def test_each_level_has_integer_answers_every_wording_and_its_number_of_steps(level: int, group: str) -> None:
    split = "train" if group == "train" else group
    tasks = list(islice(problems(split, level), 400))
    for task in tasks:
        expression = task.meta["expression"]
        assert _evaluate(expression) == int(task.answer) >= 0, task
        operations = len(re.findall(r" [-+*/] ", expression))
        assert operations == task.meta["steps"] == FAMILIES[task.meta["family"]].steps, task
        assert {1: operations == 1, 2: operations == 2, 3: operations >= 3, 4: "/" in expression}[level], task
        assert "{" not in task.question and "}" not in task.question, task  # every slot filled
    wordings = {frame.id for frames in frames_of(level, group).values() for frame in frames}
    assert {task.meta["template"] for task in tasks} == wordings


def test_load_tasks_arithmetic_specs() -> None:
    mixed = load_tasks("arithmetic", n=40, seed=1)
    assert {task.difficulty for task in mixed} == {"L1", "L2", "L3", "L4"}
    assert {task.difficulty for task in load_tasks("arithmetic:3", n=5, seed=1)} == {"L3"}
    assert {task.difficulty for task in load_tasks("arithmetic:1-2", n=10, seed=1)} == {"L1", "L2"}
    assert {task.split for task in load_tasks("arithmetic", n=8, seed=1, split="heldout")} == {"heldout"}
    assert len(load_tasks("arithmetic", n=None, seed=1)) == 100


def test_arithmetic_seed_orders_the_same_problems() -> None:
    one, other = load_tasks("arithmetic", n=20, seed=1), load_tasks("arithmetic", n=20, seed=2)
    assert one == load_tasks("arithmetic", n=20, seed=1)
    assert one != other and sorted(t.id for t in one) == sorted(t.id for t in other)


@pytest.mark.parametrize("spec", ["arithmetic:0", "arithmetic:5", "arithmetic:3-1", "arithmetic:x", "arithmetic:1-"])
def test_bad_arithmetic_levels_are_rejected(spec: str) -> None:
    with pytest.raises(TaskSourceError, match="arithmetic:1-3"):
        load_tasks(spec, n=3, seed=0)


def test_unknown_arithmetic_split_is_rejected() -> None:
    with pytest.raises(TaskSourceError, match="train, heldout"):
        load_tasks("arithmetic", n=3, seed=0, split="test")


# --- JSONL files ---------------------------------------------------------------------------


def _write(tmp_path: Path, rows: list[Any], name: str = "tasks.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(row if isinstance(row, str) else json.dumps(row) + "\n" for row in rows))
    return path


@needs_data
def test_bundled_evaluation_files_are_the_expected_bytes() -> None:
    for line in (DATA / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name


@needs_data
def test_all_of_gsm8k_test_loads() -> None:
    tasks = {task.id: task for task in load_tasks(str(DATA / "gsm8k_test.jsonl"), n=None, seed=0)}
    assert len(tasks) == 1319
    first = tasks["gsm8k_test.jsonl:1"]
    assert first.question.startswith("Janet’s ducks lay 16 eggs per day.")
    assert (first.answer, first.source, first.meta["format"]) == ("18", "gsm8k_test.jsonl", "gsm8k")
    assert tasks["gsm8k_test.jsonl:147"].answer == "2125"  # written "#### 2,125"
    assert tasks["gsm8k_test.jsonl:1319"].answer == "14"
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", task.answer) for task in tasks.values())


@needs_data
def test_all_of_math500_loads_with_level_and_subject() -> None:
    tasks = {task.id: task for task in load_tasks(str(DATA / "math500_test.jsonl"), n=None, seed=0)}
    assert len(tasks) == 500
    first = tasks["math500_test.jsonl:1"]
    assert (first.answer, first.difficulty, first.meta["subject"]) == (
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        "2",
        "Precalculus",
    )
    assert first.meta["unique_id"] == "test/precalculus/807.json"
    assert tasks["math500_test.jsonl:2"].answer == "p - q"
    assert tasks["math500_test.jsonl:500"].answer == "106^\\circ"
    assert {task.difficulty for task in tasks.values()} == {"1", "2", "3", "4", "5"}


@needs_data
def test_selection_from_a_file_is_seeded_and_prefix_stable() -> None:
    path = str(DATA / "gsm8k_test.jsonl")
    ten = load_tasks(path, n=10, seed=3)
    assert ten == load_tasks(path, n=10, seed=3)
    assert ten == load_tasks(path, n=25, seed=3)[:10]
    assert [t.id for t in ten] != [t.id for t in load_tasks(path, n=10, seed=4)]


def test_gsm8k_rows(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {"question": "How many?", "answer": "Two and two.\n#### 1,234"},
            "\n",
            {"question": "And now?", "answer": "#### -5"},
        ],
    )
    tasks = load_tasks(str(path), n=None, seed=0)
    assert sorted((t.id, t.answer, t.meta["solution"]) for t in tasks) == [
        ("tasks.jsonl:1", "1234", "Two and two."),
        ("tasks.jsonl:3", "-5", ""),
    ]


def test_a_task_file_is_evaluation_data_unless_the_user_says_train(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"question": "How many?", "answer": "#### 4"}])
    assert (default_split(str(path)), default_split("arithmetic:2"), default_split("hf:openai/gsm8k")) == (
        "eval", "train", "train"
    )
    assert [t.split for t in load_tasks(str(path), n=None, seed=0)] == ["eval"]
    assert [t.split for t in load_tasks(str(path), n=None, seed=0, split="train")] == ["train"]
    assert {t.split for t in load_tasks("arithmetic", n=4, seed=0)} == {"train"}
    with pytest.raises(TaskSourceError, match="split 'test' for a task file: use one of eval, train, heldout"):
        load_tasks(str(path), n=None, seed=0, split="test")


def test_math_rows_take_the_last_balanced_box_when_there_is_no_answer_key(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {
                "problem": "p1",
                "solution": "First \\boxed{1}, finally \\boxed{\\frac{1}{\\sqrt{2}}}.",
                "level": "Level 3",
            },
            {"problem": "p2", "answer": 5, "subject": "Algebra"},
        ],
    )
    first, second = sorted(load_tasks(str(path), n=None, seed=0), key=lambda t: t.id)
    assert (first.answer, first.difficulty) == ("\\frac{1}{\\sqrt{2}}", "Level 3")
    assert (second.answer, second.difficulty, second.meta["subject"]) == ("5", None, "Algebra")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"question": "q", "answer": "#### 1"}, "{not json\n"], r"tasks\.jsonl:2: not valid JSON"),
        ([{"question": "q", "answer": "#### 1"}, {"question": "q2"}], r"tasks\.jsonl:2: missing key 'answer'"),
        ([{"question": "q", "answer": "no final line"}], r"tasks\.jsonl:1: .*no final '#### N' line"),
        ([{"problem": "p", "solution": "no box here"}], r"tasks\.jsonl:1: .*no \\boxed\{\.\.\.\} answer"),
        ([{"problem": "p"}], r"tasks\.jsonl:1: a MATH row needs 'answer' or 'solution'"),
        ([{"prompt": "p", "target": "1"}], r"tasks\.jsonl:1: cannot tell the task format"),
        (["[1, 2]\n"], r"tasks\.jsonl:1: expected a JSON object"),
        ([{"question": ["a list"], "answer": "#### 1"}], r"tasks\.jsonl:1: 'question' must be text"),
        (["\n"], r"the file has no rows"),
    ],
)
def test_malformed_files_name_the_line_and_the_problem(tmp_path: Path, rows: list[Any], message: str) -> None:
    with pytest.raises(TaskSourceError, match=message):
        load_tasks(str(_write(tmp_path, rows)), n=None, seed=0)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TaskSourceError, match="no such file"):
        load_tasks(str(tmp_path / "absent.jsonl"), n=5, seed=0)


def test_unknown_spec_lists_the_accepted_forms() -> None:
    with pytest.raises(TaskSourceError, match=r"unknown task source 'gsm9k'.*arithmetic:1-3.*\.jsonl.*hf:DATASET_ID"):
        load_tasks("gsm9k", n=5, seed=0)


def test_n_must_be_positive() -> None:
    with pytest.raises(TaskSourceError, match="n must be at least 1"):
        load_tasks("arithmetic", n=0, seed=0)


# --- Hugging Face (the datasets library is replaced: these tests never touch the network) ----


def test_hf_spec_reads_rows_through_the_file_formats(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls: list[tuple[Any, ...]] = []

    def fake_load_dataset(name: str, config: str | None, split: str) -> list[dict[str, str]]:
        calls.append((name, config, split))
        return [{"question": "q", "answer": "#### 3"}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    (task,) = load_tasks("hf:openai/gsm8k:main", n=None, seed=0, split="heldout")
    assert calls == [("openai/gsm8k", "main", "test")]
    assert (task.id, task.answer, task.source, task.split) == (
        "hf:openai/gsm8k:main@test:0",
        "3",
        "hf:openai/gsm8k:main",
        "test",
    )
    load_tasks("hf:some/math@validation", n=None, seed=0)
    assert calls[-1] == ("some/math", None, "validation")


def test_hf_load_failure_says_it_may_be_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    def unreachable(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("Couldn't reach 'x/y' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(TaskSourceError, match=r"cannot load Hugging Face dataset hf:x/y.*offline.*\.jsonl"):
        load_tasks("hf:x/y", n=3, seed=0)
    with pytest.raises(TaskSourceError, match="name a dataset"):
        load_tasks("hf:", n=3, seed=0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"question": "q", "answer": "#### 1"}\n\xff\xfebinary\n',
         r"^tasks\.jsonl:2: not UTF-8 text \(byte 0xff at column 1\); a task file is UTF-8 text"),
        (b'{"question": "caf\xe9", "answer": "#### 1"}\n',  # Latin-1, not UTF-8
         r"^tasks\.jsonl:1: not UTF-8 text \(byte 0xe9 at column 18\)"),
        (b"\x1f\x8b\x08\x00\x00\x00", r"^tasks\.jsonl:1: .*the file is gzip-compressed: decompress"),
        (b"PAR1\x15\x04\x15\xa0", r"^tasks\.jsonl:1: .*the file is a Parquet file"),
    ],
)
def test_a_binary_or_non_utf8_file_names_the_file_line_and_byte(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "tasks.jsonl").write_bytes(content)
    with pytest.raises(TaskSourceError, match=message):
        load_tasks(str(tmp_path / "tasks.jsonl"), n=None, seed=0)
