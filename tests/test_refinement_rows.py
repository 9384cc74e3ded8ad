"""Refinement rows: SFT rows that teach math-reflection's actor its refinement turn from its
checked first answers (``SFTOptions(refinements=True)``), on hand-made logs written by the real
Recorder into SQLite and PostgreSQL; the game's declaration and the CLI that asks for them."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import Engine, update
from typer.testing import CliRunner

from app.cli import app
from graphs.contract import GameContractError, GameSpec, Refinements
from graphs.math_reflection.game import with_answer_line
from graphs.math_reflection.prompts import refine_messages
from graphs.registry import get_game
from storage.recorder import Recorder
from storage.tables import TURN_PAYLOADS
from tests.test_datasets import BASE, actor_prompt, build, play_math, rows_of
from tests.test_games import play_reflection, replay
from training.datasets import SFTOptions, load_snapshot
from training.loop import RetrainConfig, sft_options

REFLECTION = get_game("math-reflection")
REFINE = SFTOptions(refinements=True)
runner = CliRunner()


def test_the_rows_prompt_is_the_one_the_actor_sees_after_a_bare_rejection() -> None:
    """Played through the graph with a critic that writes the verdict line alone: the prompt
    rebuilt from the logged first answer is exactly the actor's logged refinement prompt."""
    critic = replay("Verdict: incorrect", "Verdict: correct")
    episode = play_reflection(replay("3 + 4 = 6.\nAnswer: 6", "Answer: 7"), critic, turns=2)
    first, _, second = episode.sink.turns[:3]
    refinements = REFLECTION.refinements
    assert refinements.seat == "actor"
    assert refinements.refine(first.messages, first.response) == second.messages
    assert refinements.refine(second.messages, second.response) is None  # a refinement is no first answer
    assert refinements.refine([{"role": "user", "content": "What is 2 + 3?"}], "Answer: 5") is None


def test_the_contract_refuses_refinements_of_a_seat_that_does_not_learn() -> None:
    with pytest.raises(GameContractError, match="refinements' seat 'judge' is not a learner seat"):
        GameSpec(**{**vars(REFLECTION), "refinements": Refinements("judge", REFLECTION.refinements.refine)})


def test_each_task_answered_right_and_wrong_adds_a_fix_and_a_keep(store: Engine, tmp_path: Path) -> None:
    """t1 is answered right twice and wrong once, t2 right only, t3 wrong only: the own rows as
    without refinements, then t1's fix (after its wrong answer) and keep (after a right one),
    both answered with one of its right answers; t2 and t3 are one-sided."""
    with Recorder(store) as rec:
        played = {(task, answer, i): play_math(rec, task, [answer], ["correct"], minute=i)
                  for i, (task, answer) in enumerate((("t1", "5"), ("t1", "4"), ("t2", "16"), ("t3", "9"),
                                                      ("t1", "5")))}
    own = rows_of(build(store, "sft", "actor", tmp_path).path)
    result = build(store, "sft", "actor", tmp_path, options=REFINE, seed=3)
    rows = rows_of(result.path)
    assert rows[: len(own)] == own
    assert result.skipped["refinement_one_sided"] == 2
    fix, keep = rows[len(own):]
    turns = {p.actor[0].id: (key, p) for key, p in played.items()}
    right = {turn_id for turn_id, (key, _) in turns.items() if key[:2] == ("t1", "5")}
    wrong = played[("t1", "4", 1)].actor[0]
    assert fix["prompt"] == refine_messages("What is 2 + 3?", wrong.response, "Verdict: incorrect")
    assert keep["prompt"] == refine_messages("What is 2 + 3?", "Answer: 5", "Verdict: incorrect")
    for row in (fix, keep):
        assert row["turn_id"] in right and row["completion"] == [{"role": "assistant", "content": "Answer: 5"}]
        assert (row["task_id"], row["seat"], row["reward"]) == ("t1", "actor", 1.0)
        assert row["episode_id"] == turns[row["turn_id"]][1].id
    assert build(store, "sft", "actor", tmp_path, options=REFINE, seed=3).content_hash == result.content_hash

    dataset = load_snapshot(store, result.id, role="actor", base_model=BASE, kind="sft")
    assert dataset[len(own)]["prompt"] == fix["prompt"]
    as_messages = rows_of(build(store, "sft", "actor", tmp_path, seed=3,
                                options=SFTOptions(refinements=True, format="messages")).path)
    assert [r["messages"] for r in as_messages] == [r["prompt"] + r["completion"] for r in rows]


def test_each_wrong_answer_its_written_arithmetic_makes_right_adds_a_repair(store: Engine, tmp_path: Path) -> None:
    """t1's "2 + 3 = 6" (twice) and t3's "9 - 3 = 5" are right once their sums are recomputed: one
    repair each, after the rejection with the checker's notes, answered with the corrected text, t3's
    although t3 has no right answer. "2 + 4 = 6" (a right sum of the wrong numbers) and "2 x 3 = 7"
    (corrected to 6, still wrong) cannot be repaired."""
    answers = [("t1", "6", "2 + 3 = 6."), ("t1", "6", "2 + 3 = 6."), ("t1", "6", "2 + 4 = 6."),
               ("t1", "7", "2 x 3 = 7."), ("t1", "5", ""), ("t3", "5", "9 - 3 = 5.")]
    with Recorder(store) as rec:
        played = [play_math(rec, task, [value], ["incorrect"], minute=i, working=working)
                  for i, (task, value, working) in enumerate(answers)]
    result = build(store, "sft", "actor", tmp_path, options=REFINE, seed=3)
    rows = rows_of(result.path)
    assert result.skipped["repair_unavailable"] == 2 and result.skipped["refinement_one_sided"] == 1
    repairs = rows[-2:]
    assert [r["prompt"] for r in repairs] == [
        refine_messages("What is 2 + 3?", "2 + 3 = 6.\nAnswer: 6", "Verdict: incorrect", "2 + 3 = 6 is wrong: it is 5."),
        refine_messages("What is 9 - 3?", "9 - 3 = 5.\nAnswer: 5", "Verdict: incorrect", "9 - 3 = 5 is wrong: it is 6."),
    ]
    assert [r["completion"][0]["content"] for r in repairs] == ["2 + 3 = 5.\nAnswer: 5", "9 - 3 = 6.\nAnswer: 6"]
    assert [(r["turn_id"], r["task_id"], r["reward"]) for r in repairs] == [
        (played[0].actor[0].id, "t1", 1.0), (played[5].actor[0].id, "t3", 1.0)]
    fix = rows[-4]  # t1's fix: after a rejected wrong answer, its right answer
    assert fix["completion"][0]["content"] == "Answer: 5" and "Verdict: incorrect" in fix["prompt"][-1]["content"]
    assert len(rows) == 1 + 2 + 2  # t1's right answer, its fix and keep, the two repairs
    without = build(store, "sft", "actor", tmp_path, options=SFTOptions())
    assert "repair_unavailable" not in without.skipped and len(rows_of(without.path)) == 1


def test_first_repairs_answer_the_first_prompt_of_a_state_with_no_right_answer(store: Engine, tmp_path: Path) -> None:
    """t3's "9 - 3 = 5" is corrected to 6, the truth: its own first prompt gets that answer. t1's
    "2 + 3 = 6" corrects too, but t1's state was answered right ("Answer: 5"), so only that row
    stays; "2 x 3 = 7" (corrected to 6, still wrong) adds nothing. No refinement turn is taught
    unless asked."""
    answers = [("t1", "5", ""), ("t1", "6", "2 + 3 = 6."), ("t1", "7", "2 x 3 = 7."), ("t3", "5", "9 - 3 = 5.")]
    with Recorder(store) as rec:
        played = [play_math(rec, task, [value], ["incorrect"], minute=i, working=working)
                  for i, (task, value, working) in enumerate(answers)]
    result = build(store, "sft", "actor", tmp_path, options=SFTOptions(first_repairs=True))
    rows = rows_of(result.path)
    assert [(r["task_id"], r["completion"][0]["content"]) for r in rows] == [
        ("t1", "Answer: 5"), ("t3", "9 - 3 = 6.\nAnswer: 6")]
    assert rows[1]["prompt"] == actor_prompt("t3") and rows[1]["turn_id"] == played[3].actor[0].id
    assert result.skipped["first_repair_state_answered"] == 1 and result.skipped["first_repair_unavailable"] == 1
    assert "repair_unavailable" not in result.skipped and "refinement_one_sided" not in result.skipped
    both_options = SFTOptions(first_repairs=True, refinements=True)
    both = rows_of(build(store, "sft", "actor", tmp_path, options=both_options).path)
    assert [r["completion"][0]["content"] for r in both].count("9 - 3 = 6.\nAnswer: 6") == 2  # first turn, repair


def test_answer_lines_end_every_right_answer_of_the_actor(store: Engine, tmp_path: Path) -> None:
    """t1's right answer, written without its answer line, gains "Answer: 5" in its own row, its fix
    and its keep; t3's repair ends with its corrected answer line already; wrong answers make no row."""
    answers = [("t1", "5", "2 + 3 = 5."), ("t1", "6", ""), ("t3", "5", "9 - 3 = 5.")]
    with Recorder(store) as rec:
        played = [play_math(rec, task, [value], ["incorrect"], minute=i, working=working)
                  for i, (task, value, working) in enumerate(answers)]
    _respond(store, played[0].actor[0].id, "2 + 3 = 5.")
    result = build(store, "sft", "actor", tmp_path, options=SFTOptions(refinements=True, answer_lines=True))
    assert [(r["task_id"], r["completion"][0]["content"]) for r in rows_of(result.path)] == [
        ("t1", "2 + 3 = 5.\nAnswer: 5"),  # its own row
        ("t1", "2 + 3 = 5.\nAnswer: 5"), ("t1", "2 + 3 = 5.\nAnswer: 5"),  # its fix and its keep
        ("t3", "9 - 3 = 6.\nAnswer: 6")]  # the repair: its answer line corrected with its step
    assert result.skipped["answer_line_added"] == 3
    plain = rows_of(build(store, "sft", "actor", tmp_path, options=REFINE).path)
    assert [r["completion"][0]["content"] for r in plain][:3] == ["2 + 3 = 5."] * 3


def test_with_answer_line_adds_the_truth_where_the_last_line_is_not_an_answer_line() -> None:
    assert with_answer_line("Grace runs 9 * 5 = 45 laps.", "45") == "Grace runs 9 * 5 = 45 laps.\nAnswer: 45"
    assert with_answer_line("So, the answer is 42.\n", "42") == "So, the answer is 42.\nAnswer: 42"
    assert with_answer_line("Answer:\n6 * 7 = 42", "42") == "Answer:\n6 * 7 = 42\nAnswer: 42"
    for ended in ("7 * 6 = 42\nAnswer: 42", "**Answer:** 42", "answer: 42\n", "There are 42 cars. Answer: 42"):
        assert with_answer_line(ended, "42") == ended


def _respond(store: Engine, turn_id: str, response: str) -> None:
    """Give a logged turn another response (an answer the model wrote without its answer line)."""
    with store.begin() as conn:
        conn.execute(update(TURN_PAYLOADS).where(TURN_PAYLOADS.c.turn_id == turn_id).values(response=response))


def test_refinement_turns_and_scripted_answers_make_no_refinement_rows(store: Engine, tmp_path: Path) -> None:
    """Only first answers count: a refinement's answers do not pair up with the first ones, and a
    scripted actor's answers are never read."""
    with Recorder(store) as rec:
        play_math(rec, "t1", ["4", "5"], ["incorrect", "correct"], minute=0)
        play_math(rec, "t1", ["5"], ["correct"], minute=1, policies={"actor": "scripted:calculator"})
    result = build(store, "sft", "actor", tmp_path, options=REFINE)
    rows = rows_of(result.path)
    assert Counter(r["completion"][0]["content"] for r in rows) == {"Answer: 5": 1}  # the refinement's own row
    assert result.skipped["refinement_one_sided"] == 1


def test_datasets_build_and_train_take_refinements(tmp_path, monkeypatch) -> None:
    """`train sft --refinements` trains on the rows `datasets build sft --refinements` makes (the
    tiny model stands in for the bundled one); both refuse what the rows cannot be."""
    from tiny_model import save_tiny_model

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_MODEL", str(save_tiny_model(tmp_path / "tiny")))
    from storage.engine import open_store

    engine = open_store(url)
    try:
        with Recorder(engine) as rec:
            for i, answer in enumerate(("5", "4")):
                play_math(rec, "t1", [answer], ["correct"], minute=i)
    finally:
        engine.dispose()

    trained = runner.invoke(app, ["train", "sft", "--role", "actor", "--refinements", "--max-steps", "1",
                                  "--batch-size", "2", "--format", "json"])
    assert trained.exit_code == 0, trained.output
    [job] = json.loads(trained.stdout)
    assert (job["adapter"], job["rows"]) == ("actor@v1", 3)  # the right answer, its fix and its keep

    result = runner.invoke(app, ["datasets", "build", "sft", "--role", "actor", "--refinements", "--since", "all",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    [built] = json.loads(result.stdout)
    assert built["rows"] == 3 and built["snapshot"] != job["dataset"]
    result = runner.invoke(app, ["datasets", "build", "sft", "--role", "actor", "--refinements", "--first-repairs",
                                 "--answer-lines", "--since", "all", "--format", "json"])
    assert result.exit_code == 0, result.output
    [lined] = json.loads(result.stdout)  # every answer here ends with its line; "Answer: 4" has no step to repair
    assert lined["rows"] == 3 and lined["skipped"]["first_repair_unavailable"] == 1

    for args, message in [
        (["datasets", "build", "sft", "--role", "critic", "--refinements"], "not 'critic'"),
        (["datasets", "build", "dpo", "--role", "actor", "--refinements"], "apply to sft rows only"),
        (["datasets", "build", "sft", "--role", "critic", "--verdicts", "truth", "--refinements"],
         "refinements: options that select the role's own turns"),
        (["datasets", "build", "sft", "--role", "debater_a", "--game", "debate", "--refinements"],
         "'debate' declares no refinements"),
        (["train", "sft", "--role", "actor", "--refinements", "--dataset", "1"], "snapshot 1 is built already"),
        (["train", "dpo", "--role", "actor", "--refinements"], "apply to sft rows only"),
        (["train", "sft", "--role", "critic", "--refinements"], "not 'critic'"),
        (["datasets", "build", "dpo", "--role", "actor", "--answer-lines"], "apply to sft rows only"),
        (["datasets", "build", "sft", "--role", "debater_a", "--game", "debate", "--first-repairs"],
         "'debate' declares no refinements"),
        (["train", "sft", "--role", "actor", "--answer-lines", "--dataset", "1"], "snapshot 1 is built already"),
    ]:
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2 and message in " ".join(refused.output.split()), (args, refused.output)


def test_retrain_adds_refinement_rows_to_the_refining_seat_only() -> None:
    refining = RetrainConfig(refinements=True)
    assert sft_options(RetrainConfig(), REFLECTION, "actor") is None  # off by default
    assert sft_options(refining, REFLECTION, "actor") == SFTOptions(refinements=True)
    assert sft_options(refining, REFLECTION, "critic") == SFTOptions(balance=True)
    both = RetrainConfig(refinements=True, judge_rows="truth", judge_max_rows=8)
    assert sft_options(both, REFLECTION, "critic") == SFTOptions(verdicts="truth", max_rows=8)
    with pytest.raises(ValueError, match="game 'debate' declares no refinements"):
        sft_options(refining, get_game("debate"), "debater_a")
    with pytest.raises(ValueError, match="refinements make sft rows, but the trainer is dpo"):
        RetrainConfig(trainer="dpo", refinements=True)
    repairing = RetrainConfig(first_repairs=True)
    assert sft_options(repairing, REFLECTION, "actor") == SFTOptions(first_repairs=True)
    assert sft_options(RetrainConfig(refinements=True, first_repairs=True), REFLECTION, "actor") == SFTOptions(
        refinements=True, first_repairs=True)
    with pytest.raises(ValueError, match="first_repairs make sft rows, but the trainer is kto"):
        RetrainConfig(trainer="kto", first_repairs=True)
    assert sft_options(RetrainConfig(answer_lines=True), REFLECTION, "actor") == SFTOptions(answer_lines=True)
    assert sft_options(RetrainConfig(answer_lines=True), REFLECTION, "critic") == SFTOptions(balance=True)
