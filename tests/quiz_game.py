"""quiz: a one-seat game written only against the game contract (graphs/contract.py), for
tests/test_game_contract.py. Nothing in sparring names it: it joins the registry through
SPARRING_GAMES=quiz_game, as a user's own game would.

A solver answers a question with 'Answer: <number>'; a rule judge checks it against the
truth and, while the solver has attempts left, tells it the answer was wrong. Its options,
reward, credit rule, metrics, gate metric and first prompt are all its own.
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from sqlalchemy import Engine, select

from graphs.context import EpisodeContext
from graphs.contract import EpisodeOutcome, GameSpec, GateMetric
from graphs.credit import CORRECT, CreditRule, CreditTurn
from graphs.judges.answers import extract_answer
from graphs.judges.ground_truth import is_correct
from graphs.metrics.run_metrics import RunMetrics, per_task_means, task_means
from graphs.options import GameOptions
from graphs.policies.base import Message
from graphs.seats import Seat, SeatKind
from graphs.tasks import MATH_TASKS
from graphs.tasks.base import Task, TaskSource
from storage.models import Base
from storage.queries import in_run

INSTRUCTION = "Reply with 'Answer: <number>'."
RETRY = "That is wrong. Try again."
RETRY_COST = 0.25
"""credit lost per earlier attempt (the quiz's own credit rule)"""


@dataclass(frozen=True)
class QuizOptions(GameOptions):
    attempts: int = 1
    """answers the solver may give (it is told when one is wrong)"""

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")


class State(TypedDict):
    answers: Annotated[list[bool], operator.add]
    """whether each answer was right, in order"""
    texts: Annotated[list[str], operator.add]


def first_prompt(task: Task) -> list[Message]:
    return [{"role": "user", "content": f"{task.question}\n{INSTRUCTION}"}]


async def solver(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    ctx = runtime.context
    messages = first_prompt(ctx.task) + [m for text in state["texts"] for m in (
        {"role": "assistant", "content": text}, {"role": "user", "content": RETRY})]
    turn = await ctx.generate("solver", messages, round=len(state["answers"]), parse=extract_answer)
    right = is_correct(turn.parsed, ctx.task.answer)
    ctx.reward("solver", CORRECT, float(right), turn_id=turn.id, answer=turn.parsed)
    return {"answers": [right], "texts": [turn.text]}


def after_solver(state: State, runtime: Runtime[EpisodeContext]) -> Literal["solver", "__end__"]:
    options: QuizOptions = runtime.context.options  # type: ignore[assignment]
    return END if state["answers"][-1] or len(state["answers"]) >= options.attempts else "solver"


def build() -> Any:
    graph = StateGraph(State, context_schema=EpisodeContext)
    graph.add_node("solver", solver)
    graph.add_edge(START, "solver")
    graph.add_conditional_edges("solver", after_solver)
    return graph.compile()


def initial_state(task: Task, options: QuizOptions) -> dict[str, Any]:
    return {"answers": [], "texts": []}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    return EpisodeOutcome(float(state["answers"][-1]), {"attempts": len(state["answers"])})


def solver_credits(turns: list[CreditTurn], role: str) -> dict[str, float]:
    """``correct`` minus RETRY_COST per earlier attempt of the solver."""
    own = [t for t in turns if t.seat == role]
    return {t.turn_id: t.rewards[CORRECT] - RETRY_COST * i for i, t in enumerate(own)
            if t.selected and CORRECT in t.rewards}


def quiz_metrics(engine: Engine, run_id: str) -> RunMetrics:
    """quiz_first_try and quiz_solved: per task, the share of episodes right at once / at last."""
    episodes, turns, rewards = (Base.metadata.tables[n] for n in ("episodes", "turns", "rewards"))
    query = (
        select(episodes.c.id, episodes.c.task_id, rewards.c.value)
        .join(turns, turns.c.episode_id == episodes.c.id)
        .join(rewards, (rewards.c.turn_id == turns.c.id) & (rewards.c.name == CORRECT))
        .where(in_run(run_id), episodes.c.status == "succeeded")
        .order_by(episodes.c.id, turns.c.idx)
    )
    answers: dict[str, tuple[str, list[float]]] = {}
    with engine.connect() as conn:
        for episode_id, task_id, value in conn.execute(query):
            answers.setdefault(episode_id, (task_id, []))[1].append(value)
    return task_means({
        "quiz_first_try": per_task_means((task, values[0]) for task, values in answers.values()),
        "quiz_solved": per_task_means((task, values[-1]) for task, values in answers.values()),
    })


def quiz_tasks(spec: str, *, n: int | None, seed: int, split: str | None = None) -> list[Task]:
    """The quiz's own task source: 'quiz' makes sums a + b with a, b < 10 (train: a even,
    heldout: a odd), shuffled by seed; any other spec is a math task source."""
    if spec != "quiz":
        return MATH_TASKS.load(spec, n=n, seed=seed, split=split)
    split = split or "train"
    pairs = [(a, b) for a in range(10) for b in range(10) if a % 2 == (split != "train")]
    random.Random(seed).shuffle(pairs)
    return [Task(f"quiz-{split}-{a}-{b}", f"What is {a} + {b}?", str(a + b), "quiz", split) for a, b in pairs[:n]]


GAME = GameSpec(
    name="quiz",
    description="A solver answers a question, with more attempts when told it was wrong.",
    seats=(Seat("solver", SeatKind.LEARNER, "Answers the question."),),
    graph=__name__,
    initial_state=initial_state,
    outcome=outcome,
    options=QuizOptions,
    rewards={CORRECT: "solver: its answer matches the truth (1/0)"},
    credit={"solver": CreditRule(solver_credits)},
    metrics=quiz_metrics,
    gate_metrics={"solver": GateMetric("quiz_first_try")},
    first_prompt=first_prompt,
    tasks=TaskSource(default="quiz", accepted="'quiz', or a math task source", load=quiz_tasks,
                     default_split=lambda spec: "train" if spec == "quiz" else MATH_TASKS.default_split(spec)),
)
