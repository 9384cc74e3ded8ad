"""The steps of a debate: the two debaters (A, then B, each round) and the judge.

The judge is the judge seat's model when that seat has a policy, else rules (``judged_by``
"rules"): the side whose final stated answer matches the ground truth wins, and a tie is
recorded when both or neither do.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from langgraph.runtime import Runtime

from graphs.context import EpisodeContext
from graphs.debate import prompts
from graphs.debate.state import DEBATERS, LABELS, Argument, Decision, State, win_value
from graphs.judges.answers import extract_answer
from graphs.judges.ground_truth import is_correct
from graphs.judges.llm_judge import parse_winner
from graphs.seats import RULES

UNPARSEABLE = "unparseable judge output"


async def debater_a(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    return await _argue("debater_a", state, runtime.context)


async def debater_b(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    return await _argue("debater_b", state, runtime.context)


async def _argue(seat: str, state: State, ctx: EpisodeContext) -> dict:
    """One debater turn; reward ``correct`` (1/0) on it when the truth is known."""
    round_ = sum(argument["seat"] == seat for argument in state["arguments"])
    messages = prompts.debater_messages(ctx.task.question, seat, state["arguments"])
    turn = await ctx.generate(seat, messages, round=round_, parse=extract_answer)
    if ctx.task.answer is not None:
        correct = await asyncio.to_thread(is_correct, turn.parsed, ctx.task.answer)
        ctx.reward(seat, "correct", float(correct), turn_id=turn.id, round=round_, answer=turn.parsed)
    return {"arguments": [Argument(seat=seat, turn_id=turn.id, round=round_, text=turn.text, answer=turn.parsed)]}


def after_debater_b(state: State, runtime: Runtime[EpisodeContext]) -> Literal["debater_a", "judge"]:
    rounds_done = sum(argument["seat"] == "debater_b" for argument in state["arguments"])
    return "judge" if rounds_done >= runtime.context.options.rounds else "debater_a"


async def judge(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """Decide the winner; record the judgment and ``win`` (1/0, 0.5 each for a tie) on each
    debater's last turn."""
    ctx = runtime.context
    ctx.stage = "judge"
    arguments = state["arguments"]
    last_turn = {seat: [a for a in arguments if a["seat"] == seat][-1]["turn_id"] for seat in DEBATERS}
    final_answers = {seat: _final_answer(arguments, seat) for seat in DEBATERS}
    truth = ctx.task.answer
    final_correct = None
    if truth is not None:
        checks = [asyncio.to_thread(is_correct, final_answers[seat], truth) for seat in DEBATERS]
        final_correct = dict(zip(DEBATERS, await asyncio.gather(*checks), strict=True))

    if "judge" in ctx.policies:
        messages = prompts.judge_messages(ctx.task.question, arguments)
        turn = await ctx.generate("judge", messages, round=ctx.options.rounds, parse=parse_winner)
        winner = None if turn.parsed is None else f"debater_{turn.parsed}"
        decision = Decision(
            winner=winner,
            judged_by="model",
            rationale=turn.text if winner else UNPARSEABLE,
            judge_turn_id=turn.id,
            final_answers=final_answers,
            final_correct=final_correct,
        )
    elif final_correct is None:
        raise ValueError(
            f"task {ctx.task.id!r} has no ground-truth answer, so rules cannot judge this debate; "
            "give the judge seat a model policy (e.g. --seat judge=model)"
        )
    else:
        decision = Decision(
            winner=_rules_winner(final_correct),
            judged_by="rules",
            rationale=_rules_rationale(final_answers, final_correct, truth),
            judge_turn_id=None,
            final_answers=final_answers,
            final_correct=final_correct,
        )
    _record(ctx, decision, last_turn)
    return {"decision": decision}


def _final_answer(arguments: list[Argument], seat: str) -> str | None:
    stated = [a["answer"] for a in arguments if a["seat"] == seat and a["answer"] is not None]
    return stated[-1] if stated else None


def _rules_winner(final_correct: dict[str, bool]) -> str | None:
    right = [seat for seat in DEBATERS if final_correct[seat]]
    return right[0] if len(right) == 1 else None


def _rules_rationale(final_answers: dict[str, str | None], final_correct: dict[str, bool], truth: str) -> str:
    sides = "; ".join(
        f"Debater {LABELS[seat]}'s final answer {final_answers[seat]!r} is "
        + ("correct" if final_correct[seat] else "incorrect")
        for seat in DEBATERS
    )
    return f"Ground truth {truth!r}: {sides}."


def _record(ctx: EpisodeContext, decision: Decision, last_turn: dict[str, str]) -> None:
    winner = decision["winner"]
    loser = None if winner is None else next(seat for seat in DEBATERS if seat != winner)
    ctx.judgment(
        judge_seat="judge",
        winner_seat=winner,
        loser_seat=loser,
        preferred_turn_id=None if winner is None else last_turn[winner],
        rejected_turn_id=None if loser is None else last_turn[loser],
        rationale=decision["rationale"],
        judge_turn_id=decision["judge_turn_id"],
        judge_policy=None if decision["judged_by"] == "model" else RULES,
        rubric="debate" if decision["judged_by"] == "model" else "correctness",
    )
    for seat in DEBATERS:
        ctx.reward(seat, "win", win_value(seat, winner), turn_id=last_turn[seat], judged_by=decision["judged_by"])
