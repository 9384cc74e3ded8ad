"""An in-memory RecordSink: collects what a game emits, for tests to assert on."""

from __future__ import annotations

from dataclasses import dataclass, field

from storage.records import EpisodeEnd, EpisodeStart, JudgmentRecord, RewardRecord, TurnRecord


@dataclass
class MemorySink:
    started: list[EpisodeStart] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    rewards: list[RewardRecord] = field(default_factory=list)
    judgments: list[JudgmentRecord] = field(default_factory=list)
    finished: list[EpisodeEnd] = field(default_factory=list)

    def episode_started(self, record: EpisodeStart) -> None:
        self.started.append(record)

    def turn(self, record: TurnRecord) -> None:
        self.turns.append(record)

    def reward(self, record: RewardRecord) -> None:
        self.rewards.append(record)

    def judgment(self, record: JudgmentRecord) -> None:
        self.judgments.append(record)

    def episode_finished(self, record: EpisodeEnd) -> None:
        self.finished.append(record)
