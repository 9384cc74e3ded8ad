"""The game contract: what a game package exports as ``GAME``, and everything sparring reads
from it.

A game is one package under ``graphs/`` (state, prompts, nodes, graph, options, metrics)
whose ``GAME`` is a ``GameSpec``; registering it is one line in ``graphs/registry.py``. Players,
dataset builders, evaluation, the deploy gate, GRPO, workers and the CLI read the game's
knowledge from here, never from a list of game names of their own.

A spec stays light to import (the CLI reads every game's options at start): its graph is
named by module and imported only when the game is played.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphs.credit import DEFAULT_CREDIT, CreditRule
from graphs.judges.reward_verifier import JudgePromptReader
from graphs.options import GameOptions, make_options, option_fields
from graphs.policies.base import Message
from graphs.seats import Seat, SeatKind
from graphs.tasks.base import Task, TaskSource

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from graphs.metrics.run_metrics import RunMetrics
    from graphs.policies.scripted import Bot


class GameContractError(ValueError):
    """A game spec that breaks the contract, or a role it has no use for."""


@dataclass(frozen=True)
class EpisodeOutcome:
    reward: float | None
    """headline reward of the episode (None when the task has no ground truth)"""
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GateMetric:
    """What a learner seat's candidate adapter is judged on by the deploy gate."""

    name: str
    """a metric of the game's ``metrics`` (higher is better)"""
    needs: str = "no episode gave one"
    """why the metric can have no figure, said when the gate cannot compare"""


@dataclass(frozen=True)
class Practice:
    """How one learner seat practises alone: a cheap way to collect many of its own attempts.

    The retrain loop plays practice episodes with the game's options overridden by ``options``
    and every seat named in ``stand_ins`` filled by that scripted bot (no model call; builders
    never train on scripted turns), so the whole model budget goes to the practising seat.
    """

    seat: str
    options: Mapping[str, Any] = field(default_factory=dict)
    stand_ins: Mapping[str, str] = field(default_factory=dict)
    """seat -> the scripted bot that plays it, by name (``graphs.registry.known_bots``)"""
    tasks: Callable[[str], str] | None = None
    """(the round's task spec) -> the spec practice draws its problems from, where the learner
    has right answers to learn from; None: the round's own"""

    def task_spec(self, round_tasks: str) -> str:
        """The task spec practice draws from in a round on ``round_tasks``."""
        return self.tasks(round_tasks) if self.tasks is not None else round_tasks


@dataclass(frozen=True)
class TruthVerdicts:
    """How a judge-like learner seat learns its verdicts from the ground truth rather than from
    its own right guesses: each checked answer of ``answer_seat`` (a turn with a ``correct``
    reward, solo practice included) becomes a ``judge_seat`` prompt reviewing it, answered with
    the verdict its truth calls for (``sparring datasets build sft --role SEAT --verdicts truth``)."""

    judge_seat: str
    answer_seat: str
    review: Callable[[Sequence[Message], str], list[Message] | None]
    """(an answer turn's logged prompt messages, its response) -> the judge seat's prompt that
    reviews that answer; None for a prompt the game does not recognise (logged under other prompts)"""
    verdicts: Mapping[bool, str]
    """whether the answer is correct -> the judge seat's response that says so"""

    def __post_init__(self) -> None:
        if set(self.verdicts) != {True, False} or not all(v.strip() for v in self.verdicts.values()):
            raise GameContractError(f"truth verdicts need a non-blank response for True and for False (correct and "
                                    f"incorrect answers); got {dict(self.verdicts)!r}")


@dataclass(frozen=True)
class Refinements:
    """How a learner seat learns its refinement turn from its checked first answers
    (``sparring datasets build sft --role SEAT --refinements``): for a task it answered both
    right and wrong, the prompt of the turn that follows a rejection of the wrong answer,
    answered with a right answer (a fix), and of the turn that follows a rejection of a right
    answer, answered with a right answer (a keep). A refinement turn that was never trained
    breaks right answers it is told are wrong and fixes almost no wrong ones.

    With ``corrected``, every wrong first answer the game can correct adds a row too: the prompt
    that follows its rejection, answered with the corrected answer (a repair). Unlike a fix, whose
    answer is another attempt, a repair differs from the rejected answer only where the rejection
    said it was wrong, which is what a small model can learn to do with a critique."""

    seat: str
    refine: Callable[[Sequence[Message], str], list[Message] | None]
    """(a first answer's logged prompt messages, its response) -> the seat's prompt after that
    answer was rejected; None for any other prompt (a refinement's own, other wording)"""
    corrected: Callable[[str, str], str | None] | None = None
    """(a wrong first answer, the ground truth) -> that answer corrected where the rejection prompt
    says it is wrong, when the correction is right; None otherwise"""
    answer_line: Callable[[str, str], str] | None = None
    """(a right answer of the seat, the ground truth) -> that answer ending with the final line the
    seat's prompt asks for (``SFTOptions.answer_lines``)"""


def question_prompt(task: Task) -> list[Message]:
    """The default first prompt: the bare question."""
    return [{"role": "user", "content": task.question}]


@dataclass(frozen=True)
class GameSpec:
    name: str
    description: str
    seats: tuple[Seat, ...]
    graph: str
    """the module whose ``build()`` returns the compiled graph (context_schema=EpisodeContext)"""
    initial_state: Callable[[Task, Any], dict[str, Any]]
    """(task, the game's options) -> the graph's input state"""
    outcome: Callable[[dict[str, Any]], EpisodeOutcome]
    """reads the final state and returns the episode's headline reward and summary"""
    metrics: Callable[[Engine, str], RunMetrics]
    """(engine, run id) -> the run's metrics, computed from the store"""
    gate_metrics: Mapping[str, GateMetric]
    """learner seat -> the metric its candidates are gated on (every learner seat has one)"""
    rewards: Mapping[str, str]
    """reward event name -> what it means (the names the game logs)"""
    tasks: TaskSource
    """where the game's tasks come from (`--tasks` specs it accepts, its default, its loader;
    ``graphs.tasks.MATH_TASKS`` for math problems)"""
    options: type[GameOptions] = GameOptions
    """the game's options dataclass (its fields are CLI options)"""
    credit: Mapping[str, CreditRule] = field(default_factory=dict)
    """seat -> its credit rule, for seats whose credit is not the sum of their turn's rewards"""
    first_prompt: Callable[[Task], list[Message]] = question_prompt
    """the prompt that stands for a task in online training (GRPO's dataset)"""
    report_metrics: tuple[str, ...] = ()
    """the metrics `sparring retrain` reports before and after its rounds (empty: all of them)"""
    practice: Practice | None = None
    """how a learner seat practises alone in `sparring retrain` (None: the game has no solo practice)"""
    balanced_seats: frozenset[str] = frozenset()
    """learner seats whose SFT rows are balanced across their parsed labels (judge-like seats)"""
    seats_in_play: Callable[[Any], Collection[str]] | None = None
    """(the game's options) -> the seats that play under them, for a game whose options say how
    many seats play (discussion's --agents); the others need no policy and are not recorded on
    its episodes. None: every seat plays."""
    truth_verdicts: TruthVerdicts | None = None
    """how a judge-like learner seat can learn its verdicts from the ground truth (None: it cannot)"""
    refinements: Refinements | None = None
    """how a learner seat's refinement turn can learn from its first answers (None: it cannot)"""
    bots: Mapping[str, Bot] = field(default_factory=dict)
    """scripted bots the game contributes for its context seats (name -> bot), reachable as
    ``--seat SEAT=scripted:NAME`` and as practice stand-ins (``graphs.registry.known_bots``)"""
    judge_prompt: JudgePromptReader | None = None
    """how a trained verifier in the judge seat reads the game's judge prompt back into the
    question and its candidate answers (``verifier:NAME`` seats); None: the judge picks no
    answer among several, and a verifier cannot fill it"""
    revision: int = 1
    """raised when a change to the game's prompts or rules changes what the same policies play, so
    that evaluations stored under an earlier revision are played again, not reused (revision 1 adds
    nothing to an evaluation's key)"""

    def __post_init__(self) -> None:
        names = [s.name for s in self.seats]
        learners = {s.name for s in self.seats if s.kind == SeatKind.LEARNER}
        problems = [f"seat {n!r} appears twice" for n in sorted({n for n in names if names.count(n) > 1})]
        problems += [f"learner seat {n!r} has no gate metric" for n in sorted(learners - set(self.gate_metrics))]
        problems += [f"gate metric for {n!r}, which is not a learner seat" for n in self.gate_metrics
                     if n not in learners]
        problems += [f"credit rule for {n!r}, which is not a seat" for n in self.credit if n not in names]
        if self.practice is not None:
            if self.practice.seat not in learners:
                problems.append(f"practice seat {self.practice.seat!r} is not a learner seat")
            problems += [f"practice stand-in for {n!r}, which is not a seat" for n in self.practice.stand_ins
                         if n not in names]
        problems += [f"balanced seat {n!r} is not a learner seat" for n in self.balanced_seats if n not in learners]
        if self.truth_verdicts is not None:
            truth = self.truth_verdicts
            if truth.judge_seat not in learners:
                problems.append(f"truth verdicts' judge seat {truth.judge_seat!r} is not a learner seat")
            if truth.answer_seat not in names or truth.answer_seat == truth.judge_seat:
                problems.append(f"truth verdicts' answer seat {truth.answer_seat!r} is not another seat")
        if self.revision < 1:
            problems.append(f"revision {self.revision} is below 1")
        if self.refinements is not None and self.refinements.seat not in learners:
            problems.append(f"refinements' seat {self.refinements.seat!r} is not a learner seat")
        try:
            option_fields(self.options)
        except TypeError as exc:
            problems.append(str(exc))
        else:
            if self.seats_in_play is not None:
                problems += [f"seats_in_play names {n!r}, which is not a seat"
                             for n in self.seats_in_play(self.options()) if n not in names]
        if problems:
            raise GameContractError(f"game {self.name!r}: {'; '.join(problems)}")

    def seat(self, name: str) -> Seat:
        for seat in self.seats:
            if seat.name == name:
                return seat
        raise KeyError(f"game {self.name!r} has no seat {name!r}; its seats: {', '.join(s.name for s in self.seats)}")

    def playing_seats(self, options: GameOptions) -> tuple[Seat, ...]:
        """The seats that play under ``options``, in the game's order."""
        if self.seats_in_play is None:
            return self.seats
        playing = set(self.seats_in_play(options))
        return tuple(seat for seat in self.seats if seat.name in playing)

    def build(self) -> Any:
        """The compiled graph (imports the game's graph module, hence LangGraph, on first use)."""
        return importlib.import_module(self.graph).build()

    def make_options(self, values: Mapping[str, Any] | None = None) -> GameOptions:
        """The game's options: its defaults with ``values`` over them (GameOptionError for an
        option it does not have)."""
        return make_options(self.name, self.options, values or {})

    def check_options(self, options: GameOptions) -> GameOptions:
        if not isinstance(options, self.options):
            raise GameContractError(f"game {self.name!r} takes {self.options.__name__}, got "
                                    f"{type(options).__name__}; make them with GAME.make_options(...)")
        return options

    def gate_metric(self, role: str) -> GateMetric:
        if role not in self.gate_metrics:
            learners = ", ".join(self.gate_metrics) or "none"
            raise GameContractError(f"game {self.name!r} has no learner seat {role!r}, so nothing to train or "
                                    f"gate; its learner seats: {learners}")
        return self.gate_metrics[role]

    def credit_rule(self, role: str) -> CreditRule:
        return self.credit.get(role, DEFAULT_CREDIT)
