"""The steps of a discussion: one node plays a round (every agent answers at once, so a
batching backend serves them together; the rules judge checks each answer), and the router
starts the next round until ``options.rounds`` are played."""

from __future__ import annotations

import asyncio
from typing import Literal

from langgraph.graph import END
from langgraph.runtime import Runtime

from graphs.context import EpisodeContext
from graphs.credit import CORRECT
from graphs.discussion import prompts
from graphs.discussion.options import DiscussionOptions
from graphs.discussion.state import AGENTS, MOVE_BONUS, Answer, State, answers_of_round
from graphs.judges.answers import extract_answer
from graphs.judges.ground_truth import is_correct


async def discuss(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """One round: each agent answers; reward ``correct`` (1/0, 0 when unparsed) on each turn
    when the truth is known. From the second round on, with ``move_bonus`` > 0, each right
    answer of the previous round earns ``move_bonus`` (reward ``move_bonus``, on that turn)
    per agent that was wrong then and is right now."""
    ctx = runtime.context
    options: DiscussionOptions = ctx.options  # type: ignore[assignment]
    seats = AGENTS[: options.agents]
    round_ = len(state["answers"]) // options.agents
    turns = await asyncio.gather(*(
        ctx.generate(seat, prompts.agent_messages(ctx.task.question, seat, state["answers"], round_), round=round_,
                     parse=extract_answer)
        for seat in seats
    ))
    ctx.stage = f"check round {round_}"
    truth = ctx.task.answer
    checks: list[bool | None] = [None] * len(turns)
    if truth is not None:
        checks = list(await asyncio.gather(*(asyncio.to_thread(is_correct, t.parsed, truth) for t in turns)))
    answers = []
    for seat, turn, correct in zip(seats, turns, checks, strict=True):
        if correct is not None:
            ctx.reward(seat, CORRECT, float(correct), turn_id=turn.id, round=round_, answer=turn.parsed)
        answers.append(Answer(seat=seat, round=round_, turn_id=turn.id, text=turn.text, value=turn.parsed,
                              correct=correct))
    if round_ > 0 and options.move_bonus > 0 and truth is not None:
        _reward_moves(ctx, answers_of_round(state["answers"], round_ - 1), answers, options.move_bonus)
    return {"answers": answers}


def _reward_moves(ctx: EpisodeContext, before: list[Answer], now: list[Answer], bonus: float) -> None:
    moved = [b["seat"] for b, n in zip(before, now, strict=True) if not b["correct"] and n["correct"]]
    if not moved:
        return
    for answer in before:
        if answer["correct"]:
            ctx.reward(answer["seat"], MOVE_BONUS, bonus * len(moved), turn_id=answer["turn_id"],
                       round=answer["round"], moved=moved)


def after_round(state: State, runtime: Runtime[EpisodeContext]) -> Literal["discuss", "__end__"]:
    options: DiscussionOptions = runtime.context.options  # type: ignore[assignment]
    return END if len(state["answers"]) >= options.agents * options.rounds else "discuss"
