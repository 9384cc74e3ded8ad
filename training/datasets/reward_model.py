"""Reward-model rows, balanced between correct and incorrect answers at each difficulty, so a
verifier cannot score difficulty instead of truth.

The answers are the role's turns checked against ground truth (a ``correct`` event; an
unparsed answer counts as incorrect); the others are counted as ``no_ground_truth``. The
prompt is the turn's own prompt messages.

Formats:

- ``labelled`` (default), for a verifier that scores one answer: ``{"prompt", "completion",
  "label"}`` (TRL's unpaired-preference columns; label True = correct), plus ``difficulty``,
  ``episode_id``, ``turn_id``, ``task_id``, ``seat``. At each difficulty level (episodes
  without one form their own level), as many correct as incorrect answers are kept: all of
  the minority and the same number of the majority, those whose ``sha256(f"{seed}:{turn_id}")``
  ranks lowest (deterministic for a seed). Rows keep the order they were read in.
- ``paired``, for TRL's RewardTrainer: ``{"prompt", "chosen", "rejected"}`` where chosen is
  a correct and rejected an incorrect answer to the same state (seat and hash of the exact
  prompt messages), each answer used once, matched in the same seeded order; balanced by
  construction. Metadata: ``difficulty``, ``seat``, ``task_id``, and both sides' episode and
  turn ids.

Answers left out by the balance are counted as ``balance_dropped``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from datasets import Features, Value

from storage.models import DatasetKind
from training.datasets.balance import CheckedAnswer, answer_rank, balanced_pairs
from training.datasets.building import BuildContext, Builder, Row
from training.datasets.credit import CORRECT
from training.datasets.formats import MESSAGES, PAIR_METADATA, TURN_METADATA, assistant, chat
from training.datasets.reading import EpisodeLog
from training.datasets.spill import Spill

RewardFormat = Literal["labelled", "paired"]
REWARD_FORMATS: tuple[RewardFormat, ...] = ("labelled", "paired")


@dataclass(frozen=True)
class RewardOptions:
    format: RewardFormat = "labelled"

    def __post_init__(self) -> None:
        if self.format not in REWARD_FORMATS:
            raise ValueError(f"format must be one of {', '.join(REWARD_FORMATS)}; got {self.format!r}")


class BalancedRewardRows(Builder[RewardOptions]):
    kind = DatasetKind.REWARD
    options_type = RewardOptions

    def __init__(self, context: BuildContext, options: RewardOptions) -> None:
        super().__init__(context, options)
        self._spill = Spill()
        self._answers: list[CheckedAnswer] = []
        self._states: list[tuple[str, str]] = []
        """each answer's state: seat and hash of the exact prompt messages"""

    def needs_samples(self) -> bool:
        return self.options.format == "paired"

    @staticmethod
    def features(options: RewardOptions) -> Features:
        if options.format == "labelled":
            return Features(
                {
                    "prompt": MESSAGES,
                    "completion": MESSAGES,
                    "label": Value("bool"),
                    "difficulty": Value("string"),
                    **TURN_METADATA,
                }
            )
        return Features(
            {
                "prompt": MESSAGES,
                "chosen": MESSAGES,
                "rejected": MESSAGES,
                "difficulty": Value("string"),
                **PAIR_METADATA,
            }
        )

    def add(self, episode: EpisodeLog) -> Iterable[Row]:
        for turn in self.role_turns(episode):
            if CORRECT not in turn.rewards:
                self.skipped["no_ground_truth"] += 1
                continue
            correct = turn.rewards[CORRECT] >= 0.5
            rank = answer_rank(self.context.seed, turn.turn_id)
            self._answers.append(CheckedAnswer(episode.difficulty, correct, rank))
            self._states.append((turn.seat, turn.prompt_key))
            self._spill.append(
                {
                    "prompt": chat(turn.prompt),
                    "completion": assistant(turn.text),
                    "label": correct,
                    "difficulty": episode.difficulty,
                    "episode_id": episode.episode_id,
                    "turn_id": turn.turn_id,
                    "task_id": episode.task_id,
                    "seat": turn.seat,
                }
            )
        return ()

    def why_empty(self) -> str | None:
        role = self.context.role
        if not self._answers and self.skipped["no_ground_truth"]:
            return (
                f"none of the {self.skipped['no_ground_truth']} {role} turns read was checked against a ground "
                f"truth (no {CORRECT!r} reward): their tasks have no answer, or {role} does not answer the task "
                "(in math-reflection the actor does). Play tasks that have answers (arithmetic, a GSM8K or MATH "
                "file) with a model in that seat"
            )
        if self._answers and len({answer.correct for answer in self._answers}) == 1:
            which = "correct" if self._answers[0].correct else "incorrect"
            return (
                f"all {len(self._answers)} answers read were {which}, and the rows pair or balance correct with "
                "incorrect answers: play harder (or easier) tasks, or at a higher temperature"
            )
        return None

    def finish(self) -> Iterator[Row]:
        try:
            if self.options.format == "labelled":
                yield from self._labelled()
            else:
                yield from self._paired()
        finally:
            self._spill.close()

    def _labelled(self) -> Iterator[Row]:
        kept = {i for pair in balanced_pairs(self._answers) for i in pair}
        self.skipped["balance_dropped"] += len(self._answers) - len(kept)
        for i, row in enumerate(self._spill):
            if i in kept:
                yield row

    def _paired(self) -> Iterator[Row]:
        pairs = balanced_pairs(self._answers, groups=self._states)
        self.skipped["balance_dropped"] += len(self._answers) - 2 * len(pairs)
        for chosen_index, rejected_index in pairs:
            chosen, rejected = self._spill.get(chosen_index), self._spill.get(rejected_index)
            yield {
                "prompt": chosen["prompt"],
                "chosen": chosen["completion"],
                "rejected": rejected["completion"],
                "difficulty": chosen["difficulty"],
                "seat": chosen["seat"],
                "task_id": chosen["task_id"],
                "chosen_episode_id": chosen["episode_id"],
                "rejected_episode_id": rejected["episode_id"],
                "chosen_turn_id": chosen["turn_id"],
                "rejected_turn_id": rejected["turn_id"],
            }
