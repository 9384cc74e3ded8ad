"""Truth-verdict rows: the critic's SFT rows made from the actor's checked answers, answered with
the verdict the ground truth calls for (``SFTOptions(verdicts="truth")``), on the hand-made
math-reflection logs of ``test_datasets`` written by the real Recorder into SQLite and
PostgreSQL; the game's declaration, the CLI and the retrain settings that choose them."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from typer.testing import CliRunner

from app.cli import app
from graphs.contract import GameContractError, GameSpec, TruthVerdicts
from graphs.judges.arithmetic import checker_notes
from graphs.judges.verdict import parse_verdict
from graphs.math_reflection.prompts import critic_messages
from graphs.registry import get_game
from storage.recorder import Recorder
from tests.test_datasets import BASE, QUESTIONS, build, play_math, record_math_log, rows_of
from tests.test_games import play_reflection, replay
from training.datasets import EmptyDatasetError, LogFilter, SFTOptions, load_snapshot
from training.datasets.balance import answer_rank
from training.loop import RetrainConfig, default_judge_rows, sft_options

REFLECTION = get_game("math-reflection")
TRUTH = SFTOptions(verdicts="truth")
runner = CliRunner()


def review(task_id: str, answer: str) -> list[dict[str, str]]:
    return critic_messages(QUESTIONS[task_id][0], answer, checker_notes(answer))


def verdict(row: dict[str, Any]) -> str:
    [message] = row["completion"]
    assert message["role"] == "assistant"
    return message["content"]


# --- the game's declaration -----------------------------------------------------------------


def test_the_review_is_the_prompt_the_critic_saw_and_the_verdicts_parse_as_the_truth() -> None:
    """Played through the graph: the review rebuilt from each logged actor turn (first answer and
    refinement) is exactly the critic's logged prompt about it."""
    critiques = replay("Wrong sum.\nVerdict: incorrect", "Verdict: correct")
    episode = play_reflection(replay("3 + 4 = 6.\nAnswer: 6", "Answer: 7"), critiques, turns=2)
    actor0, critic0, actor1, critic1 = episode.sink.turns
    truth = REFLECTION.truth_verdicts
    assert (truth.judge_seat, truth.answer_seat) == ("critic", "actor")
    assert truth.review(actor0.messages, actor0.response) == critic0.messages
    assert truth.review(actor1.messages, actor1.response) == critic1.messages  # the refinement's prompt holds more
    assert "A calculator checked the arithmetic of the solution: 3 + 4 = 6 is wrong: it is 7." in (
        truth.review(actor0.messages, actor0.response)[0]["content"])  # the checker's notes, as in play
    assert truth.review([{"role": "user", "content": "What is 2 + 3?"}], "Answer: 5") is None  # other wording
    assert {parse_verdict(line): line for line in truth.verdicts.values()} == dict(truth.verdicts)
    assert dict(truth.verdicts) == {True: "Verdict: correct", False: "Verdict: incorrect"}


def test_the_contract_refuses_truth_verdicts_that_name_the_wrong_seats() -> None:
    def spec(judge: str, answers: str) -> GameSpec:
        truth = TruthVerdicts(judge, answers, REFLECTION.truth_verdicts.review, {True: "yes", False: "no"})
        return GameSpec(**{**vars(REFLECTION), "truth_verdicts": truth})

    with pytest.raises(GameContractError, match="truth verdicts' judge seat 'judge' is not a learner seat"):
        spec("judge", "actor")
    with pytest.raises(GameContractError, match="truth verdicts' answer seat 'critic' is not another seat"):
        spec("critic", "critic")
    with pytest.raises(GameContractError, match="a non-blank response for True and for False"):
        TruthVerdicts("critic", "actor", REFLECTION.truth_verdicts.review, {True: "Verdict: correct"})


# --- the builder ------------------------------------------------------------------------------


def test_every_checked_actor_answer_makes_a_critic_row_with_the_true_verdict(store: Engine, tmp_path: Path) -> None:
    """On the test_datasets log: unique reviews are easy 5 (right; E1's refinement) and 6, 7, 8, 9
    (wrong), hard 16 and 6 (right) and the unparsed answer (wrong); one of each kind per level is kept."""
    log = record_math_log(store)
    result = build(store, "sft", "critic", tmp_path, options=TRUTH, seed=3)
    rows = rows_of(result.path)
    assert result.role == "critic" and result.kind == "sft"
    assert result.skipped == {"duplicate_review": 3, "balance_dropped": 4}  # E2's and E6's 5, E5's second 6
    assert Counter((r["difficulty"], r["correct"]) for r in rows) == {
        ("easy", True): 1, ("easy", False): 1, ("hard", True): 1, ("hard", False): 1}
    answers = {t.id: (p, t) for p in log.values() for t in p.actor}
    for row in rows:
        played, turn = answers[row["turn_id"]]
        task = next(k for k, v in QUESTIONS.items() if v[0] in turn.messages[0]["content"])
        assert row["prompt"] == review(task, turn.response)
        assert verdict(row) == ("Verdict: correct" if row["correct"] else "Verdict: incorrect")
        assert row["correct"] == (turn.parsed_value == QUESTIONS[task][1])
        assert (row["episode_id"], row["task_id"], row["seat"]) == (played.id, task, "actor")
    kept = {r["turn_id"] for r in rows}
    assert log["E1"].actor[1].id in kept  # the only right easy answer: a refinement, reviewed with its question
    assert log["E8"].actor[0].id in kept  # the unparsed answer is an incorrect one
    easy_wrong = [log[k].actor[i].id for k, i in (("E1", 0), ("E3", 0), ("E3", 1), ("E6", 1))]
    assert kept & set(easy_wrong) == {min(easy_wrong, key=lambda turn_id: answer_rank(3, turn_id))}
    assert build(store, "sft", "critic", tmp_path, options=TRUTH, seed=3).content_hash == result.content_hash

    dataset = load_snapshot(store, result.id, role="critic", base_model=BASE, kind="sft")
    assert dataset[0]["completion"] == rows[0]["completion"] and isinstance(dataset[0]["correct"], bool)
    as_messages = rows_of(build(store, "sft", "critic", tmp_path, seed=3,
                                options=SFTOptions(verdicts="truth", format="messages")).path)
    assert [r["messages"] for r in as_messages] == [r["prompt"] + r["completion"] for r in rows]


def test_truth_rows_train_the_critic_through_the_sft_trainer(tmp_path: Path) -> None:
    """A truth snapshot as the retrain loop loads it trains a tiny random model: one step, and the
    adapter moved from its zero start (PEFT starts lora_B at zero)."""
    from peft.utils import SAFETENSORS_WEIGHTS_NAME
    from safetensors.torch import load_file
    from tiny_model import save_tiny_model

    from storage.engine import open_store
    from training.trainers import LoraSettings, SFTTrainingConfig, train_sft

    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        record_math_log(store)
        snapshot = build(store, "sft", "critic", tmp_path, options=TRUTH)
        rows = load_snapshot(store, snapshot.id, role="critic", base_model=BASE, kind="sft")
    finally:
        store.dispose()
    config = SFTTrainingConfig(model=str(save_tiny_model(tmp_path / "tiny")), device="cpu", lora=LoraSettings(r=4),
                               max_steps=1, per_device_train_batch_size=2, learning_rate=1e-2, max_length=128)
    result = train_sft(rows, config, role="critic", output_dir=tmp_path / "critic", cache_dir=tmp_path / "cache")
    assert result.metrics["steps"] == 1 and math.isfinite(result.metrics["loss"])
    weights = load_file(result.adapter_dir / SAFETENSORS_WEIGHTS_NAME)
    assert any(name.endswith("lora_B.weight") and tensor.abs().sum() > 0 for name, tensor in weights.items())


def test_practice_episodes_make_rows_and_scripted_answers_do_not(store: Engine, tmp_path: Path) -> None:
    """Solo practice (a scripted stand-in in the critic's seat) yields rows like full episodes; a
    scripted actor's answers never do; a build's policy filter picks the actor's turns."""
    with Recorder(store) as rec:
        stand_in = {"critic": "scripted:always-correct"}
        practice = [play_math(rec, task, [answer], ["correct"], minute=i, policies=stand_in)
                    for i, (task, answer) in enumerate((("t1", "5"), ("t1", "6"), ("t2", "16"), ("t2", "15")))]
        adapter = play_math(rec, "t3", ["7", "6"], ["incorrect", "correct"], minute=5, policies={"actor": "actor@v1"})
        scripted = play_math(rec, "t3", ["8"], ["incorrect"], minute=6, policies={"actor": "scripted:calculator"})
    rows = rows_of(build(store, "sft", "critic", tmp_path, options=TRUTH).path)
    assert {r["turn_id"] for r in rows} == {p.actor[0].id for p in practice} | {t.id for t in adapter.actor}
    assert scripted.actor[0].id not in {r["turn_id"] for r in rows}
    assert Counter(verdict(r) for r in rows) == {"Verdict: correct": 3, "Verdict: incorrect": 3}

    only = rows_of(build(store, "sft", "critic", tmp_path, options=TRUTH, log_filter=LogFilter(policy="actor@v1")).path)
    assert [r["turn_id"] for r in only] == [t.id for t in adapter.actor]


def test_max_rows_keeps_every_level_balanced(store: Engine, tmp_path: Path, monkeypatch) -> None:
    """Six easy and four hard questions, each answered once right and once wrong: ten pairs; a cap
    of 7 keeps the 3 pairs whose right answer ranks lowest, each level still balanced."""
    for i in range(4, 14):
        monkeypatch.setitem(QUESTIONS, f"t{i}", (f"What is {i} + 1?", str(i + 1), "easy" if i < 10 else "hard"))
    with Recorder(store) as rec:
        played = {(f"t{i}", ok): play_math(rec, f"t{i}", [str(i + 1 if ok else i)], ["correct"], minute=2 * i + ok)
                  for i in range(4, 14) for ok in (True, False)}
    result = build(store, "sft", "critic", tmp_path, options=SFTOptions(verdicts="truth", max_rows=7), seed=5)
    rows = rows_of(result.path)
    assert len(rows) == 6 and result.skipped == {"beyond_max_rows": 14}
    counts = Counter((r["difficulty"], r["correct"]) for r in rows)
    assert all(counts[level, True] == counts[level, False] for level in ("easy", "hard"))
    right = [p.actor[0].id for (_, ok), p in played.items() if ok]
    assert {r["turn_id"] for r in rows if r["correct"]} == set(sorted(right, key=lambda t: answer_rank(5, t))[:3])
    again = build(store, "sft", "critic", tmp_path, options=SFTOptions(verdicts="truth", max_rows=7), seed=5)
    assert again.content_hash == result.content_hash
    uncapped = build(store, "sft", "critic", tmp_path, options=TRUTH, seed=5)
    assert uncapped.row_count == 20 and uncapped.skipped == {}


def test_truth_verdicts_are_for_the_judge_seat_of_a_game_that_declares_them(store: Engine, tmp_path: Path) -> None:
    with Recorder(store) as rec:  # a right easy answer and a wrong hard one: no level to balance
        play_math(rec, "t1", ["5"], ["correct"], minute=0)
        play_math(rec, "t3", ["7"], ["correct"], minute=1)
    with pytest.raises(EmptyDatasetError, match="of the 2 actor answers read, 1 were correct and 1 incorrect, and no "
                                                "difficulty level had both"):
        build(store, "sft", "critic", tmp_path, options=TRUTH)
    with pytest.raises(GameContractError, match="train its judge seat 'critic', not 'actor'"):
        build(store, "sft", "actor", tmp_path, options=TRUTH)
    with pytest.raises(GameContractError, match="game 'debate' declares no truth verdicts"):
        build(store, "sft", "debater_a", tmp_path, options=TRUTH, game="debate")
    for wrong, message in [({"balance": True}, "balance: options that select the role's own turns"),
                           ({"per_group": 2}, "per_group: options that select"),
                           ({"max_rows": 1}, "max_rows must be >= 2")]:
        with pytest.raises(ValueError, match=message):
            SFTOptions(verdicts="truth", **wrong)
    with pytest.raises(ValueError, match="max_rows caps truth-verdict rows only"):
        SFTOptions(max_rows=64)


# --- the CLI and retrain ------------------------------------------------------------------------


def test_datasets_build_and_train_take_verdicts_truth(tmp_path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    answers = build_log(url)

    result = runner.invoke(app, ["datasets", "build", "sft", "--role", "critic", "--verdicts", "truth",
                                 "--max-rows", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    [built] = json.loads(result.stdout)
    assert built["rows"] == 2 and built["role"] == "critic"
    assert {r["turn_id"] for r in rows_of(Path(built["path"]))} <= answers

    for args, message in [
        (["datasets", "build", "sft", "--role", "actor", "--verdicts", "truth"], "not 'actor'"),
        (["datasets", "build", "dpo", "--role", "critic", "--verdicts", "truth"], "apply to sft rows only"),
        (["datasets", "build", "sft", "--role", "critic", "--max-rows", "8"], "add --verdicts truth"),
        (["datasets", "build", "sft", "--role", "critic", "--verdicts", "mine"], "verdicts must be one of own, truth"),
        (["train", "sft", "--role", "critic", "--verdicts", "truth", "--dataset", "1"], "snapshot 1 is built already"),
        (["train", "sft", "--role", "debater_a", "--game", "debate", "--verdicts", "truth"],
         "'debate' declares no truth verdicts"),
    ]:
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2 and message in " ".join(refused.output.split()), (args, refused.output)


def build_log(url: str) -> set[str]:
    """Two right and two wrong actor answers; returns their turn ids."""
    from storage.engine import open_store

    engine = open_store(url)
    try:
        with Recorder(engine) as rec:
            played = [play_math(rec, task, [answer], ["correct"], minute=i)
                      for i, (task, answer) in enumerate((("t1", "5"), ("t1", "4"), ("t3", "6"), ("t3", "9")))]
    finally:
        engine.dispose()
    return {p.actor[0].id for p in played}


def test_retrain_chooses_the_critic_rows_by_judge_rows() -> None:
    debate = get_game("debate")
    own, truth = RetrainConfig(), RetrainConfig(judge_rows="truth", judge_max_rows=64)
    assert sft_options(own, REFLECTION, "critic") == SFTOptions(balance=True)  # today's rows stay the default
    assert sft_options(truth, REFLECTION, "critic") == SFTOptions(verdicts="truth", max_rows=64)
    assert sft_options(truth, REFLECTION, "actor") is None
    assert sft_options(RetrainConfig(trainer="dpo"), REFLECTION, "critic") is None
    with pytest.raises(ValueError, match="game 'debate' declares no truth verdicts.*--judge-rows own"):
        sft_options(truth, debate, "debater_a")
    with pytest.raises(ValueError, match="judge_rows 'truth' makes sft rows, but the trainer is dpo"):
        RetrainConfig(trainer="dpo", judge_rows="truth")
    with pytest.raises(ValueError, match="judge_rows must be one of own, truth"):
        RetrainConfig(judge_rows="theirs")
    with pytest.raises(ValueError, match=r"judge_max_rows \(1\) must be at least 2"):
        RetrainConfig(judge_max_rows=1)


def test_the_judge_learns_from_the_truth_by_default_where_the_game_and_trainer_allow() -> None:
    assert default_judge_rows(REFLECTION, "sft") == "truth"
    assert default_judge_rows(REFLECTION, "dpo") == "own"  # truth verdicts are sft rows
    assert default_judge_rows(get_game("debate"), "sft") == "own"  # no truth verdicts declared


@pytest.mark.parametrize(("text", "options", "message"), [
    ("judge_rows: truth\ntrainer: dpo\n", [], "judge_rows 'truth' makes sft rows, but the trainer is dpo"),
    ("judge_rows: theirs\n", [], "'judge_rows' must be one of 'own', 'truth', got 'theirs'"),
    ("judge_max_rows: 64\njudge_rows: truth\n", ["--game", "debate"], "'debate' declares no truth verdicts"),
    ("judge_rows: truth\n", ["--judge-max-rows", "1"], "Invalid value for '--judge-max-rows'"),
])
def test_retrain_takes_judge_rows_from_the_file_and_the_options(tmp_path, text, options, message) -> None:
    """Each key reaches the checks before anything runs (the store is never opened)."""
    path = tmp_path / "retrain.yaml"
    path.write_text(text)
    env = {"SPARRING_DATABASE_URL": f"sqlite:///{tmp_path / 'store.db'}", "SPARRING_DATA_DIR": str(tmp_path / "d"),
           "COLUMNS": "200"}
    result = runner.invoke(app, ["retrain", "--config", str(path), *options], env=env)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    assert not (tmp_path / "store.db").exists()
