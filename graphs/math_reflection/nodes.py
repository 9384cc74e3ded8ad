"""The steps of math-reflection: actor, judge (ground-truth check, no model call), critic,
and the routers that decide whether the critic reviews and the actor refines its answer."""

from __future__ import annotations

import asyncio
from typing import Literal

from langgraph.graph import END
from langgraph.runtime import Runtime

from graphs.context import EpisodeContext
from graphs.judges.answers import extract_answer
from graphs.judges.arithmetic import checker_notes
from graphs.judges.ground_truth import is_correct
from graphs.judges.verdict import parse_verdict
from graphs.math_reflection import prompts
from graphs.math_reflection.state import Answer, Critique, State


async def actor(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """The first answer, or a refinement that sees the previous answer and its critique (and the
    arithmetic checker's notes on it that the critic saw, ``options.checker``)."""
    ctx = runtime.context
    round_ = len(state["answers"])
    if round_ == 0:
        messages = prompts.actor_messages(ctx.task.question)
    else:
        previous, critique = state["answers"][-1], state["critiques"][-1]
        messages = prompts.refine_messages(ctx.task.question, previous["text"], critique["text"], critique["notes"])
    turn = await ctx.generate("actor", messages, round=round_, parse=extract_answer)
    return {"answers": [Answer(turn_id=turn.id, round=round_, text=turn.text, value=turn.parsed)]}


async def judge(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """Score the latest answer against the ground truth: reward ``correct`` (1/0, 0 when the
    answer could not be parsed) on the actor's turn. Skipped when the task has no truth."""
    ctx = runtime.context
    answer = state["answers"][-1]
    ctx.stage = f"judge round {answer['round']}"
    truth = ctx.task.answer
    if truth is None:
        return {"correct": [None]}
    # in a worker thread: a slow symbolic comparison must not stall the other episodes
    correct = await asyncio.to_thread(is_correct, answer["value"], truth)
    ctx.reward(
        "actor", "correct", float(correct), turn_id=answer["turn_id"], round=answer["round"], answer=answer["value"]
    )
    return {"correct": [correct]}


async def critic(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """Review the latest answer (with the arithmetic checker's notes on it, ``options.checker``):
    a free critique whose last line, "Verdict: correct|incorrect", is chosen by constrained
    decoding (prompts.VERDICT_LINE), all one turn. Reward
    ``verdict_correct`` (1/0, 0 without a verdict) on the critic's turn when the truth is known.

    A backend that cannot constrain (a plain OpenAI-compatible API) leaves the critique as
    written; its verdict is then parsed from the text and may be missing."""
    ctx = runtime.context
    answer, truth = state["answers"][-1], state["correct"][-1]
    notes = checker_notes(answer["text"]) if ctx.options.checker else None
    messages = prompts.critic_messages(ctx.task.question, answer["text"], notes)
    turn = await ctx.generate(
        "critic", messages, round=answer["round"], parse=_verdict_label, final=prompts.VERDICT_LINE
    )
    constrained = turn.result.chosen is not None
    verdict = None if turn.parsed is None else turn.parsed == "correct"
    verdict_correct = None if truth is None else verdict == truth
    if verdict_correct is not None:
        ctx.reward(
            "critic",
            "verdict_correct",
            float(verdict_correct),
            turn_id=turn.id,
            round=answer["round"],
            verdict=turn.parsed,
            truth=truth,
            constrained=constrained,
        )
    critique = Critique(
        turn_id=turn.id,
        round=answer["round"],
        text=turn.text,
        verdict=verdict,
        verdict_correct=verdict_correct,
        constrained=constrained,
        notes=notes,
    )
    return {"critiques": [critique]}


def after_judge(state: State, runtime: Runtime[EpisodeContext]) -> Literal["critic", "__end__"]:
    """The critic reviews the answer unless it is right and the game stops when right."""
    return END if runtime.context.options.stop_when_right and state["correct"][-1] is True else "critic"


def after_critic(state: State, runtime: Runtime[EpisodeContext]) -> Literal["actor", "__end__"]:
    """Refine unless the critic approved (with stop_on_correct) or the actor used its turns."""
    options = runtime.context.options
    if options.stop_on_correct and state["critiques"][-1]["verdict"] is True:
        return END
    return END if len(state["answers"]) >= options.turns else "actor"


def _verdict_label(text: str) -> str | None:
    verdict = parse_verdict(text)
    return None if verdict is None else ("correct" if verdict else "incorrect")
