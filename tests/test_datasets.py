"""Dataset builders on hand-made logs, written by the real Recorder into SQLite and PostgreSQL.

The math-reflection log (``record_math_log``) plays these episodes, truth "5" for t1 (easy),
"16" for t2 and "6" for t3 (hard); each actor answer is followed by a critique:

    E1 t1: 6 (critic: incorrect) -> 5 (critic: correct)
    E2 t1: 5 (critic: correct)
    E3 t1: 7 (critic: correct) -> 8 (critic: incorrect)
    E4 t2: 16 (critic: correct)
    E5 t3: 6 (no logprobs) (critic: correct) -> 6 (logprobs of the wrong length) (critic: correct)
    E6 t1: 5 (critic: incorrect) -> 9 (critic: correct)
    E7 t1: failed episode, never read
    E8 t2: unparsed answer (critic: no verdict)
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, delete, event, func, select, update
from trl.data_utils import apply_chat_template, is_conversational
from typer.testing import CliRunner

from app.cli import app
from graphs.policies.base import CANCELLED
from storage.models import DatasetSnapshot, TurnPayload
from storage.recorder import Recorder
from storage.records import EpisodeEnd, EpisodeStart, EpisodeStatus, JudgmentRecord, RewardRecord, TurnRecord
from storage.rows import to_rows, write_rows
from storage.tables import TURNS
from tests.factories import T0, new_id
from training.datasets import (
    DatasetMismatchError,
    DPOOptions,
    EmptyDatasetError,
    EvaluationDataError,
    LogFilter,
    PPOOptions,
    ReadPlan,
    RewardOptions,
    SFTOptions,
    SnapshotFileError,
    SnapshotNotFoundError,
    build_snapshot,
    load_snapshot,
    read_episodes,
)

BASE = "SmolLM2-135M-Instruct"
QUESTIONS = {
    "t1": ("What is 2 + 3?", "5", "easy"),
    "t2": ("What is 4 * 4?", "16", "hard"),
    "t3": ("What is 9 - 3?", "6", "hard"),
}
LOGPROBS = [-0.5, -0.25, -0.125]
EPS = 1e-6


# --- hand-made logs -----------------------------------------------------------------------


@dataclass
class Played:
    id: str
    actor: list[TurnRecord] = field(default_factory=list)
    critic: list[TurnRecord] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    end: EpisodeEnd | None = None


def _turn(
    episode_id: str, index: int, round_: int, seat: str, messages: list[dict], response: str, **kw: Any
) -> TurnRecord:
    values: dict[str, Any] = {
        "id": new_id(),
        "episode_id": episode_id,
        "index": index,
        "round": round_,
        "seat": seat,
        "seat_kind": "learner",
        "policy": BASE,
        "served_by": BASE,
        "backend": "inprocess",
        "messages": messages,
        "response": response,
        "prompt_token_ids": [1, 2, 3 + index],
        "completion_token_ids": [10, 11, 12],
        "logprobs": list(LOGPROBS),
        "finish_reason": "stop",
        "latency_ms": 1.0,
        "sampling": {"temperature": 0.7},
        "parsed": True,
        "parsed_value": None,
    }
    return TurnRecord(**{**values, **kw})


def served(policy: str | None) -> dict[str, str]:
    """A turn's logged policy columns, as the backends write them: ``policy`` None is the base
    model, ``scripted:BOT`` a scripted bot, anything else an adapter version's name."""
    if policy is None:
        return {"policy": BASE, "served_by": BASE, "backend": "inprocess"}
    if policy.startswith("scripted:"):
        return {"policy": policy, "served_by": policy, "backend": "scripted"}
    return {"policy": f"{BASE}+{policy}", "served_by": policy, "backend": "inprocess"}


def actor_prompt(task_id: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{QUESTIONS[task_id][0]}\nGive the final answer as 'Answer: <number>'."}]


def play_math(
    sink: Recorder,
    task_id: str,
    answers: list[str | None],
    verdicts: list[str | None],
    *,
    minute: int,
    policies: dict[str, str] | None = None,
    logprobs: list[list[float]] | None = None,
    status: EpisodeStatus = EpisodeStatus.SUCCEEDED,
    finished: bool = True,
    split: str = "train",
    working: str = "",
) -> Played:
    """One math-reflection episode: answer, critique, refinement, critique... with the
    game's reward events (``correct`` per answer, ``verdict_correct`` per critique). Each answer
    is "Answer: <value>", after the line ``working`` when one is given."""
    question, truth, difficulty = QUESTIONS[task_id]
    policies = policies or {}
    start = T0 + timedelta(minutes=minute)
    played = Played(new_id())
    sink.episode_started(
        EpisodeStart(
            id=played.id,
            run_id=None,
            game="math-reflection",
            task_id=task_id,
            task_source="test",
            split=split,
            difficulty=difficulty,
            seed=1,
            seats={"actor": "model", "critic": "model", "judge": "rules"},
            task={"question": question, "answer": truth, "difficulty": difficulty},
            started_at=start,
        )
    )
    previous: tuple[str, str] | None = None
    for round_, (value, verdict) in enumerate(zip(answers, verdicts, strict=True)):
        messages = actor_prompt(task_id)
        if previous is not None:
            messages = [
                *messages,
                {"role": "assistant", "content": previous[0]},
                {"role": "user", "content": f"A reviewer wrote: {previous[1]}\nSolve it again."},
            ]
        text = "I am not sure." if value is None else f"{working}\nAnswer: {value}".lstrip()
        extra = {} if logprobs is None else {"logprobs": logprobs[round_]}
        answer = _turn(
            played.id,
            len(played.turns),
            round_,
            "actor",
            messages,
            text,
            **served(policies.get("actor")),
            parsed=value is not None,
            parsed_value=value,
            created_at=start + timedelta(seconds=len(played.turns) + 1),
            **extra,
        )
        played.actor.append(answer)
        played.turns.append(answer)
        sink.turn(answer)
        correct = value == truth
        sink.reward(RewardRecord(played.id, "actor", "correct", float(correct), answer.id, {"round": round_}))

        review = f"Verdict: {verdict}" if verdict else "Hmm."
        critique = _turn(
            played.id,
            len(played.turns),
            round_,
            "critic",
            [{"role": "user", "content": f"Problem:\n{question}\n\nProposed solution:\n{text}\n\nVerdict?"}],
            review,
            **served(policies.get("critic")),
            parsed=verdict is not None,
            parsed_value=verdict,
            created_at=start + timedelta(seconds=len(played.turns) + 1),
        )
        played.critic.append(critique)
        played.turns.append(critique)
        sink.turn(critique)
        verdict_correct = verdict is not None and (verdict == "correct") == correct
        sink.reward(
            RewardRecord(
                played.id,
                "critic",
                "verdict_correct",
                float(verdict_correct),
                critique.id,
                {"verdict": verdict, "truth": correct},
            )
        )
        previous = (text, review)
    played.end = EpisodeEnd(
        played.id,
        status,
        float(answers[-1] == truth),
        len(played.turns),
        finished_at=start + timedelta(seconds=len(played.turns) + 1),
    )
    if finished:
        sink.episode_finished(played.end)
    return played


def record_math_log(engine: Engine) -> dict[str, Played]:
    with Recorder(engine) as rec:
        return {
            "E1": play_math(rec, "t1", ["6", "5"], ["incorrect", "correct"], minute=0),
            "E2": play_math(rec, "t1", ["5"], ["correct"], minute=1),
            "E3": play_math(rec, "t1", ["7", "8"], ["correct", "incorrect"], minute=2),
            "E4": play_math(rec, "t2", ["16"], ["correct"], minute=3),
            "E5": play_math(rec, "t3", ["6", "6"], ["correct", "correct"], minute=4, logprobs=[[], [-0.1]]),
            "E6": play_math(rec, "t1", ["5", "9"], ["incorrect", "correct"], minute=5),
            "E7": play_math(rec, "t1", ["5"], ["correct"], minute=6, status=EpisodeStatus.FAILED),
            "E8": play_math(rec, "t2", [None], [None], minute=7),
        }


def play_debate(
    sink: Recorder, *, minute: int, answers: dict[str, list[str]], winner: str | None, shared_last_prompt: bool = False
) -> Played:
    """A two-round debate on t1: A, B, A, B, then the rules judge's judgment and ``win`` events.
    With ``shared_last_prompt`` both debaters' last turns answer the same closing prompt."""
    question, truth, _ = QUESTIONS["t1"]
    start = T0 + timedelta(minutes=minute)
    played = Played(new_id())
    sink.episode_started(
        EpisodeStart(
            id=played.id,
            run_id=None,
            game="debate",
            task_id="t1",
            task_source="test",
            split="train",
            difficulty="easy",
            seed=1,
            seats={"debater_a": "model", "debater_b": "model", "judge": "rules"},
            task={"question": question, "answer": truth},
            started_at=start,
        )
    )
    last: dict[str, TurnRecord] = {}
    transcript = ""
    for round_ in range(2):
        for seat in ("debater_a", "debater_b"):
            if shared_last_prompt and round_ == 1:
                messages = [{"role": "user", "content": f"{question}\nClosing statement, after:{transcript}"}]
            else:
                messages = [
                    {"role": "system", "content": f"You are {seat}."},
                    {"role": "user", "content": f"{question}\nSo far:{transcript}"},
                ]
            value = answers[seat][round_]
            turn = _turn(
                played.id,
                len(played.turns),
                round_,
                seat,
                messages,
                f"Answer: {value}",
                parsed_value=value,
                created_at=start + timedelta(seconds=len(played.turns) + 1),
            )
            if not (shared_last_prompt and round_ == 1):
                transcript += f" {seat}: {value}."
            played.turns.append(turn)
            sink.turn(turn)
            sink.reward(RewardRecord(played.id, seat, "correct", float(value == truth), turn.id))
            last[seat] = turn
    loser = None if winner is None else next(s for s in last if s != winner)
    sink.judgment(
        JudgmentRecord(
            played.id,
            "judge",
            "rules",
            winner,
            loser,
            None if winner is None else last[winner].id,
            None if loser is None else last[loser].id,
            "checked",
        )
    )
    for seat, turn in last.items():
        sink.reward(RewardRecord(played.id, seat, "win", 0.5 if winner is None else float(seat == winner), turn.id))
    played.end = EpisodeEnd(played.id, EpisodeStatus.SUCCEEDED, 1.0, 4, finished_at=start + timedelta(seconds=5))
    sink.episode_finished(played.end)
    return played


# --- helpers ------------------------------------------------------------------------------


@pytest.fixture
def store_with_log(store: Engine) -> tuple[Engine, dict[str, Played]]:
    return store, record_math_log(store)


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def build(engine: Engine, kind: str, role: str, tmp_path: Path, **kw: Any):
    kw.setdefault("game", "math-reflection")
    kw.setdefault("since", None)
    return build_snapshot(engine, kind, role, base_model=BASE, out_dir=tmp_path / "snapshots", **kw)


def snapshot_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(DatasetSnapshot)).scalar_one()


@pytest.fixture(scope="module")
def tokenizer():
    from tests.tiny_model import tiny_tokenizer

    return tiny_tokenizer()


# --- reading ------------------------------------------------------------------------------


def test_reading_selects_role_turns_with_context_in_few_queries(store_with_log) -> None:
    engine, log = store_with_log
    with Recorder(engine) as rec:
        other = play_math(
            rec,
            "t1",
            ["6", "5"],
            ["incorrect", "correct"],
            minute=8,
            policies={"actor": "actor@v9", "critic": "critic@v3"},
        )
    statements: list[str] = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(engine, "before_cursor_execute", listener)
    try:
        plan = ReadPlan(game="math-reflection", role="critic", context_seats=("actor",))
        episodes = list(read_episodes(engine, plan, chunk_episodes=3))
    finally:
        event.remove(engine, "before_cursor_execute", listener)

    played = [log[k] for k in ("E1", "E2", "E3", "E4", "E5", "E6", "E8")] + [other]
    assert [e.episode_id for e in episodes] == [p.id for p in played]  # no failed E7, oldest finish first
    assert len(statements) <= 1 + 3  # the episode stream, then one query per chunk (turns, payloads, rewards)
    e1 = episodes[0]
    assert [t.turn_id for t in e1.turns] == [t.id for t in log["E1"].turns]
    critic, actor = e1.turns[1], e1.turns[0]
    assert (
        critic.selected and critic.messages == log["E1"].critic[0].messages and critic.response == "Verdict: incorrect"
    )
    assert critic.rewards == {"verdict_correct": 1.0} and critic.prompt_token_ids is None
    assert not actor.selected and actor.messages is None and actor.rewards == {"correct": 0.0}

    by_policy = ReadPlan(
        game="math-reflection", role="critic", filter=LogFilter(policy="critic@v3"), context_seats=("actor",)
    )
    [only] = list(read_episodes(engine, by_policy))
    assert only.episode_id == other.id
    assert [t.seat for t in only.turns] == ["actor", "critic"] * 2  # context turns whatever their policy
    assert ReadPlan(game="math-reflection", role="actor").filter.watermark_on == "episode_finished_at"


def test_reading_keeps_the_latest_event_of_each_reward_and_skips_turns_without_payload(store: Engine) -> None:
    with Recorder(store) as rec:
        played = play_math(rec, "t1", ["6", "5"], ["incorrect", "correct"], minute=1)
        first, second = played.actor
        rec.reward(RewardRecord(played.id, "actor", "correct", 1.0, first.id))  # a re-check, recorded later
        rec.reward(RewardRecord(played.id, "actor", "style", 0.25, first.id))
        rec.reward(RewardRecord(played.id, "actor", "correct", 0.0, first.id))  # and the latest one
    with store.begin() as conn:
        conn.execute(delete(TurnPayload).where(TurnPayload.turn_id == second.id))

    plan = ReadPlan(game="math-reflection", role="actor", context_seats=("critic",))
    [episode] = list(read_episodes(store, plan))
    assert [t.turn_id for t in episode.turns] == [first.id, played.critic[0].id, played.critic[1].id]
    assert episode.turns[0].rewards == {"correct": 0.0, "style": 0.25}
    assert episode.turns[0].prompt == first.messages and episode.turns[0].text == "Answer: 6"
    assert episode.turns[1].rewards == {"verdict_correct": 1.0} and episode.turns[1].messages is None
    with pytest.raises(ValueError, match="without its payload"):
        episode.turns[1].prompt_key


# --- preference pairs ---------------------------------------------------------------------


def test_dpo_refinement_and_group_pairs(store_with_log, tmp_path: Path) -> None:
    engine, log = store_with_log
    result = build(engine, "dpo", "actor", tmp_path)
    rows = rows_of(result.path)
    actor = {k: p.actor for k, p in log.items()}
    assert [(r["pair_kind"], r["chosen_turn_id"], r["rejected_turn_id"]) for r in rows] == [
        ("refinement", actor["E1"][1].id, actor["E1"][0].id),  # 6 -> 5: the refinement is chosen
        ("refinement", actor["E6"][0].id, actor["E6"][1].id),  # 5 -> 9: the first answer is chosen
        ("group", actor["E2"][0].id, actor["E1"][0].id),  # t1 first prompts: best 1 (earliest) vs worst 0 (earliest)
        ("group", actor["E4"][0].id, actor["E8"][0].id),  # t2 first prompts: 16 vs unparsed
    ]
    assert rows[0]["prompt"] == actor_prompt("t1")  # the question, not the refinement prompt
    assert rows[0]["chosen"] == [{"role": "assistant", "content": "Answer: 5"}]
    assert rows[0]["rejected"] == [{"role": "assistant", "content": "Answer: 6"}]
    assert (rows[0]["chosen_reward"], rows[0]["rejected_reward"]) == (1.0, 0.0)
    assert rows[3]["prompt"] == actor_prompt("t2") and rows[3]["task_id"] == "t2"
    # a pair never mixes states: both sides of a group pair were generated from its prompt
    messages = {t.id: t.messages for p in log.values() for t in p.turns}
    for row in rows[2:]:
        assert messages[row["chosen_turn_id"]] == messages[row["rejected_turn_id"]] == row["prompt"]
    assert result.skipped == {"group_single_sample": 5}  # E5's first answer and the four refinements
    assert result.row_count == 4 and result.episodes_read == 7


def test_dpo_group_pairs_all_pairs_every_sample_with_each_of_lower_credit(store: Engine, tmp_path: Path) -> None:
    with Recorder(store) as rec:  # one round each: every answer is a sample of its task's first prompt
        t1 = [play_math(rec, "t1", [a], ["correct"], minute=i).actor[0] for i, a in enumerate(["5", "4", "5", "7"])]
        play_math(rec, "t2", ["16"], ["correct"], minute=4)
        play_math(rec, "t2", ["16"], ["correct"], minute=5)  # equal credits: no pair
        play_math(rec, "t3", ["6"], ["correct"], minute=6)  # a single sample: no pair
    right_a, wrong_b, right_c, wrong_d = (t.id for t in t1)

    every = build(store, "dpo", "actor", tmp_path / "all", options=DPOOptions(group_pairs="all"))
    rows = rows_of(every.path)
    pairs = [(r["chosen_turn_id"], r["rejected_turn_id"]) for r in rows]
    # in read order of the chosen side, then of the rejected
    assert pairs == [(right_a, wrong_b), (right_a, wrong_d), (right_c, wrong_b), (right_c, wrong_d)]
    assert len(set(pairs)) == 4 and all(r["pair_kind"] == "group" for r in rows)
    assert all(r["chosen_reward"] > r["rejected_reward"] for r in rows)
    assert all(r["prompt"] == actor_prompt("t1") for r in rows)
    assert every.skipped == {"group_equal_rewards": 1, "group_single_sample": 1}

    extremes = build(store, "dpo", "actor", tmp_path / "extremes")
    assert [(r["chosen_turn_id"], r["rejected_turn_id"]) for r in rows_of(extremes.path)] == [(right_a, wrong_b)]
    assert extremes.skipped == every.skipped

    with pytest.raises(ValueError, match="group_pairs must be 'extremes' .* or 'all' .*; got 'every'"):
        DPOOptions(group_pairs="every")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="add 'group' to pair_kinds"):
        DPOOptions(pair_kinds=("judge",), group_pairs="all")


def test_datasets_build_and_train_take_pairs_for_dpo_only(tmp_path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    from storage.engine import open_store

    engine = open_store(url)
    try:
        with Recorder(engine) as rec:  # two right and two wrong answers to one question
            for i, answer in enumerate(("5", "4", "5", "7")):
                play_math(rec, "t1", [answer], ["correct"], minute=i)
    finally:
        engine.dispose()
    runner = CliRunner()
    for pairs, count in ((["--pairs", "all"], 4), (["--pairs", "extremes"], 1), ([], 1)):
        result = runner.invoke(app, ["datasets", "build", "dpo", "--role", "actor", *pairs, "--since", "all",
                                     "--format", "json"])
        assert result.exit_code == 0, result.output
        [built] = json.loads(result.stdout)
        assert built["rows"] == count, (pairs, built)
        assert {r["pair_kind"] for r in rows_of(Path(built["path"]))} == {"group"}

    for args, message in [
        (["datasets", "build", "sft", "--role", "actor", "--pairs", "all"], "--pairs applies to dpo rows only"),
        (["datasets", "build", "dpo", "--role", "actor", "--pairs", "every"], "--pairs must be 'extremes'"),
        (["train", "kto", "--role", "actor", "--pairs", "all"], "--pairs applies to dpo rows only, not to kto"),
        (["train", "dpo", "--role", "actor", "--pairs", "all", "--dataset", "1"], "snapshot 1 is built already"),
        (["datasets", "build", "dpo", "--role", "actor", "--baseline", "batch"], "--baseline applies to ppo rows"),
    ]:
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2 and message in " ".join(refused.output.split()), (args, refused.output)


def test_dpo_judge_pairs_only_from_identical_prompts(store: Engine, tmp_path: Path) -> None:
    with Recorder(store) as rec:
        differ = play_debate(
            rec, minute=0, answers={"debater_a": ["5", "5"], "debater_b": ["6", "6"]}, winner="debater_a"
        )
        shared = play_debate(
            rec,
            minute=1,
            answers={"debater_a": ["5", "4"], "debater_b": ["6", "5"]},
            winner="debater_b",
            shared_last_prompt=True,
        )
        play_debate(rec, minute=2, answers={"debater_a": ["5", "5"], "debater_b": ["5", "5"]}, winner=None)
    result = build(store, "dpo", "debater_a", tmp_path, game="debate", options=DPOOptions(pair_kinds=("judge",)))
    [row] = rows_of(result.path)
    a_last, b_last = shared.turns[2], shared.turns[3]
    assert a_last.messages == b_last.messages
    assert (row["pair_kind"], row["chosen_turn_id"], row["rejected_turn_id"]) == ("judge", b_last.id, a_last.id)
    assert row["prompt"] == a_last.messages
    assert (row["chosen"][0]["content"], row["rejected"][0]["content"]) == ("Answer: 5", "Answer: 4")
    assert (row["chosen_reward"], row["rejected_reward"]) == (1.0, 0.0)
    assert result.skipped == {"judge_prompts_differ": 1, "judge_tie": 1}
    assert differ.turns[2].messages != differ.turns[3].messages


# --- policy-gradient rows and credit ------------------------------------------------------


def test_ppo_actor_rows_and_group_normalised_advantages(store_with_log, tmp_path: Path) -> None:
    engine, log = store_with_log
    result = build(engine, "ppo", "actor", tmp_path)
    rows = {r["turn_id"]: r for r in rows_of(result.path)}
    assert result.skipped == {"no_logprobs": 1, "logprob_length_mismatch": 1}  # E5's two answers
    assert log["E5"].actor[0].id not in rows and log["E5"].actor[1].id not in rows
    actor = {k: p.actor for k, p in log.items()}

    t1_first = [actor[k][0].id for k in ("E1", "E2", "E3", "E6")]  # rewards 0, 1, 0, 1
    for turn_id, reward in zip(t1_first, [0.0, 1.0, 0.0, 1.0], strict=True):
        row = rows[turn_id]
        assert (row["reward"], row["group_size"]) == (reward, 4)
        assert row["advantage"] == pytest.approx((reward - 0.5) / (0.5 + EPS))
    assert rows[actor["E8"][0].id]["advantage"] == pytest.approx(-0.5 / (0.5 + EPS))  # t2: 16 vs unparsed

    everyone = [r["reward"] for r in rows.values()]
    assert sorted(everyone) == [0.0] * 5 + [1.0] * 4
    mean, std = statistics.fmean(everyone), statistics.pstdev(everyone)
    refined = rows[actor["E1"][1].id]  # alone in its group: normalised over the role
    assert refined["group_size"] == 1
    assert refined["advantage"] == pytest.approx((1.0 - mean) / (std + EPS))

    first = rows[actor["E1"][0].id]
    turn = log["E1"].actor[0]
    assert first["prompt"] == turn.messages and first["completion"] == [{"role": "assistant", "content": "Answer: 6"}]
    assert first["prompt_token_ids"] == turn.prompt_token_ids
    assert first["completion_token_ids"] == turn.completion_token_ids and first["behaviour_logprobs"] == LOGPROBS
    assert (first["episode_id"], first["task_id"], first["seat"]) == (log["E1"].id, "t1", "actor")


def test_ppo_batch_baseline_compares_every_row_with_the_whole_build(store_with_log, tmp_path: Path) -> None:
    """A group whose samples all scored alike gives its rows an advantage too: the build's mean is
    the baseline (the group size is still reported)."""
    engine, log = store_with_log
    rows = {r["turn_id"]: r for r in rows_of(build(engine, "ppo", "actor", tmp_path,
                                                   options=PPOOptions(baseline="batch")).path)}
    everyone = [r["reward"] for r in rows.values()]
    mean, std = statistics.fmean(everyone), statistics.pstdev(everyone)
    for row in rows.values():
        assert row["advantage"] == pytest.approx((row["reward"] - mean) / (std + EPS))
    assert rows[log["E1"].actor[0].id]["group_size"] == 4
    with pytest.raises(ValueError, match="baseline must be one of group, batch"):
        PPOOptions(baseline="episode")


def test_ppo_critic_credit_rewards_improvement(store_with_log, tmp_path: Path) -> None:
    engine, log = store_with_log
    rows = {r["turn_id"]: r for r in rows_of(build(engine, "ppo", "critic", tmp_path).path)}
    critic = {k: p.critic for k, p in log.items()}
    expected = {
        critic["E1"][0].id: 2.0,  # right verdict on 6, then the actor fixed it: 1 + 1
        critic["E1"][1].id: 1.0,  # right verdict on 5, no next answer
        critic["E2"][0].id: 1.0,
        critic["E3"][0].id: 0.0,  # wrong verdict on 7, the actor stayed wrong
        critic["E3"][1].id: 1.0,
        critic["E4"][0].id: 1.0,
        critic["E5"][0].id: 1.0,  # right verdict, still right after: no improvement
        critic["E5"][1].id: 1.0,
        critic["E6"][0].id: -1.0,  # wrong verdict on 5, and the actor broke it: 0 - 1
        critic["E6"][1].id: 0.0,
        critic["E8"][0].id: 0.0,  # no verdict
    }
    assert {turn_id: row["reward"] for turn_id, row in rows.items()} == expected
    # E1's second, E2's and E6's first critiques all reviewed "Answer: 5" on t1: one state
    group = [critic["E1"][1].id, critic["E2"][0].id, critic["E6"][0].id]
    rewards = [1.0, 1.0, -1.0]
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    for turn_id, reward in zip(group, rewards, strict=True):
        assert rows[turn_id]["group_size"] == 3
        assert rows[turn_id]["advantage"] == pytest.approx((reward - mean) / (std + EPS))
    assert rows[critic["E5"][0].id]["group_size"] == 2 and rows[critic["E5"][0].id]["advantage"] == 0.0


# --- KTO, SFT, reward model -----------------------------------------------------------------


def test_kto_labels_follow_credit(store_with_log, tmp_path: Path) -> None:
    engine, log = store_with_log
    actor_rows = rows_of(build(engine, "kto", "actor", tmp_path).path)
    truth = {"t1": "5", "t2": "16", "t3": "6"}
    expected = [
        (t.id, t.parsed_value == truth[p_task])
        for key, p_task in (
            ("E1", "t1"),
            ("E2", "t1"),
            ("E3", "t1"),
            ("E4", "t2"),
            ("E5", "t3"),
            ("E6", "t1"),
            ("E8", "t2"),
        )
        for t in log[key].actor
    ]
    assert [(r["turn_id"], r["label"]) for r in actor_rows] == expected
    critic_rows = {r["turn_id"]: r for r in rows_of(build(engine, "kto", "critic", tmp_path).path)}
    assert critic_rows[log["E1"].critic[0].id]["label"] is True  # credit 2
    assert critic_rows[log["E6"].critic[0].id]["label"] is False  # credit -1
    assert critic_rows[log["E6"].critic[0].id]["reward"] == -1.0


def test_sft_keeps_the_best_correct_turns_per_state(store_with_log, tmp_path: Path) -> None:
    engine, log = store_with_log
    result = build(engine, "sft", "actor", tmp_path, options=SFTOptions(format="messages"))
    actor = {k: p.actor for k, p in log.items()}
    rows = rows_of(result.path)
    assert [r["turn_id"] for r in rows] == [
        actor["E1"][1].id,  # the refinement 5, alone in its state
        actor["E2"][0].id,  # t1 first prompt: the earliest of two correct answers (E6's is left out)
        actor["E4"][0].id,
        actor["E5"][0].id,
        actor["E5"][1].id,
    ]
    assert rows[1]["messages"] == [*actor_prompt("t1"), {"role": "assistant", "content": "Answer: 5"}]
    assert result.skipped == {"below_threshold": 5, "beyond_per_group": 1}

    two = build(engine, "sft", "actor", tmp_path, options=SFTOptions(per_group=2, format="prompt_completion"))
    rows = rows_of(two.path)
    assert [r["turn_id"] for r in rows][1:3] == [actor["E2"][0].id, actor["E6"][0].id]
    assert rows[1]["prompt"] == actor_prompt("t1") and "messages" not in rows[1]


def test_reward_rows_are_balanced_per_difficulty(store_with_log, tmp_path: Path) -> None:
    engine, log = store_with_log
    result = build(engine, "reward", "actor", tmp_path, seed=3)
    rows = rows_of(result.path)
    counts: dict[tuple[str, bool], int] = {}
    for row in rows:
        counts[row["difficulty"], row["label"]] = counts.get((row["difficulty"], row["label"]), 0) + 1
    # easy: 3 correct, 4 incorrect answers; hard: 3 correct, 1 incorrect
    assert counts == {("easy", True): 3, ("easy", False): 3, ("hard", True): 1, ("hard", False): 1}
    assert result.skipped == {"balance_dropped": 3}

    def rank(turn_id: str) -> str:
        return hashlib.sha256(f"3:{turn_id}".encode()).hexdigest()

    hard_right = [log["E4"].actor[0].id, *(t.id for t in log["E5"].actor)]
    easy_wrong = [log[k].actor[i].id for k, i in (("E1", 0), ("E3", 0), ("E3", 1), ("E6", 1))]
    kept = {r["turn_id"] for r in rows}
    assert kept & set(hard_right) == {min(hard_right, key=rank)}
    assert kept & set(easy_wrong) == set(sorted(easy_wrong, key=rank)[:3])
    assert build(engine, "reward", "actor", tmp_path, seed=3).content_hash == result.content_hash

    paired = rows_of(build(engine, "reward", "actor", tmp_path, options=RewardOptions(format="paired")).path)
    assert len(paired) == 3  # t1 first prompts: 2 right x 2 wrong; t2: 16 vs unparsed
    labels = {t.id: t.parsed_value for p in log.values() for t in p.actor}
    messages = {t.id: t.messages for p in log.values() for t in p.actor}
    for row in paired:
        assert messages[row["chosen_turn_id"]] == messages[row["rejected_turn_id"]] == row["prompt"]
        assert labels[row["chosen_turn_id"]] in ("5", "16") and labels[row["rejected_turn_id"]] not in ("5", "16")


def test_builds_take_model_turns_only_and_filter_policies_exactly(store: Engine, tmp_path: Path) -> None:
    with Recorder(store) as rec:
        played = {
            policy: play_math(rec, "t1", ["5"], ["correct"], minute=i, policies={"actor": policy} if policy else None)
            for i, policy in enumerate((None, "actor@v1", "actor@v10", "scripted:calculator"))
        }

    def turns(policy: str | None = None) -> set[str]:
        snapshot = build(store, "kto", "actor", tmp_path, log_filter=LogFilter(policy=policy))
        return {row["turn_id"] for row in rows_of(snapshot.path)}

    def actor_turn(policy: str | None) -> str:
        return played[policy].actor[0].id

    # a scripted bot's turns (byte token ids, logprob 0) are never read, whatever the filter
    assert turns() == {actor_turn(p) for p in (None, "actor@v1", "actor@v10")}
    assert turns("actor@v1") == {actor_turn("actor@v1")}  # exact: not actor@v10
    assert turns("base") == {actor_turn(None)}
    with pytest.raises(EmptyDatasetError, match="a scripted bot's turns are never training data"):
        turns("scripted:calculator")

def test_a_turn_whose_caller_went_away_is_never_a_row(store: Engine, tmp_path: Path) -> None:
    """A turn logged with finish reason "cancelled" (the gateway's record of a client that closed
    its connection) is no answer, though its episode succeeded and its reward says right."""
    with Recorder(store) as rec:
        kept = play_math(rec, "t1", ["5"], ["correct"], minute=0)
        gone = play_math(rec, "t1", ["5"], ["correct"], minute=1)
    with store.begin() as conn:
        conn.execute(update(TURNS).where(TURNS.c.id == gone.actor[0].id).values(finish_reason=CANCELLED))
    for kind in ("sft", "kto", "ppo"):
        assert {row["turn_id"] for row in rows_of(build(store, kind, "actor", tmp_path).path)} == {kept.actor[0].id}



# --- snapshots ------------------------------------------------------------------------------


def test_builds_read_the_train_split_only_unless_forced(store: Engine, tmp_path: Path) -> None:
    with Recorder(store) as rec:
        trained = play_math(rec, "t1", ["5"], ["correct"], minute=0)
        evaluated = {
            split: play_math(rec, "t1", ["5"], ["correct"], minute=1 + i, split=split)
            for i, split in enumerate(("eval", "heldout"))
        }
    default = build(store, "kto", "actor", tmp_path)
    assert {r["episode_id"] for r in rows_of(default.path)} == {trained.id}
    assert default.filter_spec["split"] == "train" and default.filter_spec["evaluation_data"] is False
    for split in ("eval", "heldout", None):
        with pytest.raises(EvaluationDataError, match="evaluation data.*worthless.*evaluation_data=True"):
            LogFilter(split=split)
    forced = build(store, "kto", "actor", tmp_path, log_filter=LogFilter(split="eval", evaluation_data=True))
    assert {r["episode_id"] for r in rows_of(forced.path)} == {evaluated["eval"].id}
    every = build(store, "kto", "actor", tmp_path, log_filter=LogFilter(split=None, evaluation_data=True))
    assert {r["episode_id"] for r in rows_of(every.path)} == {trained.id, *(p.id for p in evaluated.values())}


def test_an_empty_reward_build_says_why(store: Engine, tmp_path: Path) -> None:
    with Recorder(store) as rec:
        for minute in range(3):
            play_math(rec, "t1", ["5"], ["correct"], minute=minute)
    with pytest.raises(EmptyDatasetError, match=r"none of the 3 critic turns read was checked against a ground truth"):
        build(store, "reward", "critic", tmp_path)
    with pytest.raises(EmptyDatasetError, match="all 3 answers read were correct") as raised:
        build(store, "reward", "actor", tmp_path)
    assert "play more episodes" not in str(raised.value)


def test_latest_watermark_reads_only_new_episodes(store: Engine, tmp_path: Path) -> None:
    with Recorder(store) as rec:
        old = [play_math(rec, "t1", ["6", "5"], ["incorrect", "correct"], minute=m) for m in (0, 1)]
        running = play_math(rec, "t2", ["16"], ["correct"], minute=1, finished=False)  # still being played
    first = build(store, "kto", "actor", tmp_path, since="latest")
    assert {r["episode_id"] for r in rows_of(first.path)} == {p.id for p in old}
    assert first.since is None and first.watermark == old[1].end.finished_at
    assert first.filter_spec["commits"] == {"before": first.horizon, "after": None}

    with Recorder(store) as rec:
        rec.episode_finished(
            EpisodeEnd(running.id, EpisodeStatus.SUCCEEDED, 1.0, 2, finished_at=T0 + timedelta(minutes=5))
        )
        new = play_math(rec, "t1", ["5"], ["correct"], minute=6)
    second = build(store, "kto", "actor", tmp_path, since="latest")
    assert [r["turn_id"] for r in rows_of(second.path)] == [running.actor[0].id, new.actor[0].id]
    # by commit number from where the first stopped, never by time (see the late commit below)
    assert second.since is None and second.filter_spec["since_snapshot_id"] == first.id
    assert second.filter_spec["commits"] == {"before": second.horizon, "after": first.horizon}
    assert second.watermark == new.end.finished_at

    files = sorted((tmp_path / "snapshots").iterdir())
    with pytest.raises(EmptyDatasetError, match=rf"no new rows for role actor since snapshot {second.id} "
                                                r"\(commits from \d+ on\).*sparring play"):
        build(store, "kto", "actor", tmp_path, since="latest")
    assert sorted((tmp_path / "snapshots").iterdir()) == files and snapshot_count(store) == 2

    by_turns = build(store, "kto", "actor", tmp_path, log_filter=LogFilter(watermark_on="turn_created_at"))
    assert by_turns.watermark == new.actor[0].created_at


class _Collected:
    """A sink that keeps the records it is given, to be written by hand in a transaction."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return self.records.append


def test_an_episode_committed_late_is_read_by_the_next_build(store: Engine, tmp_path: Path) -> None:
    """A slow writer ends an episode at minute 5 and commits it only after a build has read one that
    finished at minute 10: a watermark on finish times would skip it for good. On PostgreSQL the
    build runs while the writer's transaction is open, holding a commit number at or above the
    build's horizon; on SQLite (one writer at a time, and a build writes its snapshot row) it runs
    just before the writer starts. Either way the next build reads the episode, once."""
    with Recorder(store) as rec:
        early = play_math(rec, "t1", ["5"], ["correct"], minute=10)
    late = _Collected()
    slow = play_math(late, "t2", ["16"], ["correct"], minute=5)
    concurrent = store.dialect.name == "postgresql"
    if not concurrent:
        first = build(store, "kto", "actor", tmp_path, since="latest")
    with store.connect() as writer:
        writer.begin()
        write_rows(writer, to_rows(late.records))  # ends the episode and takes its number
        if concurrent:
            first = build(store, "kto", "actor", tmp_path, since="latest")
        writer.commit()
    assert {r["episode_id"] for r in rows_of(first.path)} == {early.id}
    assert first.watermark == early.end.finished_at > slow.end.finished_at

    second = build(store, "kto", "actor", tmp_path, since="latest")
    assert {r["episode_id"] for r in rows_of(second.path)} == {slow.id}  # read once, not skipped
    with pytest.raises(EmptyDatasetError, match="no new rows"):
        build(store, "kto", "actor", tmp_path, since="latest")


def test_load_snapshot_checks_role_model_kind_and_file(store_with_log, tmp_path: Path) -> None:
    engine, _ = store_with_log
    result = build(engine, "kto", "actor", tmp_path)
    dataset = load_snapshot(engine, result.id, role="actor", base_model=BASE, kind="kto")
    assert len(dataset) == result.row_count == 11

    with pytest.raises(DatasetMismatchError, match=f"snapshot {result.id} was built for role actor, not critic"):
        load_snapshot(engine, result.id, role="critic", base_model=BASE)
    with pytest.raises(DatasetMismatchError, match="base model"):
        load_snapshot(engine, result.id, role="actor", base_model="other-model")
    with pytest.raises(DatasetMismatchError, match="holds kto rows, not dpo rows"):
        load_snapshot(engine, result.id, role="actor", base_model=BASE, kind="dpo")
    with pytest.raises(SnapshotNotFoundError):
        load_snapshot(engine, result.id + 100, role="actor", base_model=BASE)

    text = result.path.read_text()
    result.path.write_text(text.replace("Answer: 6", "Answer: 5", 1))
    with pytest.raises(SnapshotFileError, match="changed since it was built"):
        load_snapshot(engine, result.id, role="actor", base_model=BASE)
    result.path.unlink()
    with pytest.raises(SnapshotFileError, match="missing"):
        load_snapshot(engine, result.id, role="actor", base_model=BASE)


def test_every_kind_loads_in_trl_conversational_format(store_with_log, tmp_path: Path, tokenizer) -> None:
    engine, _ = store_with_log
    builds = [
        ("dpo", None),
        ("kto", None),
        ("ppo", None),
        ("sft", None),
        ("reward", None),
        ("reward", RewardOptions(format="paired")),
        ("sft", SFTOptions(format="prompt_completion")),
    ]
    for kind, options in builds:
        result = build(engine, kind, "actor", tmp_path, options=options)
        dataset = load_snapshot(engine, result.id, role="actor", base_model=BASE, kind=kind)
        assert len(dataset) == result.row_count
        for row in dataset:
            assert is_conversational(row), (kind, row)
            for column in ("chosen", "rejected", "completion"):
                if column in row:
                    assert [m["role"] for m in row[column]] == ["assistant"]
            templated = apply_chat_template(row, tokenizer)  # what TRL's trainers do first
            assert all(
                isinstance(v, str)
                for k, v in templated.items()
                if k in ("prompt", "chosen", "rejected", "completion", "text")
            )


def test_sft_balance_keeps_as_many_right_verdicts_of_each_label(store: Engine, tmp_path: Path) -> None:
    """A critic reviewing a weak actor is right mostly by saying "incorrect": balanced rows keep
    as many right "correct" verdicts as right "incorrect" ones (a seeded choice of the latter)."""
    with Recorder(store) as sink:
        for minute, (task, wrong) in enumerate([("t1", "6"), ("t2", "15"), ("t3", "7"), ("t1", "9"), ("t2", "17")]):
            play_math(sink, task, [wrong], ["incorrect"], minute=minute)  # five distinct states
        play_math(sink, "t3", ["6"], ["correct"], minute=9)
    plain = rows_of(build(store, "sft", "critic", tmp_path).path)
    assert sorted(r["completion"][0]["content"] for r in plain) == ["Verdict: correct"] + ["Verdict: incorrect"] * 5
    result = build(store, "sft", "critic", tmp_path, options=SFTOptions(balance=True), seed=1)
    rows = rows_of(result.path)
    assert sorted(r["completion"][0]["content"] for r in rows) == ["Verdict: correct", "Verdict: incorrect"]
    assert result.skipped["balanced_out"] == 4
    again = rows_of(build(store, "sft", "critic", tmp_path, options=SFTOptions(balance=True), seed=1).path)
    assert [r["turn_id"] for r in again] == [r["turn_id"] for r in rows]
