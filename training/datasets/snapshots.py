"""Dataset snapshots: build rows from the logs into a JSONL file, register it, load it back.

A snapshot is one JSONL file (one row per line) and one ``dataset_snapshots`` row holding
what selected the rows (``filter_spec``), the watermark, the row count and the file's
sha256. ``since="latest"`` continues from where the newest *settled* snapshot of the same
kind, role and game stopped, so a retrain reads only what is new: by commit number
(``storage.commits``: its horizon), so that an episode committed late by another process is
read by the next build rather than skipped; by time (its watermark) for a snapshot built
before commits were numbered, or on turns. A snapshot is settled once a
training job on it succeeded, or when it was built for its own sake (``datasets build``) and no
job has tried it yet; one built for training (``for_training``) or tried only by jobs that failed
or never finished (a killed ``train``) is not: its rows are read again by the next build, so
they are never skipped untrained. The file is written under a
temporary name and renamed when complete; the database row is inserted after the rename,
so a registered snapshot always has its whole file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, Literal

import datasets
from sqlalchemy import Engine

from storage import dataset_rows
from storage.models import DatasetKind, JobStatus
from storage.records import utcnow
from training.datasets.building import BuildContext, Builder, EncodedRow, Row
from training.datasets.errors import (
    DatasetMismatchError,
    EmptyDatasetError,
    SnapshotFileError,
    SnapshotNotFoundError,
)
from training.datasets.external import registered_game
from training.datasets.policy_gradient import PolicyGradientRows, PPOOptions
from training.datasets.preference import DPOOptions, PreferencePairs
from training.datasets.reading import DEFAULT_CHUNK_EPISODES, Commits, EpisodeLog, LogFilter, read_episodes
from training.datasets.reward_model import BalancedRewardRows, RewardOptions
from training.datasets.sft import RejectionSampling, SFTOptions
from training.datasets.truth_verdicts import TruthVerdictRows
from training.datasets.unpaired import KTOOptions, UnpairedPreferences

BuilderOptions = DPOOptions | KTOOptions | PPOOptions | SFTOptions | RewardOptions
BUILDERS: dict[DatasetKind, type[Builder[Any]]] = {
    DatasetKind.DPO: PreferencePairs,
    DatasetKind.KTO: UnpairedPreferences,
    DatasetKind.PPO: PolicyGradientRows,
    DatasetKind.SFT: RejectionSampling,
    DatasetKind.REWARD: BalancedRewardRows,
}
FOR_TRAINING = "for_training"
"""key of ``filter_spec`` set on a snapshot built for a training job (see ``build_snapshot``)"""


def builder_type(kind: DatasetKind, options: BuilderOptions) -> type[Builder[Any]]:
    """The builder of ``kind`` rows under ``options``: SFT's truth verdicts have one of their own."""
    if kind == DatasetKind.SFT and isinstance(options, SFTOptions) and options.verdicts == "truth":
        return TruthVerdictRows
    return BUILDERS[kind]


@dataclass(frozen=True)
class SnapshotResult:
    id: int
    kind: DatasetKind
    role: str
    game: str
    base_model: str
    path: Path
    row_count: int
    content_hash: str
    """sha256 of the file, hex"""
    watermark: datetime
    """the newest ``watermark_on`` value read: the next ``since="latest"`` build starts after it"""
    since: datetime | None
    """the watermark this build started after (None: it read everything, or continued by commit number)"""
    horizon: int | None
    """the episodes read are those numbered below this (``storage.commits``): the next ``since="latest"``
    build reads from here on (None: a build on turns, ``LogFilter.watermark_on``)"""
    filter_spec: dict[str, Any]
    episodes_read: int
    skipped: dict[str, int]
    """what the builder left out, reason -> count"""


def build_snapshot(
    engine: Engine,
    kind: DatasetKind | str,
    role: str,
    *,
    game: str,
    base_model: str,
    out_dir: str | Path,
    since: datetime | Literal["latest"] | None = "latest",
    log_filter: LogFilter | None = None,
    options: BuilderOptions | None = None,
    seed: int = 0,
    chunk_episodes: int = DEFAULT_CHUNK_EPISODES,
    for_training: bool = False,
) -> SnapshotResult:
    """Build ``kind`` rows for ``role`` from the succeeded ``game`` episodes newer than
    ``since`` (a watermark; ``"latest"``: the watermark of the newest snapshot of the same
    kind, role and game, or everything if there is none; None: everything), write them to a
    new JSONL file under ``out_dir`` and register the snapshot. ``for_training``: a job is
    about to train on it, so it stays unsettled (the watermark does not move) until one succeeds.

    Raises EmptyDatasetError, writing nothing, when no row comes out.
    """
    kind = _kind(kind)
    options_type = BUILDERS[kind].options_type
    if options is None:
        options = options_type()
    if not isinstance(options, options_type):
        raise TypeError(
            f"options for a {kind} snapshot must be {options_type.__name__}, got {type(options).__name__}"
        )
    log_filter = log_filter or LogFilter()
    by_commit = log_filter.watermark_on == "episode_finished_at"
    since_snapshot_id, since_at, after = _resolve_since(engine, since, kind, role, game, by_commit=by_commit)
    builder = builder_type(kind, options)(BuildContext(role=role, game=game, seed=seed), options)
    plan = builder.read_plan(log_filter, since_at)
    if by_commit:  # the horizon is read before any episode is
        plan = replace(plan, commits=Commits(before=dataset_rows.commit_horizon(engine), after=after))
    filter_spec = {
        "game": game,
        "role": role,
        **log_filter.to_dict(),
        "since": None if since_at is None else since_at.isoformat(),
        "commits": None if plan.commits is None else asdict(plan.commits),
        "since_snapshot_id": since_snapshot_id,
        "options": asdict(options),
        "seed": seed,
        **({FOR_TRAINING: True} if for_training else {}),
    }

    folder = Path(out_dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    stamp = utcnow().strftime("%Y%m%dT%H%M%SZ")
    path = folder / _safe(f"{game}-{role}-{kind}-{stamp}-{uuid.uuid4().hex[:8]}.jsonl")
    tracker = _Watermark(log_filter)
    writer = _write_file(path, builder, read_episodes(engine, plan, chunk_episodes=chunk_episodes), tracker)
    watermark = tracker.value
    if writer.rows == 0 or watermark is None:
        raise EmptyDatasetError(
            _empty_message(kind, role, game, log_filter, since_at, since_snapshot_id, after, tracker, builder)
        )
    snapshot = {
        "kind": kind.value,
        "role": role,
        "game": game,
        "base_model": base_model,
        "filter_spec": filter_spec,
        "watermark": watermark,
        "horizon": None if plan.commits is None else plan.commits.before,
        "row_count": writer.rows,
        "path": str(path),
        "content_hash": writer.sha256.hexdigest(),
    }
    try:
        snapshot_id = dataset_rows.insert_snapshot(engine, snapshot)
    except BaseException:
        path.unlink(missing_ok=True)  # an unregistered file would only be an orphan
        raise
    return SnapshotResult(
        id=snapshot_id,
        kind=kind,
        role=role,
        game=game,
        base_model=base_model,
        path=path,
        row_count=writer.rows,
        content_hash=writer.sha256.hexdigest(),
        watermark=watermark,
        since=since_at,
        horizon=None if plan.commits is None else plan.commits.before,
        filter_spec=filter_spec,
        episodes_read=tracker.episodes,
        skipped=dict(builder.skipped),
    )


def load_snapshot(
    engine: Engine,
    snapshot_id: int,
    *,
    role: str,
    base_model: str,
    kind: DatasetKind | str | None = None,
    cache_dir: str | Path | None = None,
) -> datasets.Dataset:
    """The rows of snapshot ``snapshot_id`` as a ``datasets.Dataset``, after checking that it
    was built for ``role``, ``base_model`` (and ``kind``, when given) and that its file is
    still the one that was built. ``cache_dir``: where ``datasets`` keeps its Arrow copy
    (default: a ``.cache`` folder beside the file)."""
    snapshot = dataset_rows.snapshot(engine, snapshot_id)
    if snapshot is None:
        raise SnapshotNotFoundError(
            f"there is no dataset snapshot {snapshot_id} in this store; build one with build_snapshot "
            "or check the id (and the database URL)"
        )
    if snapshot["role"] != role:
        raise DatasetMismatchError(
            f"snapshot {snapshot_id} was built for role {snapshot['role']}, not {role}: "
            f"load a snapshot of role {role}, or build one"
        )
    if snapshot["base_model"] != base_model:
        raise DatasetMismatchError(
            f"snapshot {snapshot_id} was built for base model {snapshot['base_model']!r}, not {base_model!r}: "
            "train on that base model, or build a snapshot for this one"
        )
    if kind is not None and snapshot["kind"] != _kind(kind):
        raise DatasetMismatchError(
            f"snapshot {snapshot_id} holds {snapshot['kind']} rows, not {_kind(kind)} rows: "
            f"load a {_kind(kind)} snapshot, or build one"
        )
    path = Path(snapshot["path"])
    if not path.is_file():
        raise SnapshotFileError(
            f"the file of snapshot {snapshot_id} is missing ({path}); it was moved or deleted. "
            "Put it back, or build a new snapshot"
        )
    digest = _file_sha256(path)
    if digest != snapshot["content_hash"]:
        raise SnapshotFileError(
            f"the file of snapshot {snapshot_id} ({path}) changed since it was built (sha256 {digest[:12]}..., "
            f"recorded {str(snapshot['content_hash'])[:12]}...). Restore it, or build a new snapshot"
        )
    snapshot_kind = DatasetKind(snapshot["kind"])
    options = BUILDERS[snapshot_kind].options_type(**snapshot["filter_spec"].get("options", {}))
    return datasets.Dataset.from_json(
        str(path),
        features=builder_type(snapshot_kind, options).features(options),
        cache_dir=str(cache_dir if cache_dir is not None else path.parent / ".cache"),
    )


def _write_file(path: Path, builder: Builder[Any], episodes: Iterable[EpisodeLog], tracker: _Watermark) -> _Writer:
    """Write the builder's rows to ``path``: into a partial file, renamed to ``path`` once
    complete and synced. When no row came out, nothing is left on disk."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        with partial.open("wb") as file:
            writer = _Writer(file)
            for episode in episodes:
                tracker.update(episode)
                writer.write_all(builder.add(episode))
            writer.write_all(builder.finish())
            file.flush()
            os.fsync(file.fileno())
        if writer.rows:
            os.replace(partial, path)
        return writer
    finally:
        partial.unlink(missing_ok=True)


class _Writer:
    """JSON lines into a binary file, counting rows and hashing the bytes as they go."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.rows = 0
        self.sha256 = hashlib.sha256()

    def write_all(self, rows: Iterable[Row | EncodedRow]) -> None:
        for row in rows:
            line = (row if isinstance(row, EncodedRow) else json.dumps(row, ensure_ascii=False).encode()) + b"\n"
            self.file.write(line)
            self.sha256.update(line)
            self.rows += 1


class _Watermark:
    """The newest watermark field value of what a build read, and how many episodes it read."""

    def __init__(self, log_filter: LogFilter) -> None:
        self.on_turns = log_filter.watermark_on == "turn_created_at"
        self.value: datetime | None = None
        self.episodes = 0
        self.turns = 0

    def update(self, episode: EpisodeLog) -> None:
        self.episodes += 1
        selected = [t for t in episode.turns if t.selected]
        self.turns += len(selected)
        values = [t.created_at for t in selected if t.created_at] if self.on_turns else [episode.finished_at]
        newest = max(values)
        self.value = newest if self.value is None else max(self.value, newest)


def _kind(kind: DatasetKind | str) -> DatasetKind:
    try:
        return DatasetKind(kind)
    except ValueError:
        raise ValueError(
            f"unknown dataset kind {kind!r}; use one of: {', '.join(k.value for k in DatasetKind)}"
        ) from None


def _resolve_since(
    engine: Engine, since: datetime | Literal["latest"] | None, kind: DatasetKind, role: str, game: str, *,
    by_commit: bool,
) -> tuple[int | None, datetime | None, int | None]:
    """(the snapshot the build continues from, or None; the watermark to read after; the commit
    number to read from). ``"latest"`` continues from the newest settled snapshot: from its horizon
    when it has one and ``by_commit`` (never by time then: an episode that committed late may have
    finished before that snapshot's watermark), else after its watermark."""
    if since != "latest":
        if isinstance(since, str):
            raise ValueError(f'since must be a datetime, "latest" or None; got {since!r}')
        return None, since, None
    for snapshot in list_snapshots(engine, kind=kind, role=role, game=game):
        if snapshot.settled:
            if by_commit and snapshot.horizon is not None:
                return snapshot.id, None, snapshot.horizon
            return snapshot.id, snapshot.watermark, None
    return None, None, None


@dataclass(frozen=True)
class SnapshotInfo:
    """A registered snapshot and the training jobs that used it."""

    id: int
    kind: str
    role: str
    game: str | None
    row_count: int
    watermark: datetime | None
    horizon: int | None
    created_at: datetime
    path: str
    for_training: bool
    jobs: tuple[tuple[int, str], ...]
    """(job id, status) of each training job on it, oldest first"""

    @property
    def settled(self) -> bool:
        """Whether the next ``since="latest"`` build starts after its watermark (module docstring)."""
        if any(status == JobStatus.SUCCEEDED for _, status in self.jobs):
            return True
        return not self.jobs and not self.for_training


def list_snapshots(
    engine: Engine, *, kind: DatasetKind | str | None = None, role: str | None = None, game: str | None = None
) -> list[SnapshotInfo]:
    """Registered snapshots, newest first, with their training jobs."""
    rows = dataset_rows.snapshots_with_jobs(
        engine, kind=None if kind is None else _kind(kind).value, role=role, game=game
    )
    return [
        SnapshotInfo(
            id=s["id"], kind=s["kind"], role=s["role"], game=s["game"], row_count=s["row_count"],
            watermark=s["watermark"], horizon=s["horizon"], created_at=s["created_at"], path=s["path"],
            for_training=bool(s["filter_spec"].get(FOR_TRAINING)), jobs=tuple(s["jobs"]),
        )
        for s in rows
    ]


def _empty_message(
    kind: DatasetKind,
    role: str,
    game: str,
    log_filter: LogFilter,
    since: datetime | None,
    since_snapshot_id: int | None,
    after: int | None,
    tracker: _Watermark,
    builder: Builder[Any],
) -> str:
    start = "the beginning" if since is None else since.isoformat()
    if after is not None:
        start = f"snapshot {since_snapshot_id} (commits from {after} on)"
    elif since_snapshot_id is not None:
        start += f" (the watermark of snapshot {since_snapshot_id})"
    where = f"{kind} dataset from {game}"
    if log_filter.policy is not None:
        where += f", policy {log_filter.policy!r}"
    if log_filter.split is not None:
        where += f", split {log_filter.split!r}"
    read = f"{tracker.episodes} succeeded episodes and {tracker.turns} model turns of {role} read"
    if builder.skipped:
        read += "; left out: " + ", ".join(f"{reason}={n}" for reason, n in sorted(builder.skipped.items()))
    cause = builder.why_empty() if tracker.episodes else None
    if cause:
        return f"no rows for role {role} since {start} ({where}; {read}): {cause}"
    hint = f"play more episodes with `sparring play {game} --episodes 32`"
    if registered_game(game) is None:
        hint = (f"{game} is not a registered game, so its episodes come from `sparring gateway --game {game}`: play "
                f"more through it, and reward {role}'s turns (docs/gateway.md)")
    if builder.needs_samples():
        hint += " (this kind compares samples of one state: add `--samples 4`)"
    if since is None and after is None and tracker.episodes == 0:
        hint += (
            f"; if {game} episodes were played, check that {role!r} is one of its seats, that a model played it "
            "(a scripted bot's turns are never training data) and that the filter matches"
        )
    return f"no new rows for role {role} since {start} ({where}; {read}): {hint}"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", name)


def _file_sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
