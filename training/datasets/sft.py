"""SFT rows by rejection sampling: the best trajectories of each state.

For each state (seat and hash of the exact prompt messages) across the build, keep the
turns with the highest credit (``training.datasets.credit``), at most ``per_group`` of them
(default 1; of equal credits the earliest read), and only turns whose credit is at least
``threshold`` (default 0.5: a correct actor answer). Rows come out state by state, in the
order the states first had a kept turn, best first.

Formats (TRL conversational):

- ``prompt_completion`` (default): ``{"prompt": messages, "completion": [assistant answer]}``. TRL's
  SFTTrainer then computes the loss on the completion only. Prefer it for roles whose
  prompts hold earlier assistant messages (the math-reflection actor's refinement prompt
  holds its previous, possibly wrong, answer), which ``assistant_only_loss`` on the
  ``messages`` format would also train on.
- ``messages``: ``{"messages": prompt messages + the answer as an assistant message}``.

With ``balance``, the kept rows are balanced across the turns' parsed values (a critic's
"correct" and "incorrect" verdicts): each label keeps at most as many rows as the rarest one,
chosen by a seeded shuffle. A judge-like seat trained on the right verdicts about a weak actor
would otherwise see mostly "incorrect" and learn the base rate instead of checking.

Metadata: ``reward`` (the credit), ``episode_id``, ``turn_id``, ``task_id``, ``seat``.
Counted: ``no_reward``, ``below_threshold``, ``beyond_per_group`` (good turns of a state that
already had ``per_group`` better or earlier ones), ``balanced_out`` (rows dropped by ``balance``).

With ``refinements``, the seat's refinement turn is taught too (``GameSpec.refinements``): the
first answers checked against the ground truth (a ``correct`` reward; an unparsed one is wrong)
are grouped by task, and each task answered both right and wrong adds two rows after the own
rows: the prompt that follows a rejection of one of its wrong answers, and the prompt that
follows a rejection of one of its right answers, each answered with one of its right answers
(seeded choices; ``reward`` 1.0 and the metadata of the right answer's turn). Practice with
several samples a task (``--practice-samples 2``) makes such tasks. Counted:
``refinement_one_sided`` (tasks whose first answers were all right or all wrong).

With ``verdicts="truth"``, a judge-like seat's rows are not its own turns but reviews of another
seat's checked answers, answered with the verdict the ground truth calls for, which another
builder makes: ``training.datasets.truth_verdicts`` (``threshold``, ``per_group`` and ``balance``
select own turns and do not apply; ``max_rows`` caps those rows).

With ``first_repairs``, a wrong first answer that the game's correction (``Refinements.corrected``:
for math-reflection, its wrong written steps recomputed and carried forward) turns into the right
answer also answers its own first prompt, when no turn of that state was right: the seat learns
to compute what it set up, on problems it got wrong, in its own words. Counted:
``first_repair_unavailable`` (wrong first answers with no such correction) and
``first_repair_state_answered`` (states that had a right answer of their own).

With ``answer_lines``, each row of the refining seat whose answer is right (its own, a fix, a
keep, a repair, a first repair) ends with the final line the seat's prompt asks for
(``Refinements.answer_line``: for math-reflection, "Answer: <the ground truth>" added to an answer
whose last line is not one). Counted: ``answer_line_added`` (answers given the line, those of own
turns a later better turn of their state displaced included).
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Literal, NamedTuple

from datasets import Features

from graphs.contract import GameContractError, Refinements
from graphs.policies.base import Message
from storage.models import DatasetKind
from training.datasets.building import BuildContext, Builder, Row
from training.datasets.credit import CORRECT, turn_credits
from training.datasets.external import registered_game
from training.datasets.formats import FLOAT, MESSAGES, TURN_METADATA, assistant, chat
from training.datasets.reading import EpisodeLog, LogFilter, LoggedTurn, ReadPlan

SFTFormat = Literal["messages", "prompt_completion"]
SFT_FORMATS: tuple[SFTFormat, ...] = ("messages", "prompt_completion")
Verdicts = Literal["own", "truth"]
VERDICT_SOURCES: tuple[Verdicts, ...] = ("own", "truth")
_OWN_TURNS = ("threshold", "per_group", "balance", "refinements", "first_repairs", "answer_lines")
"""the options that select the role's own turns"""


@dataclass(frozen=True)
class SFTOptions:
    threshold: float = 0.5
    """the least credit a kept turn has"""
    per_group: int = 1
    """the most turns kept per state"""
    format: SFTFormat = "prompt_completion"
    balance: bool = False
    """keep equally many rows of each parsed value of the turns (see the module docstring)"""
    verdicts: Verdicts = "own"
    """own: the role's own best turns; truth: for a judge-like seat, reviews of another seat's
    checked answers with the verdict the ground truth calls for (``truth_verdicts``)"""
    max_rows: int | None = None
    """verdicts truth: the most rows, a seeded choice that keeps them balanced (None: all)"""
    refinements: bool = False
    """own rows: also teach the seat's refinement turn from its first answers (module docstring)"""
    first_repairs: bool = False
    """own rows: also answer the first prompt of each wrong first answer the game corrects to the
    right one with that correction, where the state has no right answer of its own (module docstring)"""
    answer_lines: bool = False
    """own rows: every right answer of the refining seat ends with the final line its prompt asks for
    (``Refinements.answer_line``; module docstring)"""

    def __post_init__(self) -> None:
        if self.per_group < 1:
            raise ValueError(f"per_group must be >= 1 (turns kept per state), got {self.per_group}")
        if self.format not in SFT_FORMATS:
            raise ValueError(f"format must be one of {', '.join(SFT_FORMATS)}; got {self.format!r}")
        if self.verdicts not in VERDICT_SOURCES:
            raise ValueError(f"verdicts must be one of {', '.join(VERDICT_SOURCES)}; got {self.verdicts!r}")
        if self.verdicts == "truth":
            own = [f.name for f in fields(self) if f.name in _OWN_TURNS and getattr(self, f.name) != f.default]
            if own:
                raise ValueError(f"{', '.join(own)}: options that select the role's own turns, which truth verdicts "
                                 "are not (they are balanced between correct and incorrect answers already): leave "
                                 "them unset, or build verdicts 'own'")
            if self.max_rows is not None and self.max_rows < 2:
                raise ValueError(f"max_rows must be >= 2 (a correct and an incorrect answer), got {self.max_rows}")
        elif self.max_rows is not None:
            raise ValueError("max_rows caps truth-verdict rows only: set verdicts='truth', or leave max_rows unset")


class _FirstAnswer(NamedTuple):
    """A checked first answer of the refining seat (``SFTOptions.refinements``)."""

    right: bool
    turn: LoggedTurn
    episode_id: str
    rejected_prompt: list[Message]
    """the seat's prompt after this answer was rejected (``Refinements.refine``)"""
    truth: str | None
    """its task's ground truth, when the build reads it"""


def refinements_of(game: str, role: str, *, answer_line: bool = False) -> Refinements:
    """The game's refinements for ``role``; GameContractError, saying what to do instead, when the
    game has none, they are another seat's, or (``answer_line``) they declare no answer line."""
    spec = registered_game(game)
    refinements = spec.refinements if spec is not None else None
    if refinements is None:
        raise GameContractError(f"game {game!r} declares no refinements (GameSpec.refinements): no seat of it "
                                "learns a refinement turn from its first answers; build without refinements")
    if role != refinements.seat:
        raise GameContractError(f"refinements of {game!r} train its seat {refinements.seat!r}, not {role!r}: build "
                                f"them with role {refinements.seat!r}, or build {role!r}'s rows without refinements")
    if answer_line and refinements.answer_line is None:
        raise GameContractError(f"game {game!r} declares no answer line (Refinements.answer_line): build without "
                                "answer_lines")
    return refinements


class RejectionSampling(Builder[SFTOptions]):
    """The SFT builder of the role's own turns (``verdicts="own"``); truth verdicts are
    ``TruthVerdictRows``' (``snapshots.builder_type`` chooses)."""

    kind = DatasetKind.SFT
    options_type = SFTOptions

    def __init__(self, context: BuildContext, options: SFTOptions) -> None:
        super().__init__(context, options)
        if options.verdicts != "own":
            raise ValueError(f"RejectionSampling builds the role's own turns, not verdicts {options.verdicts!r}: "
                             "truth verdicts are TruthVerdictRows' rows (snapshots.builder_type chooses by options)")
        wanted = options.refinements or options.first_repairs or options.answer_lines
        self._refine = (refinements_of(context.game, context.role, answer_line=options.answer_lines)
                        if wanted else None)
        self._first_answers: dict[str, list[_FirstAnswer]] = {}
        """task -> its checked first answers, with ``refinements``"""
        self._corrected = self._refine.corrected if self._refine else None
        """the game's correction of a wrong first answer (``Refinements.corrected``)"""
        self._repairs: dict[str, Row] = {}
        """prompt key -> the repair row of a wrong first answer (``Refinements.corrected``)"""
        self._first_repairs: dict[tuple[str, str], Row] = {}
        """state -> a wrong first answer's correction as the answer to its own prompt (``first_repairs``)"""
        self._answer_line = self._refine.answer_line if self._refine and options.answer_lines else None
        self._best: dict[tuple[str, str], list[tuple[float, int, str, str | None]]] = {}
        """state -> min-heap of (credit, -read order, row as JSON, parsed value): the worst kept turn on top;
        JSON text keeps the rows of the many one-sample states compact until ``finish``"""
        self._read = 0

    @staticmethod
    def features(options: SFTOptions) -> Features:
        text = {"messages": MESSAGES} if options.format == "messages" else {"prompt": MESSAGES, "completion": MESSAGES}
        return Features({**text, "reward": FLOAT, **TURN_METADATA})

    def read_plan(self, log_filter: LogFilter, since: datetime | None) -> ReadPlan:
        plan = super().read_plan(log_filter, since)
        return replace(plan, truths=True) if self._corrected or self._answer_line else plan

    def add(self, episode: EpisodeLog) -> Iterable[Row]:
        credits = turn_credits(episode, self.context.role)
        for turn in self.role_turns(episode):
            rejected = self._refine.refine(turn.prompt, turn.text) if self._refine and CORRECT in turn.rewards else None
            if rejected is not None:
                answer = _FirstAnswer(turn.rewards[CORRECT] >= 0.5, turn, episode.episode_id, rejected, episode.truth)
                if self.options.refinements:
                    self._first_answers.setdefault(episode.task_id, []).append(answer)
                if not answer.right and self._corrected:
                    self._repair(answer, episode, self._corrected)
            reward = credits.get(turn.turn_id)
            if reward is None:
                self.skipped["no_reward"] += 1
                continue
            if reward < self.options.threshold:
                self.skipped["below_threshold"] += 1
                continue
            right = turn.rewards.get(CORRECT, 0.0) >= 0.5
            row = self._row(turn.prompt, turn, reward, episode.episode_id, episode.task_id,
                            truth=episode.truth if right else None)
            self._read += 1
            kept = self._best.setdefault((turn.seat, turn.prompt_key), [])
            heapq.heappush(kept, (reward, -self._read, json.dumps(row, ensure_ascii=False), turn.parsed_value))
            if len(kept) > self.options.per_group:
                heapq.heappop(kept)
                self.skipped["beyond_per_group"] += 1
        return ()

    def finish(self) -> Iterator[Row]:
        ordered = [(row, label) for kept in self._best.values() for _, _, row, label in sorted(kept, reverse=True)]
        if self.options.balance:
            ordered = self._balanced(ordered)
        for row, _ in ordered:
            yield json.loads(row)
        for state, row in self._first_repairs.items():
            if state in self._best:
                self.skipped["first_repair_state_answered"] += 1
            else:
                yield row
        yield from self._refinement_rows()
        yield from self._repairs.values()

    def _repair(self, answer: _FirstAnswer, episode: EpisodeLog, corrected: Callable[[str, str], str | None]) -> None:
        """The rows a wrong first answer's correction makes: a repair of the refinement turn
        (``refinements``), the first turn's own answer (``first_repairs``)."""
        fixed = corrected(answer.turn.text, episode.truth) if episode.truth is not None else None
        if self.options.refinements:
            if fixed is None:
                self.skipped["repair_unavailable"] += 1
            else:
                key = json.dumps(answer.rejected_prompt, ensure_ascii=False)
                self._repairs.setdefault(key, self._row(answer.rejected_prompt, answer.turn, 1.0, answer.episode_id,
                                                        episode.task_id, completion=fixed, truth=answer.truth))
        if self.options.first_repairs:
            if fixed is None:
                self.skipped["first_repair_unavailable"] += 1
            else:
                state = (answer.turn.seat, answer.turn.prompt_key)
                self._first_repairs.setdefault(state, self._row(answer.turn.prompt, answer.turn, 1.0,
                                                                answer.episode_id, episode.task_id, completion=fixed,
                                                                truth=answer.truth))

    def _refinement_rows(self) -> Iterator[Row]:
        rng = random.Random(self.context.seed)
        for task_id, answers in self._first_answers.items():
            right = [answer for answer in answers if answer.right]
            wrong = [answer for answer in answers if not answer.right]
            if not right or not wrong:
                self.skipped["refinement_one_sided"] += 1
                continue
            for rejected in (rng.choice(wrong), rng.choice(right)):  # a fix, then a keep
                kept = rng.choice(right)
                yield self._row(rejected.rejected_prompt, kept.turn, 1.0, kept.episode_id, task_id, truth=kept.truth)

    def _row(self, prompt: Sequence[Message], turn: LoggedTurn, reward: float, episode_id: str, task_id: str,
             *, completion: str | None = None, truth: str | None = None) -> Row:
        """``prompt`` answered with ``turn``'s response (or ``completion``), in the build's format, with the
        turn's metadata; an answer known right, given with its ``truth``, ends with its answer line
        (``answer_lines``)."""
        text = turn.text if completion is None else completion
        if self._answer_line and truth is not None:
            lined = self._answer_line(text, truth)
            self.skipped["answer_line_added"] += lined != text
            text = lined
        messages, answer = chat(prompt), assistant(text)
        row_text = (
            {"messages": messages + answer}
            if self.options.format == "messages"
            else {"prompt": messages, "completion": answer}
        )
        return {**row_text, "reward": reward, "episode_id": episode_id, "turn_id": turn.turn_id, "task_id": task_id,
                "seat": turn.seat}

    def _balanced(self, ordered: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
        by_label: dict[str | None, list[int]] = {}
        for index, (_, label) in enumerate(ordered):
            by_label.setdefault(label, []).append(index)
        if len(by_label) < 2:
            return ordered
        per_label = min(len(indices) for indices in by_label.values())
        rng = random.Random(self.context.seed)
        keep: set[int] = set()
        for indices in by_label.values():
            keep.update(rng.sample(indices, per_label))
        self.skipped["balanced_out"] += len(ordered) - len(keep)
        return [item for index, item in enumerate(ordered) if index in keep]
