"""code-debug as a game: seats, options, tasks, bots, outcome, rewards, credit, metrics and the gate."""

from __future__ import annotations

from typing import Any

from graphs.code_debug import judge as rules
from graphs.code_debug.bots import BOTS
from graphs.code_debug.credit import BUG_VALID, FIXER_CREDIT, TESTS_PASSED
from graphs.code_debug.metrics import code_debug_metrics
from graphs.code_debug.options import CodeDebugOptions
from graphs.code_debug.prompts import fixer_messages
from graphs.code_debug.tasks import CODE_TASKS
from graphs.contract import EpisodeOutcome, GameSpec, GateMetric, Practice
from graphs.credit import CORRECT
from graphs.policies.base import Message
from graphs.seats import RULES, Seat, SeatKind
from graphs.tasks.base import Task

SEATS = (
    Seat("fixer", SeatKind.LEARNER, "Fixes the buggy function from its failing tests; answers with a code block."),
    Seat("breaker", SeatKind.CONTEXT, "With --bugs breaker: writes a bug into the correct reference (scripted:mutator "
         "or a model).", "scripted:mutator"),
    Seat("judge", SeatKind.JUDGE, "Runs the task's tests on each fix in the sandbox; with a model, the model also "
         "scores the last fix's code quality.", RULES),
)


def initial_state(task: Task, options: CodeDebugOptions) -> dict[str, Any]:
    rules.sandbox_for(options)  # a machine that cannot confine code fails here, saying what is missing
    return {"bug": None, "fixes": [], "verdicts": [], "quality": None}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: the last fix passes every test (1/0)."""
    verdicts, bug = state["verdicts"], state["bug"]
    summary = {
        "bug_source": bug["source"],
        "attempts": len(verdicts),
        "statuses": [v["status"] for v in verdicts],
        "first_passed": f"{verdicts[0]['passed']}/{verdicts[0]['total']}",
        "final_passed": f"{verdicts[-1]['passed']}/{verdicts[-1]['total']}",
        "violation": next((v["violation"] for v in verdicts if v["violation"]), None),
        "cause": verdicts[-1]["cause"],
        "quality": state["quality"],
    }
    return EpisodeOutcome(reward=float(verdicts[-1]["status"] == "passed"), summary=summary)


def first_prompt(task: Task) -> list[Message]:
    """The fixer's first prompt on the task's own bug (its tests run once, in the strict sandbox)."""
    buggy = task.meta.get("buggy")
    if not buggy:
        raise ValueError(f"task {task.id!r} ships no buggy code, so it has no first prompt for the fixer")
    report = rules.sandbox_for(CodeDebugOptions()).run(buggy, task.meta["tests"], task.answer).failures()
    return fixer_messages(task.question, buggy, report)


def seats_in_play(options: CodeDebugOptions) -> tuple[str, ...]:
    return ("fixer", "breaker", "judge") if options.bugs == "breaker" else ("fixer", "judge")


GAME = GameSpec(
    name="code-debug",
    description="A fixer repairs a buggy Python function from its failing tests; judged by running the tests in "
                "a sandbox.",
    seats=SEATS,
    graph="graphs.code_debug.graph",
    initial_state=initial_state,
    outcome=outcome,
    options=CodeDebugOptions,
    rewards={
        CORRECT: "fixer: its fix passes every test within the sandbox's limits (1/0)",
        TESTS_PASSED: "fixer: the share of tests its fix passes (0 when it breaks a sandbox limit)",
        BUG_VALID: "breaker: its code is a bug, i.e. compiles, runs within the limits and fails a test (1/0)",
    },
    credit={"fixer": FIXER_CREDIT},
    metrics=code_debug_metrics,
    gate_metrics={"fixer": GateMetric("tests_pass_rate")},
    first_prompt=first_prompt,
    report_metrics=("tests_pass_rate", "tests_passed_fraction", "violation_rate", "syntax_error_rate",
                    "no_code_rate"),
    practice=Practice("fixer", {"attempts": 1}),
    tasks=CODE_TASKS,
    seats_in_play=seats_in_play,
    bots=BOTS,
)
