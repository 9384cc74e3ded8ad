"""What every dataset builder is: it says what to read, takes episodes one at a time in the
order they finished, and yields rows; rows that need the whole build come out of ``finish``.
What it leaves out, it counts in ``skipped`` (reason -> count), so an empty or small build
can say why."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from datasets import Features

from storage.models import DatasetKind
from training.datasets.credit import context_seats, reads_seat_rewards
from training.datasets.reading import EpisodeLog, LogFilter, LoggedTurn, ReadPlan

Row = dict[str, Any]


class EncodedRow(bytes):
    """A row already encoded as one JSON object (UTF-8, no newline): the snapshot writer
    writes it as it is, so a builder that parks rows as JSON need not decode them again."""
OptionsT = TypeVar("OptionsT")


@dataclass(frozen=True)
class BuildContext:
    """What a build is for: the role whose rows it makes, the game, and a seed for any
    sampling the builder does."""

    role: str
    game: str
    seed: int = 0


class Builder(ABC, Generic[OptionsT]):
    kind: ClassVar[DatasetKind]
    options_type: ClassVar[type]
    tokens: ClassVar[bool] = False
    """whether rows need token ids and behaviour logprobs"""

    def __init__(self, context: BuildContext, options: OptionsT) -> None:
        self.context = context
        self.options = options
        self.skipped: Counter[str] = Counter()

    def read_plan(self, log_filter: LogFilter, since: datetime | None) -> ReadPlan:
        return ReadPlan(
            game=self.context.game,
            role=self.context.role,
            filter=log_filter,
            since=since,
            context_seats=context_seats(self.context.game, self.context.role),
            judged_turns=self.needs_judgments(),
            tokens=self.tokens,
            seat_rewards=reads_seat_rewards(self.context.game),
        )

    def needs_judgments(self) -> bool:
        """Whether rows need judgments and the turns they name."""
        return False

    def needs_samples(self) -> bool:
        """Whether rows compare several samples of one state (``sparring play --samples``)."""
        return False

    @staticmethod
    @abstractmethod
    def features(options: Any) -> Features:
        """The columns of the rows, as ``datasets`` loads them."""

    @abstractmethod
    def add(self, episode: EpisodeLog) -> Iterable[Row | EncodedRow]:
        """Rows that this episode alone makes."""

    def finish(self) -> Iterable[Row | EncodedRow]:
        """Rows that needed every episode of the build (groups, normalisation, balance)."""
        return ()

    def why_empty(self) -> str | None:
        """After a build that made no row from the episodes it read: why, when more episodes
        of the same kind would not help (None: play more)."""
        return None

    def role_turns(self, episode: EpisodeLog) -> list[LoggedTurn]:
        """The turns of the episode that rows are made from: the role's selected turns."""
        return [turn for turn in episode.turns if turn.selected]
