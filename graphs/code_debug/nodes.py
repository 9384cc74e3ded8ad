"""The steps of code-debug: the bug (the task's, or the breaker's), the fixer, the rule judge
(the tests in the sandbox), and the judge model's quality score when the judge seat has one."""

from __future__ import annotations

import random
from typing import Literal

from langgraph.graph import END
from langgraph.runtime import Runtime

from graphs.code_debug import judge as rules
from graphs.code_debug import prompts
from graphs.code_debug.code import extract_code
from graphs.code_debug.credit import BUG_VALID, TESTS_PASSED
from graphs.code_debug.mutate import mutations, normalise
from graphs.code_debug.options import CodeDebugOptions
from graphs.code_debug.state import Bug, Fix, State
from graphs.context import EpisodeContext
from graphs.credit import CORRECT
from graphs.judging import judge_score
from graphs.sandbox import Status

MUTANTS_TRIED = 8
"""seeded mutations of the reference tried for a bug when the breaker's code is none"""


def start(state: State, runtime: Runtime[EpisodeContext]) -> Literal["breaker", "inspect"]:
    options: CodeDebugOptions = runtime.context.options  # type: ignore[assignment]
    return "breaker" if options.bugs == "breaker" else "inspect"


async def inspect(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """The task's own bug, with what its tests say of it."""
    ctx = runtime.context
    ctx.stage = "inspect the bug"
    buggy = ctx.task.meta.get("buggy")
    if not buggy:
        raise ValueError(f"task {ctx.task.id!r} ships no buggy code; play it with --bugs breaker, or add 'buggy' "
                         "to the task")
    result = await rules.run_tests(ctx.options, buggy, ctx.task.meta["tests"], ctx.task.answer)  # type: ignore[arg-type]
    if result.status == Status.PASSED:
        raise ValueError(f"task {ctx.task.id!r}: its buggy code passes all {result.total} tests, so there is "
                         "nothing to fix; correct the task's 'buggy' code or its tests")
    return {"bug": Bug(code=buggy, source="task", report=result.failures())}


async def breaker(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """The breaker writes a bug into the reference; ``bug_valid`` (1/0) says whether its code
    compiles, runs within the limits and fails a test. When it does not, the bug is the task's
    own, else a seeded mutation of the reference."""
    ctx = runtime.context
    options: CodeDebugOptions = ctx.options  # type: ignore[assignment]
    tests = ctx.task.meta["tests"]
    turn = await ctx.generate("breaker", prompts.breaker_messages(ctx.task.question, ctx.task.answer or ""),
                              round=0, parse=extract_code)
    ctx.stage = "judge the breaker's bug"
    result = None if turn.parsed is None else await rules.run_tests(options, turn.parsed, tests, ctx.task.answer)
    valid = result is not None and result.status == Status.FAILED
    ctx.reward("breaker", BUG_VALID, float(valid), turn_id=turn.id,
               status=rules.NO_CODE if result is None else str(result.status))
    if valid:
        return {"bug": Bug(code=turn.parsed or "", source="breaker", report=result.failures())}
    if ctx.task.meta.get("buggy"):
        return await inspect(state, runtime)
    return {"bug": await _mutant(ctx, options, tests)}


async def _mutant(ctx: EpisodeContext, options: CodeDebugOptions, tests: list[str]) -> Bug:
    reference = normalise(ctx.task.answer or "")
    candidates = mutations(reference)
    order = list(range(len(candidates)))
    random.Random(f"{ctx.seed}:{ctx.task.id}").shuffle(order)
    for i in order[:MUTANTS_TRIED]:
        result = await rules.run_tests(options, candidates[i].code, tests, ctx.task.answer)
        if result.status == Status.FAILED:
            return Bug(code=candidates[i].code, source="mutator", report=result.failures())
    raise ValueError(f"task {ctx.task.id!r}: no bug could be made: the breaker's code failed no test and none of "
                     f"{min(len(candidates), MUTANTS_TRIED)} mutations of the reference did; give the task a 'buggy' "
                     "code or more tests")


async def fixer(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """A fix of the bug; a later attempt sees its earlier answers and what the tests said of them."""
    ctx = runtime.context
    bug = state["bug"]
    assert bug is not None
    messages = prompts.fixer_messages(ctx.task.question, bug["code"], bug["report"])
    for fix, verdict in zip(state["fixes"], state["verdicts"], strict=True):
        messages += [{"role": "assistant", "content": fix["text"]}, prompts.retry_message(verdict["report"])]
    attempt = len(state["fixes"])
    turn = await ctx.generate("fixer", messages, round=attempt, parse=extract_code)
    return {"fixes": [Fix(turn_id=turn.id, attempt=attempt, text=turn.text, code=turn.parsed)]}


async def judge(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """Run the task's tests on the latest fix: rewards ``correct`` (1: every test passes within
    the limits) and ``tests_passed`` (the share passed; 0 after a violation) on the fixer's
    turn, and a judgment (rubric ``tests``, score the share passed, the cause as rationale)."""
    ctx = runtime.context
    fix = state["fixes"][-1]
    ctx.stage = f"judge fix {fix['attempt'] + 1}"
    tests = ctx.task.meta["tests"]
    if fix["code"] is None:
        verdict = rules.no_code(len(tests))
    else:
        result = await rules.run_tests(ctx.options, fix["code"], tests, ctx.task.answer)  # type: ignore[arg-type]
        verdict = rules.verdict(result)
    share = 0.0 if verdict["violation"] else verdict["passed"] / verdict["total"]
    info = {"status": verdict["status"], "violation": verdict["violation"], "passed": verdict["passed"],
            "total": verdict["total"], "attempt": fix["attempt"]}
    denied_in_python = sorted(rules.sandbox_for(ctx.options).deny)  # type: ignore[arg-type]
    if denied_in_python:  # degraded mode: say what only an audit hook stood in the way of
        info["degraded"] = denied_in_python
    ctx.reward("fixer", CORRECT, float(verdict["status"] == Status.PASSED), turn_id=fix["turn_id"], **info)
    ctx.reward("fixer", TESTS_PASSED, share, turn_id=fix["turn_id"], **info)
    ctx.judgment(judge_seat="judge", winner_seat=None, loser_seat=None, preferred_turn_id=None,
                 rejected_turn_id=None, rationale=verdict["cause"], judge_policy="sandbox", rubric="tests",
                 score=share, scored_seat="fixer")
    return {"verdicts": [verdict]}


def after_judge(state: State, runtime: Runtime[EpisodeContext]) -> Literal["fixer", "review", "__end__"]:
    options: CodeDebugOptions = runtime.context.options  # type: ignore[assignment]
    if state["verdicts"][-1]["status"] != Status.PASSED and len(state["fixes"]) < options.attempts:
        return "fixer"
    return "review" if "judge" in runtime.context.policies and state["fixes"][-1]["code"] else END


async def review(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """The judge model scores the last fix's code quality (logged as a judgment of the fixer)."""
    ctx = runtime.context
    ctx.stage = "judge the code's quality"
    fix, verdict = state["fixes"][-1], state["verdicts"][-1]
    material = prompts.quality_material(ctx.task.question, fix["code"] or "", verdict["cause"])
    scored = await judge_score(ctx, "judge", prompts.QUALITY, material, scored_seat="fixer", round=fix["attempt"])
    return {"quality": scored.score}
