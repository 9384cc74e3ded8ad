"""The steps of an ensemble episode: every agent answers under its variant (concurrently, so
a batching backend serves them together), then the team answer is decided: the majority vote,
or the judge model's pick when the judge seat has a policy and the agents disagree."""

from __future__ import annotations

import asyncio

from langgraph.runtime import Runtime

from graphs.context import EpisodeContext
from graphs.credit import CORRECT
from graphs.ensemble import prompts
from graphs.ensemble.options import EnsembleOptions
from graphs.ensemble.state import PICK_CORRECT, Answer, State, Team
from graphs.judges.answers import extract_answer
from graphs.judges.ground_truth import is_correct
from graphs.judges.majority import majority_index


async def answer(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """Each agent answers the question under its variant; reward ``correct`` (1/0, 0 when
    unparsed) on each turn when the truth is known, with the variant in the reward's info."""
    ctx = runtime.context
    options: EnsembleOptions = ctx.options  # type: ignore[assignment]
    variants = options.agent_variants()
    turns = await asyncio.gather(*(
        ctx.generate("solver", prompts.agent_messages(ctx.task.question, variant), round=0, parse=extract_answer)
        for variant in variants
    ))
    ctx.stage = "check answers"
    truth = ctx.task.answer
    checks: list[bool | None] = [None] * len(turns)
    if truth is not None:
        checks = list(await asyncio.gather(*(asyncio.to_thread(is_correct, t.parsed, truth) for t in turns)))
    answers = []
    for agent, (variant, turn, correct) in enumerate(zip(variants, turns, checks, strict=True)):
        if correct is not None:
            ctx.reward("solver", CORRECT, float(correct), turn_id=turn.id, variant=variant, agent=agent,
                       answer=turn.parsed)
        answers.append(Answer(agent=agent, variant=variant, turn_id=turn.id, text=turn.text, value=turn.parsed,
                              correct=correct))
    return {"answers": answers}


async def decide(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """The team answer. A judge model sees each distinct answer with the first solution that
    reached it and picks one by number (constrained decoding of its last line where the backend
    can); reward ``pick_correct`` on its turn when the truth is known. Without a judge model,
    with fewer than two distinct answers, or when the judge names none, the vote decides."""
    ctx = runtime.context
    ctx.stage = "decide"
    answers = state["answers"]
    vote = majority_index([a["value"] for a in answers])
    team_answer = None if vote is None else answers[vote]["value"]
    decided_by, judge_turn_id = "vote", None
    candidates = list(_first_of_each(answers).values())
    if "judge" in ctx.policies and len(candidates) > 1:
        messages = prompts.judge_messages(ctx.task.question, [(a["value"], a["text"]) for a in candidates])
        turn = await ctx.generate("judge", messages, round=0, final=prompts.pick_line(len(candidates)),
                                  parse=lambda text: _picked(text, candidates))
        judge_turn_id = turn.id
        if turn.parsed is not None:
            team_answer, decided_by = turn.parsed, "judge"
        if ctx.task.answer is not None:
            ctx.reward("judge", PICK_CORRECT, float(turn.parsed is not None and _correct(answers, turn.parsed)),
                       turn_id=turn.id, pick=turn.parsed)
    correct = None if ctx.task.answer is None else team_answer is not None and _correct(answers, team_answer)
    return {"team": Team(answer=team_answer, decided_by=decided_by, correct=correct, judge_turn_id=judge_turn_id)}


def _first_of_each(answers: list[Answer]) -> dict[str, Answer]:
    """Each distinct parsed answer -> the first agent's answer that gave it, in agent order."""
    first: dict[str, Answer] = {}
    for given in answers:
        if given["value"] is not None:
            first.setdefault(given["value"], given)
    return first


def _picked(text: str, candidates: list[Answer]) -> str | None:
    index = prompts.parse_pick(text, len(candidates))
    return None if index is None else candidates[index]["value"]


def _correct(answers: list[Answer], value: str) -> bool:
    """Whether the agents' answer ``value`` was judged correct (as the vote's metric reads it)."""
    return bool(next(a["correct"] for a in answers if a["value"] == value))
