"""Both games played through their compiled graphs with scripted policies; every test checks
the whole trace: turn order, what each seat saw, rewards, judgments and the outcome."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from memory_sink import MemorySink
from tiny_model import tiny_model, tiny_tokenizer

from graphs.context import EpisodeContext
from graphs.debate import prompts as debate_prompts
from graphs.math_reflection import prompts as reflection_prompts
from graphs.options import GameOptions, describe
from graphs.policies.base import (
    Backend,
    BackendError,
    ChoiceUnsupportedError,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
)
from graphs.policies.inprocess import InProcessBackend
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.registry import GameSpec, get_game, scripted_bot
from graphs.tasks.base import Task

REFLECTION = get_game("math-reflection")
DEBATE = get_game("debate")
GRAPHS = {game.name: game.build() for game in (REFLECTION, DEBATE)}

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does Tom have?"
TASK = Task(id="t-1", question=QUESTION, answer="7", source="test")
NO_TRUTH = Task(id="t-2", question=QUESTION, answer=None, source="test")


class Episode:
    """One episode: its context, final state and everything the sink received."""

    def __init__(self, game: GameSpec, task: Task, backends: dict[str, Backend], options: GameOptions) -> None:
        self.game, self.task, self.options, self.sink = game, task, options, MemorySink()
        self.ctx = EpisodeContext(
            episode_id="episode-1",
            task=task,
            seats={seat.name: seat for seat in game.seats},
            policies={seat: Policy(backend, SamplingParams(temperature=0)) for seat, backend in backends.items()},
            sink=self.sink,
            seed=7,
            options=options,
        )
        self.state: dict[str, Any] = {}

    def play(self) -> Episode:
        initial = self.game.initial_state(self.task, self.options)
        self.state = asyncio.run(GRAPHS[self.game.name].ainvoke(initial, context=self.ctx))
        return self

    @property
    def order(self) -> list[tuple[str, int, int]]:
        return [(t.seat, t.index, t.round) for t in self.sink.turns]

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.sink.turns]

    @property
    def rewards(self) -> list[tuple[str, str, float, str | None, dict | None]]:
        return [(r.seat, r.name, r.value, r.turn_id, r.info) for r in self.sink.rewards]

    def outcome(self) -> tuple[float | None, dict[str, Any]]:
        result = self.game.outcome(self.state)
        return result.reward, result.summary


def replay(*responses: str | BackendError) -> ScriptedBackend:
    return ScriptedBackend.replay(list(responses))


def reflection(actor: Backend, critic: Backend, task: Task = TASK, **options: Any) -> Episode:
    return Episode(REFLECTION, task, {"actor": actor, "critic": critic}, REFLECTION.make_options(options))


def debate(a: Backend, b: Backend, judge: Backend | None = None, task: Task = TASK, **options: Any) -> Episode:
    backends = {"debater_a": a, "debater_b": b} | ({"judge": judge} if judge else {})
    return Episode(DEBATE, task, backends, DEBATE.make_options(options))


def play_reflection(actor: Backend, critic: Backend, task: Task = TASK, **options: Any) -> Episode:
    return reflection(actor, critic, task, **options).play()


def play_debate(a: Backend, b: Backend, judge: Backend | None = None, task: Task = TASK, **options: Any) -> Episode:
    return debate(a, b, judge, task, **options).play()


# --- math-reflection -----------------------------------------------------------------------


def test_registry_lists_both_games_with_their_seats() -> None:
    assert [s.name for s in REFLECTION.seats] == ["actor", "critic", "judge"]
    assert [(s.name, str(s.kind)) for s in DEBATE.seats] == [
        ("debater_a", "learner"),
        ("debater_b", "context"),
        ("judge", "judge"),
    ]


def test_critique_reaches_the_refinement_and_critic_approval_stops_the_episode() -> None:
    critique = "You added wrong: 3 + 4 is 7, not 6.\nVerdict: incorrect"
    episode = play_reflection(
        replay("3 + 4 = 6.\nAnswer: 6", "I fixed the sum.\nAnswer: 7"),
        replay(critique, "Verdict: correct"),
        turns=3,
    )
    actor0, critic0, actor1, critic1 = episode.sink.turns
    assert episode.order == [("actor", 0, 0), ("critic", 1, 0), ("actor", 2, 1), ("critic", 3, 1)]
    first_prompt = [{"role": "user", "content": f"{QUESTION}\nGive the final answer as 'Answer: <number>'."}]
    assert actor0.messages == first_prompt
    notes = "3 + 4 = 6 is wrong: it is 7."
    assert critic0.messages == reflection_prompts.critic_messages(QUESTION, "3 + 4 = 6.\nAnswer: 6", notes)
    assert ("Proposed solution:\n3 + 4 = 6.\nAnswer: 6\n\nA calculator checked the arithmetic of the solution: "
            f"{notes}\n\nCheck the proposed solution") in critic0.messages[0]["content"]
    assert actor1.messages == [
        *first_prompt,
        {"role": "assistant", "content": "3 + 4 = 6.\nAnswer: 6"},
        {
            "role": "user",
            "content": f"A reviewer checked your answer and wrote:\n\n{critique}\n\n"
            "A calculator checked the arithmetic of your answer: 3 + 4 = 6 is wrong: it is 7.\n\n"
            "Solve the problem again, fixing any mistake. Give the final answer as 'Answer: <number>'.",
        },
    ]
    assert critic1.messages == reflection_prompts.critic_messages(QUESTION, "I fixed the sum.\nAnswer: 7")
    assert [(t.parsed, t.parsed_value) for t in episode.sink.turns] == [
        (True, "6"),
        (True, "incorrect"),
        (True, "7"),
        (True, "correct"),
    ]
    assert [(t.seat_kind, t.policy, t.served_by, t.backend) for t in episode.sink.turns] == [
        ("learner", "scripted:replay", "scripted:replay", "scripted")
    ] * 4
    assert episode.rewards == [
        ("actor", "correct", 0.0, actor0.id, {"round": 0, "answer": "6"}),
        (
            "critic",
            "verdict_correct",
            1.0,
            critic0.id,
            {"round": 0, "verdict": "incorrect", "truth": False, "constrained": True},
        ),
        ("actor", "correct", 1.0, actor1.id, {"round": 1, "answer": "7"}),
        (
            "critic",
            "verdict_correct",
            1.0,
            critic1.id,
            {"round": 1, "verdict": "correct", "truth": True, "constrained": True},
        ),
    ]
    assert episode.sink.judgments == []
    assert episode.outcome() == (
        1.0,
        {
            "answers": ["6", "7"],
            "correct_by_turn": [False, True],
            "first_correct": False,
            "final_correct": True,
            "majority_correct": True,
            "verdicts": [False, True],
            "critic_accuracy": 1.0,
        },
    )
    assert episode.ctx.num_turns == 4


def test_the_checker_notes_only_wrong_steps_and_can_be_turned_off() -> None:
    """No note, to the critic or the refinement, when every step it can check is right; none at
    all with ``checker=False``."""
    critique = "Verdict: incorrect"
    checked = play_reflection(replay("3 + 4 = 7.\nAnswer: 7", "Answer: 7"), replay(critique, critique), turns=2)
    unchecked = play_reflection(replay("3 + 4 = 6.\nAnswer: 6", "Answer: 6"), replay(critique, critique), turns=2,
                                checker=False)
    for episode, previous in ((checked, "3 + 4 = 7.\nAnswer: 7"), (unchecked, "3 + 4 = 6.\nAnswer: 6")):
        review, refinement = episode.sink.turns[1:3]
        assert review.messages == reflection_prompts.critic_messages(QUESTION, previous)
        assert refinement.messages[1:] == reflection_prompts.refine_messages(QUESTION, previous, critique)[1:]
        assert "calculator" not in review.messages[0]["content"] + refinement.messages[-1]["content"]


def test_approval_of_a_wrong_answer_ends_the_episode_when_stop_on_correct() -> None:
    episode = play_reflection(replay("Answer: 8"), scripted_bot("always-correct"), turns=3)
    assert episode.order == [("actor", 0, 0), ("critic", 1, 0)]
    assert episode.rewards == [
        ("actor", "correct", 0.0, episode.ids[0], {"round": 0, "answer": "8"}),
        (
            "critic",
            "verdict_correct",
            0.0,
            episode.ids[1],
            {"round": 0, "verdict": "correct", "truth": False, "constrained": True},
        ),
    ]
    assert episode.outcome()[0] == 0.0
    assert episode.outcome()[1]["critic_accuracy"] == 0.0


def test_without_stop_on_correct_the_actor_uses_all_its_turns() -> None:
    episode = play_reflection(
        replay("Answer: 7", "Answer: 7"), scripted_bot("always-correct"), turns=2, stop_on_correct=False
    )
    assert episode.order == [("actor", 0, 0), ("critic", 1, 0), ("actor", 2, 1), ("critic", 3, 1)]
    assert [r[:3] for r in episode.rewards] == [
        ("actor", "correct", 1.0),
        ("critic", "verdict_correct", 1.0),
        ("actor", "correct", 1.0),
        ("critic", "verdict_correct", 1.0),
    ]


def test_stop_when_right_has_only_wrong_answers_reviewed_and_refined() -> None:
    episode = play_reflection(replay("Answer: 6", "Answer: 7"), scripted_bot("always-incorrect"), turns=3,
                              stop_when_right=True)
    assert episode.order == [("actor", 0, 0), ("critic", 1, 0), ("actor", 2, 1)]  # the right answer: unreviewed
    assert [r[:3] for r in episode.rewards] == [
        ("actor", "correct", 0.0), ("critic", "verdict_correct", 1.0), ("actor", "correct", 1.0)]
    assert episode.outcome()[1]["correct_by_turn"] == [False, True]
    right_at_once = play_reflection(replay("Answer: 7"), scripted_bot("always-incorrect"), turns=3,
                                    stop_when_right=True)
    assert right_at_once.order == [("actor", 0, 0)]
    assert right_at_once.outcome()[0] == 1.0


def test_five_turns_with_a_critic_that_always_objects() -> None:
    answers = ["6", "6", "8", "7", "7"]
    episode = play_reflection(replay(*(f"Answer: {a}" for a in answers)), scripted_bot("always-incorrect"), turns=5)
    assert episode.order == [(seat, index, index // 2) for index, seat in enumerate(["actor", "critic"] * 5)]
    actor_turns = episode.sink.turns[0::2]
    critic_turns = episode.sink.turns[1::2]
    truth = [False, False, False, True, True]
    expected_rewards = []
    for round_, (answer, correct) in enumerate(zip(answers, truth, strict=True)):
        expected_rewards.append(
            ("actor", "correct", float(correct), actor_turns[round_].id, {"round": round_, "answer": answer})
        )
        expected_rewards.append(
            (
                "critic",
                "verdict_correct",
                float(not correct),
                critic_turns[round_].id,
                {"round": round_, "verdict": "incorrect", "truth": correct, "constrained": True},
            )
        )
    assert episode.rewards == expected_rewards
    for round_ in range(1, 5):  # each refinement answers the critique of the answer before it
        assert actor_turns[round_].messages[1] == {"role": "assistant", "content": f"Answer: {answers[round_ - 1]}"}
        assert critic_turns[round_ - 1].response in actor_turns[round_].messages[2]["content"]
    reward, summary = episode.outcome()
    assert reward == 1.0
    assert summary == {
        "answers": answers,
        "correct_by_turn": truth,
        "first_correct": False,
        "final_correct": True,
        "majority_correct": True,  # "6" and "7" tie at two votes; the later "7" wins the tie
        "verdicts": [False] * 5,
        "critic_accuracy": 0.6,
    }


def test_unparseable_answer_scores_zero_and_the_episode_goes_on() -> None:
    episode = play_reflection(
        replay("I am not sure what to do here.", "Answer: 7"), scripted_bot("always-incorrect"), turns=2
    )
    assert episode.order == [("actor", 0, 0), ("critic", 1, 0), ("actor", 2, 1), ("critic", 3, 1)]
    first = episode.sink.turns[0]
    assert (first.parsed, first.parsed_value) == (False, None)
    assert episode.rewards[:2] == [
        ("actor", "correct", 0.0, first.id, {"round": 0, "answer": None}),
        (
            "critic",
            "verdict_correct",
            1.0,
            episode.ids[1],
            {"round": 0, "verdict": "incorrect", "truth": False, "constrained": True},
        ),
    ]
    reward, summary = episode.outcome()
    assert (reward, summary["answers"], summary["majority_correct"]) == (1.0, [None, "7"], True)


class Unconstrained(ScriptedBackend):
    """A backend that cannot constrain a response to a choice, as a plain OpenAI-compatible API."""

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        if request.choice is not None:
            raise ChoiceUnsupportedError("this backend cannot constrain a response")
        return await super().generate(request)


def test_the_verdict_line_is_chosen_after_the_critique_and_recorded_as_constrained() -> None:
    critique = "Step 2 adds 3 and 4 correctly.\n**Verdict:** Incorrect\nI am sure of it."
    episode = play_reflection(replay("Answer: 7"), replay(critique), turns=1)
    critic0 = episode.sink.turns[1]
    assert critic0.response == "Step 2 adds 3 and 4 correctly.\nVerdict: incorrect"
    assert (critic0.parsed, critic0.parsed_value) == (True, "incorrect")
    assert critic0.sampling["final_choice"] == {
        "marker": "Verdict:",
        "options": ["correct", "incorrect"],
        "chosen": "incorrect",
        "constrained": True,
    }
    assert critic0.completion_token_ids == list(critic0.response.encode())
    assert len(critic0.logprobs) == len(critic0.completion_token_ids)
    assert episode.state["critiques"][0]["constrained"] is True


def test_a_critique_without_a_verdict_gets_one_from_a_backend_that_constrains() -> None:
    episode = play_reflection(replay("Answer: 7"), scripted_bot("always-correct"), turns=1)
    critic0 = episode.sink.turns[1]
    assert critic0.response == "The solution looks right to me.\nVerdict: correct"
    info = {"round": 0, "verdict": "correct", "truth": True, "constrained": True}
    assert episode.rewards[1][2:] == (1.0, critic0.id, info)


def test_unparseable_verdict_scores_zero_and_leads_to_a_refinement() -> None:
    """Without constrained decoding (the backend cannot), a critique that names no verdict stays unparsed."""
    critic = Unconstrained.replay(["Looks fine to me.", "Verdict: correct"])
    episode = play_reflection(replay("Answer: 7", "Answer: 7"), critic)
    critic0 = episode.sink.turns[1]
    assert (critic0.response, critic0.parsed, critic0.parsed_value) == ("Looks fine to me.", False, None)
    assert critic0.sampling["final_choice"]["constrained"] is False
    assert episode.rewards[1] == (
        "critic",
        "verdict_correct",
        0.0,
        critic0.id,
        {"round": 0, "verdict": None, "truth": True, "constrained": False},
    )
    assert episode.order == [("actor", 0, 0), ("critic", 1, 0), ("actor", 2, 1), ("critic", 3, 1)]
    assert episode.outcome()[1]["verdicts"] == [None, True]
    assert episode.outcome()[1]["critic_accuracy"] == 0.5


def test_one_turn_still_gets_one_critique() -> None:
    episode = play_reflection(replay("Answer: 7"), scripted_bot("always-incorrect"), turns=1)
    assert episode.order == [("actor", 0, 0), ("critic", 1, 0)]
    assert [r[:3] for r in episode.rewards] == [("actor", "correct", 1.0), ("critic", "verdict_correct", 0.0)]


def test_task_without_ground_truth_records_no_correctness_rewards() -> None:
    episode = play_reflection(
        replay("Answer: 7", "Answer: 8"), scripted_bot("always-incorrect"), task=NO_TRUTH, turns=2
    )
    assert episode.order == [("actor", 0, 0), ("critic", 1, 0), ("actor", 2, 1), ("critic", 3, 1)]
    assert episode.rewards == []
    assert episode.outcome() == (
        None,
        {
            "answers": ["7", "8"],
            "correct_by_turn": [None, None],
            "first_correct": None,
            "final_correct": None,
            "majority_correct": None,
            "verdicts": [False, False],
            "critic_accuracy": None,
        },
    )


def test_a_backend_error_propagates_with_the_failing_seat_as_stage() -> None:
    episode = reflection(replay("Answer: 7"), replay(BackendError("critic model crashed")))
    with pytest.raises(BackendError, match="critic model crashed"):
        episode.play()
    assert episode.ctx.stage == "critic turn 1"
    # the turn before the failure was logged and scored; the failed call logged nothing
    assert episode.order == [("actor", 0, 0)]
    assert [r[:3] for r in episode.rewards] == [("actor", "correct", 1.0)]


def test_an_exhausted_script_is_a_backend_error_in_the_actor_seat() -> None:
    episode = reflection(replay("Answer: 6"), scripted_bot("always-incorrect"), turns=2)
    with pytest.raises(BackendError, match="exhausted after 1 responses"):
        episode.play()
    assert episode.ctx.stage == "actor turn 2"
    assert [t.seat for t in episode.sink.turns] == ["actor", "critic"]


# --- debate --------------------------------------------------------------------------------


def test_rules_judge_a_debate_on_the_final_answers() -> None:
    episode = play_debate(
        replay("3 plus 4 is 7.\nAnswer: 7", "B is wrong.\nAnswer: 7"),
        replay("I count 8.\nAnswer: 8", "Still 8.\nAnswer: 8"),
        rounds=2,
    )
    a0, b0, a1, b1 = episode.sink.turns
    assert episode.order == [("debater_a", 0, 0), ("debater_b", 1, 0), ("debater_a", 2, 1), ("debater_b", 3, 1)]
    intro_a = debate_prompts.debater_messages(QUESTION, "debater_a", [])[0]["content"]
    assert QUESTION in intro_a and intro_a.endswith(debate_prompts.FIRST_ROUND)
    assert a0.messages == [{"role": "user", "content": intro_a}]
    assert b0.messages[-1]["content"].endswith(f"Debater A:\n3 plus 4 is 7.\nAnswer: 7\n\n{debate_prompts.FIRST_ROUND}")
    assert a1.messages == [
        {"role": "user", "content": intro_a},
        {"role": "assistant", "content": "3 plus 4 is 7.\nAnswer: 7"},
        {"role": "user", "content": f"Debater B:\nI count 8.\nAnswer: 8\n\n{debate_prompts.LATER_ROUND}"},
    ]
    assert b1.messages == [
        b0.messages[0],
        {"role": "assistant", "content": "I count 8.\nAnswer: 8"},
        {"role": "user", "content": f"Debater A:\nB is wrong.\nAnswer: 7\n\n{debate_prompts.LATER_ROUND}"},
    ]
    assert [t.seat_kind for t in episode.sink.turns] == ["learner", "context", "learner", "context"]
    assert episode.rewards == [
        ("debater_a", "correct", 1.0, a0.id, {"round": 0, "answer": "7"}),
        ("debater_b", "correct", 0.0, b0.id, {"round": 0, "answer": "8"}),
        ("debater_a", "correct", 1.0, a1.id, {"round": 1, "answer": "7"}),
        ("debater_b", "correct", 0.0, b1.id, {"round": 1, "answer": "8"}),
        ("debater_a", "win", 1.0, a1.id, {"judged_by": "rules"}),
        ("debater_b", "win", 0.0, b1.id, {"judged_by": "rules"}),
    ]
    (judgment,) = episode.sink.judgments
    assert (
        judgment.judge_seat,
        judgment.judge_policy,
        judgment.winner_seat,
        judgment.loser_seat,
        judgment.preferred_turn_id,
        judgment.rejected_turn_id,
        judgment.judge_turn_id,
    ) == ("judge", "rules", "debater_a", "debater_b", a1.id, b1.id, None)
    assert judgment.rationale == (
        "Ground truth '7': Debater A's final answer '7' is correct; Debater B's final answer '8' is incorrect."
    )
    assert episode.outcome() == (
        1.0,
        {
            "winner": "debater_a",
            "judged_by": "rules",
            "final_answer_a": "7",
            "final_answer_b": "8",
            "a_correct": True,
            "b_correct": False,
            "rounds": 2,
        },
    )


def test_rules_tie_when_both_final_answers_are_correct() -> None:
    # A changes its mind to the right answer; B's last turn states nothing, so its round-1 answer counts
    episode = play_debate(
        replay("Answer: 8", "B convinced me.\nAnswer: 7"),
        replay("Answer: 7", "I have nothing to add."),
        rounds=2,
    )
    a0, b0, a1, b1 = episode.sink.turns
    assert (b1.parsed, b1.parsed_value) == (False, None)
    assert episode.rewards == [
        ("debater_a", "correct", 0.0, a0.id, {"round": 0, "answer": "8"}),
        ("debater_b", "correct", 1.0, b0.id, {"round": 0, "answer": "7"}),
        ("debater_a", "correct", 1.0, a1.id, {"round": 1, "answer": "7"}),
        ("debater_b", "correct", 0.0, b1.id, {"round": 1, "answer": None}),
        ("debater_a", "win", 0.5, a1.id, {"judged_by": "rules"}),
        ("debater_b", "win", 0.5, b1.id, {"judged_by": "rules"}),
    ]
    (judgment,) = episode.sink.judgments
    assert (judgment.winner_seat, judgment.loser_seat, judgment.preferred_turn_id, judgment.rejected_turn_id) == (
        None,
        None,
        None,
        None,
    )
    reward, summary = episode.outcome()
    assert (reward, summary["winner"], summary["final_answer_b"], summary["b_correct"]) == (0.5, None, "7", True)


def test_rules_tie_when_neither_is_correct() -> None:
    episode = play_debate(replay("Answer: 5"), replay("Answer: 6"), rounds=1)
    assert episode.order == [("debater_a", 0, 0), ("debater_b", 1, 0)]
    assert [r[:3] for r in episode.rewards[-2:]] == [("debater_a", "win", 0.5), ("debater_b", "win", 0.5)]
    assert episode.sink.judgments[0].winner_seat is None


def test_model_judge_decides_even_against_the_ground_truth() -> None:
    judge_text = "Debater B explained the count step by step.\nWinner: B"
    episode = play_debate(replay("Answer: 7"), replay("Answer: 8"), replay(judge_text), rounds=1)
    a0, b0, judge_turn = episode.sink.turns
    assert episode.order == [("debater_a", 0, 0), ("debater_b", 1, 0), ("judge", 2, 1)]
    assert judge_turn.messages == debate_prompts.judge_messages(
        QUESTION,
        [
            {"seat": "debater_a", "turn_id": a0.id, "round": 0, "text": "Answer: 7", "answer": "7"},
            {"seat": "debater_b", "turn_id": b0.id, "round": 0, "text": "Answer: 8", "answer": "8"},
        ],
    )
    assert "Debater A (round 1):\nAnswer: 7\n\nDebater B (round 1):\nAnswer: 8" in judge_turn.messages[0]["content"]
    assert (judge_turn.seat_kind, judge_turn.parsed, judge_turn.parsed_value) == ("judge", True, "b")
    (judgment,) = episode.sink.judgments
    assert (
        judgment.judge_policy,
        judgment.winner_seat,
        judgment.loser_seat,
        judgment.preferred_turn_id,
        judgment.rejected_turn_id,
        judgment.judge_turn_id,
        judgment.rationale,
    ) == ("scripted:replay", "debater_b", "debater_a", b0.id, a0.id, judge_turn.id, judge_text)
    assert episode.rewards == [
        ("debater_a", "correct", 1.0, a0.id, {"round": 0, "answer": "7"}),
        ("debater_b", "correct", 0.0, b0.id, {"round": 0, "answer": "8"}),
        ("debater_a", "win", 0.0, a0.id, {"judged_by": "model"}),
        ("debater_b", "win", 1.0, b0.id, {"judged_by": "model"}),
    ]
    reward, summary = episode.outcome()
    assert (reward, summary["winner"], summary["judged_by"], summary["a_correct"]) == (0.0, "debater_b", "model", True)


def test_unparseable_model_judgment_is_a_tie_and_the_episode_completes() -> None:
    episode = play_debate(replay("Answer: 7"), replay("Answer: 8"), replay("Both argued well."), rounds=1)
    judge_turn = episode.sink.turns[-1]
    assert (judge_turn.parsed, judge_turn.parsed_value) == (False, None)
    (judgment,) = episode.sink.judgments
    assert (judgment.winner_seat, judgment.rationale, judgment.judge_turn_id) == (
        None,
        "unparseable judge output",
        judge_turn.id,
    )
    assert [r[:3] for r in episode.rewards[-2:]] == [("debater_a", "win", 0.5), ("debater_b", "win", 0.5)]
    assert episode.outcome()[0] == 0.5


def test_model_judge_without_ground_truth_and_no_correct_rewards() -> None:
    episode = play_debate(
        replay("Answer: 7", "Answer: 7"),
        scripted_bot("stubborn"),
        replay("Winner: Debater A"),
        task=NO_TRUTH,
        rounds=2,
    )
    assert [t.seat for t in episode.sink.turns] == ["debater_a", "debater_b", "debater_a", "debater_b", "judge"]
    assert [r[:3] for r in episode.rewards] == [("debater_a", "win", 1.0), ("debater_b", "win", 0.0)]
    reward, summary = episode.outcome()
    assert (reward, summary["a_correct"], summary["b_correct"]) == (1.0, None, None)


def test_rules_cannot_judge_a_task_without_ground_truth() -> None:
    episode = debate(replay("Answer: 7"), replay("Answer: 8"), task=NO_TRUTH, rounds=1)
    with pytest.raises(ValueError, match=r"has no ground-truth answer.*--seat judge=model"):
        episode.play()
    assert episode.ctx.stage == "judge"
    assert episode.sink.judgments == []


def test_a_debater_backend_error_propagates_with_its_seat_as_stage() -> None:
    episode = debate(replay("Answer: 7", "Answer: 7"), replay("Answer: 8", BackendError("B is down")), rounds=2)
    with pytest.raises(BackendError, match="B is down"):
        episode.play()
    assert episode.ctx.stage == "debater_b turn 3"
    assert [t.seat for t in episode.sink.turns] == ["debater_a", "debater_b", "debater_a"]
    assert episode.sink.judgments == []


def test_a_judge_backend_error_propagates_with_the_judge_as_stage() -> None:
    episode = debate(replay("Answer: 7"), replay("Answer: 8"), replay(BackendError("judge is down")), rounds=1)
    with pytest.raises(BackendError, match="judge is down"):
        episode.play()
    assert episode.ctx.stage == "judge turn 2"
    assert episode.sink.judgments == []
    assert [r.name for r in episode.sink.rewards] == ["correct", "correct"]


def test_every_critic_turn_of_a_tiny_in_process_model_has_a_verdict() -> None:
    """A random 2-layer model writes no readable verdict on its own; the constrained line gives
    every critique one, and its token ids and logprobs cover the whole response. Each turn is
    one request with one prefill: the verdict continues the critique's own decoding."""
    tokenizer = tiny_tokenizer()
    backend = InProcessBackend(tiny_model(tokenizer), tokenizer, model_name="tiny")
    critics, turns = [], []
    try:
        for seed, temperature in ((1, 0.0), (2, 1.0), (3, 1.0)):
            options = REFLECTION.make_options({"turns": 2})
            episode = Episode(REFLECTION, TASK, {"actor": backend, "critic": backend}, options)
            episode.ctx.seed = seed
            sampling = SamplingParams(temperature=temperature, max_new_tokens=6)
            episode.ctx.policies = {seat: Policy(backend, sampling) for seat in ("actor", "critic")}
            played = episode.play().sink.turns
            turns += played
            critics += [t for t in played if t.seat == "critic"]
    finally:
        asyncio.run(backend.aclose())
    assert len(critics) >= 3
    stats = backend.stats
    assert (stats.requests, stats.batches, stats.choice_passes) == (len(turns), len(turns), 0)
    assert stats.prefill_tokens == sum(len(t.prompt_token_ids) for t in turns)  # the prompts alone
    for turn in critics:
        assert turn.parsed_value in ("correct", "incorrect")
        assert turn.response.rsplit("\n", 1)[-1] == f"Verdict: {turn.parsed_value}"
        assert turn.sampling["final_choice"]["constrained"] is True
        assert len(turn.logprobs) == len(turn.completion_token_ids)
        assert tokenizer.decode(turn.completion_token_ids) == turn.response


def test_option_titles_name_every_set_option_and_skip_empty_defaults() -> None:
    @dataclass(frozen=True)
    class Options(GameOptions):
        searches: int = 2
        first_search: bool = True
        corpus: str = ""
        env: str | None = None
        hints: bool = False

    assert describe(Options()) == ["2 searches", "first search"]  # nothing for the empty defaults, nor for hints
    assert describe(Options(first_search=False, corpus="mine.jsonl", env="Poker", hints=True)) == [
        "2 searches", "no first search", "mine.jsonl corpus", "Poker env", "hints"]
