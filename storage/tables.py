"""The store's tables as SQLAlchemy Core handles, for the modules of storage/ that build queries."""

from __future__ import annotations

from storage.models import (
    AdapterVersion,
    CommitSequence,
    DatasetSnapshot,
    Episode,
    EpisodePayload,
    Evaluation,
    Judgment,
    Reward,
    Run,
    TrainingJob,
    Turn,
    TurnPayload,
)

EPISODES = Episode.__table__
EPISODE_PAYLOADS = EpisodePayload.__table__
TURNS = Turn.__table__
TURN_PAYLOADS = TurnPayload.__table__
REWARDS = Reward.__table__
JUDGMENTS = Judgment.__table__
RUNS = Run.__table__
SNAPSHOTS = DatasetSnapshot.__table__
JOBS = TrainingJob.__table__
ADAPTER_VERSIONS = AdapterVersion.__table__
EVALUATIONS = Evaluation.__table__
COMMIT_SEQUENCE = CommitSequence.__table__
