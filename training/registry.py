"""The adapter registry: trained LoRA adapters published as immutable versions ``role@vN``,
with their lineage, and which version of each role is active.

Statuses move ``candidate -> active | rejected``; ``active -> retired`` when another version
of the role becomes active; ``retired -> active`` only by rollback. Every status change runs
in one transaction that first locks all the versions of its role, so that a role has at most
one active version, also under concurrent callers.

``publish`` writes the folder first and the row last: a row always names a complete folder,
and a crash leaves at worst a folder that no row names, which is never served and whose
version number is never reused (see ``training.adapter_folders`` for the folder side).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from storage import registry_rows
from storage.engine import in_transaction
from storage.models import AdapterStatus
from storage.records import utcnow
from training.adapter_folders import (
    NAME_PATTERN,
    ROLE_PATTERN,
    TMP_PREFIX,
    check_trained_folder,
    discard,
    highest_version_on_disk,
    place,
    remove_stale_temporaries,
    stage,
    version_name,
    withdraw,
)

__all__ = [
    "AdapterRecord",
    "RegistryError",
    "TransitionError",
    "UnknownVersionError",
    "active_version",
    "get_version",
    "list_versions",
    "newest_candidate",
    "promote",
    "publish",
    "reject",
    "rollback",
]

TRAINING_EVAL = "training"
"""Key of the trainer's metrics in an adapter's ``eval``."""
GATE_EVAL = "gate"
"""Key of the figures that promoted or rejected it."""
VERIFIER_TRAINER = "reward"
"""The trainer kind whose versions are verifiers (reward models that fill judge seats as
``verifier:NAME``), not seat policies. A role holds versions of one sort only."""
MAX_PUBLISH_ATTEMPTS = 50
"""Versions tried before ``publish`` gives up; each retry means a concurrent publish of the
same role took the version first."""

_TRANSITIONS: dict[tuple[AdapterStatus, AdapterStatus], frozenset[str]] = {
    (AdapterStatus.CANDIDATE, AdapterStatus.ACTIVE): frozenset({"promote"}),
    (AdapterStatus.CANDIDATE, AdapterStatus.REJECTED): frozenset({"reject"}),
    (AdapterStatus.ACTIVE, AdapterStatus.RETIRED): frozenset({"promote", "rollback"}),
    (AdapterStatus.RETIRED, AdapterStatus.ACTIVE): frozenset({"rollback"}),
}
"""Allowed status changes, and the operations that may make them."""


class RegistryError(RuntimeError):
    """A registry operation cannot be done; the message says why and what to do."""


class UnknownVersionError(RegistryError):
    """No adapter version has that name or id."""


class TransitionError(RegistryError):
    """A status change that the lifecycle does not allow."""


@dataclass(frozen=True)
class AdapterRecord:
    """One published adapter version, as the registry holds it."""

    id: int
    role: str
    version: int
    name: str
    """immutable ``role@vN``"""
    base_model: str
    parent_id: int | None
    """the version it was trained from, if any"""
    dataset_snapshot_id: int | None
    trainer: str
    config: dict[str, Any]
    path: Path
    status: AdapterStatus
    eval: dict[str, Any]
    """``{"training": trainer metrics, "gate": figures it was promoted or rejected on}``"""
    created_at: datetime
    promoted_at: datetime | None
    """when it last became active (by promote or rollback)"""

    @property
    def is_verifier(self) -> bool:
        """A verifier (a reward model that fills judge seats), not a seat's policy."""
        return self.trainer == VERIFIER_TRAINER


def publish(
    engine: Engine,
    *,
    role: str,
    trained_dir: Path,
    adapters_root: Path,
    base_model: str,
    trainer: str,
    config: dict[str, Any],
    parent: str | None,
    dataset_snapshot_id: int | None,
    metrics: dict[str, Any],
) -> AdapterRecord:
    """Publish a trainer's output folder as the next version of ``role``, a candidate.

    Everything is checked before anything is written. The folder is copied to a temporary
    folder under ``adapters_root`` and renamed to ``<role>@v<N>``; only then is the row
    inserted. A version number taken meanwhile (by a publish running beside this one, with
    the same or another ``adapters_root``) makes it try the next one. If anything fails, the
    copy is removed, unless its row may have been committed (a commit whose answer was lost).
    """
    if not ROLE_PATTERN.fullmatch(role):
        raise RegistryError(
            f"invalid role {role!r}: use letters, digits, '_' and '-' (starting with a letter or "
            "digit), e.g. critic or debater_a"
        )
    check_json(config, "config")
    check_json(metrics, "metrics")
    check_trained_folder(trained_dir, base_model=base_model)

    def check(conn: Connection) -> int | None:
        _check_same_sort(conn, role, trainer)
        return _check_lineage(conn, base_model, parent, dataset_snapshot_id)

    parent_id = in_transaction(engine, check)
    adapters_root = Path(os.path.abspath(adapters_root.expanduser()))
    adapters_root.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(adapters_root)
    row = {
        "role": role,
        "base_model": base_model,
        "parent_id": parent_id,
        "dataset_snapshot_id": dataset_snapshot_id,
        "trainer": trainer,
        "config": config,
        "status": AdapterStatus.CANDIDATE,
        "eval": {TRAINING_EVAL: metrics},
    }
    return _place_and_register(engine, stage(trained_dir, adapters_root, base_model=base_model), row)


def list_versions(
    engine: Engine, role: str | None = None, status: AdapterStatus | str | None = None
) -> list[AdapterRecord]:
    """Adapter versions by role and version, optionally of one role and one status."""
    wanted = None if status is None else _status(status).value
    rows = in_transaction(engine, lambda conn: registry_rows.versions(conn, role=role, status=wanted))
    return [_record(row) for row in rows]


def get_version(engine: Engine, name_or_id: str | int) -> AdapterRecord:
    """One version by name (``critic@v3``) or by row id (an int, or a string of digits)."""
    if isinstance(name_or_id, int) or name_or_id.isdigit():
        found = in_transaction(engine, lambda conn: registry_rows.version_by_id(conn, int(name_or_id)))
        if found is None:
            raise UnknownVersionError(f"no adapter version has id {name_or_id}")
        return _record(found)
    return in_transaction(engine, lambda conn: _by_name(conn, name_or_id))


def active_version(engine: Engine, role: str) -> AdapterRecord | None:
    """The active version of ``role``, or None if it has none."""
    found = list_versions(engine, role, AdapterStatus.ACTIVE)
    return found[0] if found else None


def newest_candidate(engine: Engine, role: str) -> AdapterRecord | None:
    """The candidate of ``role`` published last (the highest version), or None if it has none."""
    found = list_versions(engine, role, AdapterStatus.CANDIDATE)
    return found[-1] if found else None


def promote(engine: Engine, name: str, *, eval: dict[str, Any] | None = None) -> AdapterRecord:
    """Make the candidate ``name`` the active version of its role and retire the version
    active until now, in one transaction. ``eval``: the gate's figures, kept on the version."""
    if eval is not None:
        check_json(eval, "eval")

    def work(conn: Connection) -> AdapterRecord:
        role = _role_of(name)
        versions = _lock_role(conn, role)
        return _activate(conn, versions, _pick(versions, role, name), "promote", gate=eval)

    return in_transaction(engine, work)


def reject(engine: Engine, name: str, *, eval: dict[str, Any]) -> AdapterRecord:
    """Mark the candidate ``name`` rejected, keeping the figures it was rejected on."""
    check_json(eval, "eval")

    def work(conn: Connection) -> AdapterRecord:
        role = _role_of(name)
        target = _pick(_lock_role(conn, role), role, name)
        return _move(conn, target, AdapterStatus.REJECTED, "reject", gate=eval)

    return in_transaction(engine, work)


def rollback(engine: Engine, role: str, *, to: str | None = None) -> AdapterRecord:
    """Re-activate the version of ``role`` that was active before the current one (or the
    retired version ``to``) and retire the current one, in one transaction.

    Rolling back twice returns to where it started: the version rolled back from is then
    the one most recently active. Use ``to`` to go further back.
    """

    def work(conn: Connection) -> AdapterRecord:
        versions = _lock_role(conn, role)
        if to is not None:
            target = _pick(versions, role, to)
        else:
            retired = [v for v in versions if v.status == AdapterStatus.RETIRED and v.promoted_at is not None]
            if not retired:
                raise RegistryError(
                    f"cannot roll back {role!r}: it has no retired version to go back to "
                    f"({_summary(versions, role)}). A version becomes retired when another one is promoted."
                )
            target = max(retired, key=lambda v: (v.promoted_at, v.version))
        return _activate(conn, versions, target, "rollback")

    return in_transaction(engine, work)


# --- publishing -----------------------------------------------------------------------------


def check_json(value: dict[str, Any], what: str) -> None:
    """RegistryError unless ``value`` is storable as strict JSON (no NaN, no infinity)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RegistryError(
            f"{what} cannot be stored as JSON ({exc}): pass dicts, lists, strings, finite numbers, "
            "booleans and None (e.g. str() for paths, float() for tensors, None for NaN)"
        ) from exc


def _check_same_sort(conn: Connection, role: str, trainer: str) -> None:
    """Refuse a verifier under a role of policies, and a policy under a role of verifiers:
    a seat resolving its role's active version must get a policy, a judge seat a verifier."""
    verifier = trainer == VERIFIER_TRAINER
    found = registry_rows.trained_by(conn, role, VERIFIER_TRAINER, same=not verifier)
    if found is None:
        return
    name, found_trainer = found
    if verifier:
        raise RegistryError(
            f"role {role!r} holds policies ({name}, trained by {found_trainer}), and a verifier is published "
            f"under a role of its own: train it with `--role {role}-verifier` (any role that holds no policy)"
        )
    raise RegistryError(
        f"role {role!r} holds verifiers ({name}, reward models that fill judge seats); a {trainer} adapter "
        "is a policy: publish it under the role of the seat it plays"
    )


def _check_lineage(
    conn: Connection, base_model: str, parent: str | None, dataset_snapshot_id: int | None
) -> int | None:
    """The parent's row id, once the parent and the dataset snapshot are known to exist."""
    if dataset_snapshot_id is not None:
        if not registry_rows.snapshot_exists(conn, dataset_snapshot_id):
            raise RegistryError(
                f"dataset snapshot {dataset_snapshot_id} is not in the store: pass the id that the "
                "dataset build recorded, or None"
            )
    if parent is None:
        return None
    parent_record = _by_name(conn, parent)
    if parent_record.base_model != base_model:
        raise RegistryError(
            f"the parent {parent} is an adapter for {parent_record.base_model!r}, not for "
            f"{base_model!r}: a LoRA adapter can only continue one trained on the same base model"
        )
    return parent_record.id


def _place_and_register(engine: Engine, staged: Path, row: dict[str, Any]) -> AdapterRecord:
    """Rename the staged folder to the next free ``role@vN`` and insert its row; on failure,
    remove the folder unless its row may have been committed."""
    adapters_root, role = staged.parent, row["role"]
    folder = staged
    try:
        for _ in range(MAX_PUBLISH_ATTEMPTS):
            version = 1 + max(
                in_transaction(engine, lambda conn: registry_rows.highest_version(conn, role)),
                highest_version_on_disk(adapters_root, role),
            )
            final = adapters_root / version_name(role, version)
            if not place(folder, final):
                continue
            folder = final
            record = _register(engine, {**row, "version": version, "name": final.name, "path": str(final)})
            if record is not None:
                return record
            folder = withdraw(final)
        raise RegistryError(
            f"could not publish a version of {role!r}: {MAX_PUBLISH_ATTEMPTS} version numbers in a row "
            "were taken by other publishes. Try again when fewer publish at once."
        )
    except BaseException:
        _discard_unless_registered(engine, folder)
        raise


def _register(engine: Engine, row: dict[str, Any]) -> AdapterRecord | None:
    """Insert the row of a placed folder; None if another publish registered its version first."""
    try:
        return in_transaction(engine, lambda conn: _insert(conn, row))
    except IntegrityError:
        existing = in_transaction(engine, lambda conn: _find_name(conn, row["name"]))
        if existing is None:  # not about the version: e.g. the parent was deleted meanwhile
            raise
        if existing.path == Path(row["path"]):  # a retry after a commit whose answer was lost
            return existing
        return None


def _insert(conn: Connection, row: dict[str, Any]) -> AdapterRecord:
    return _record(registry_rows.insert_version(conn, row))


def _discard_unless_registered(engine: Engine, folder: Path) -> None:
    """Remove the folder of a failed publish, unless a row names it or the registry cannot
    tell: an unregistered folder left behind does no harm, while a registered one removed
    would break its version."""
    if not folder.name.startswith(TMP_PREFIX):
        try:
            registered = in_transaction(engine, lambda conn: _find_name(conn, folder.name))
        except SQLAlchemyError:
            return
        if registered is not None and registered.path == folder:
            return
    discard(folder)


# --- status changes -------------------------------------------------------------------------


def _lock_role(conn: Connection, role: str) -> list[AdapterRecord]:
    """All versions of ``role``, locked until the transaction ends (``registry_rows.lock_role``)."""
    return [_record(row) for row in registry_rows.lock_role(conn, role)]


def _activate(
    conn: Connection,
    versions: Sequence[AdapterRecord],
    target: AdapterRecord,
    operation: str,
    gate: dict[str, Any] | None = None,
) -> AdapterRecord:
    """Retire the active version of the role and make ``target`` active. A change that is
    not allowed raises, and the transaction leaves everything as it was."""
    for current in versions:
        if current.status == AdapterStatus.ACTIVE:
            _move(conn, current, AdapterStatus.RETIRED, operation)
    # Strictly after every earlier activation of the role, even if the clock is coarse or was
    # set back: rollback finds the previous active version by this order.
    latest = max((v.promoted_at for v in versions if v.promoted_at is not None), default=None)
    now = utcnow() if latest is None else max(utcnow(), latest + timedelta(microseconds=1))
    return _move(conn, target, AdapterStatus.ACTIVE, operation, gate=gate, promoted_at=now)


def _move(
    conn: Connection,
    record: AdapterRecord,
    status: AdapterStatus,
    operation: str,
    *,
    gate: dict[str, Any] | None = None,
    promoted_at: datetime | None = None,
) -> AdapterRecord:
    _check_transition(record, status, operation)
    changes: dict[str, Any] = {"status": status}
    if gate is not None:
        changes["eval"] = {**record.eval, GATE_EVAL: gate}
    if promoted_at is not None:
        changes["promoted_at"] = promoted_at
    registry_rows.update_version(conn, record.id, changes)
    return dataclasses.replace(record, **changes)


def _check_transition(record: AdapterRecord, status: AdapterStatus, operation: str) -> None:
    if operation in _TRANSITIONS.get((record.status, status), frozenset()):
        return
    rollback_command = f"`sparring adapters rollback {record.role}`"
    hints = {
        AdapterStatus.CANDIDATE: "a candidate becomes active by promote, or is rejected",
        AdapterStatus.ACTIVE: (
            "it is active already"
            if status == AdapterStatus.ACTIVE
            else f"to stop serving it, roll back to the previous version: {rollback_command}"
        ),
        AdapterStatus.RETIRED: f"a retired version comes back only by rollback: {rollback_command}",
        AdapterStatus.REJECTED: "a rejected version stays rejected: train and publish a new version",
    }
    raise TransitionError(
        f"cannot {operation} {record.name}: {record.status} → {status} is not allowed; "
        f"{hints[record.status]}"
    )


# --- reading --------------------------------------------------------------------------------


def _find_name(conn: Connection, name: str) -> AdapterRecord | None:
    row = registry_rows.version_named(conn, name)
    return None if row is None else _record(row)


def _by_name(conn: Connection, name: str) -> AdapterRecord:
    found = _find_name(conn, name)
    if found is not None:
        return found
    role = _role_of(name)
    versions = [_record(row) for row in registry_rows.role_versions(conn, role)]
    raise UnknownVersionError(f"no adapter version is named {name!r} ({_summary(versions, role)})")


def _pick(versions: Sequence[AdapterRecord], role: str, name: str) -> AdapterRecord:
    for version in versions:
        if version.name == name:
            return version
    raise UnknownVersionError(f"no version of {role!r} is named {name!r} ({_summary(versions, role)})")


def _role_of(name: str) -> str:
    # ROLE@v0 or ROLE@v007 is no version's name, but it names a role: "no such version", not "invalid name"
    match = NAME_PATTERN.fullmatch(name) or re.fullmatch(rf"(?P<role>{ROLE_PATTERN.pattern})@v[0-9]+", name)
    if match is None:
        raise UnknownVersionError(f"{name!r} is not an adapter version name: expected ROLE@vN, e.g. critic@v3")
    return match["role"]


def _summary(versions: Sequence[AdapterRecord], role: str) -> str:
    if not versions:
        return f"no version of {role!r} has been published"
    shown = ", ".join(f"{v.name} {v.status}" for v in versions[-5:])
    return f"{role!r} has {len(versions)} version(s); the newest: {shown}"


def _status(status: AdapterStatus | str) -> AdapterStatus:
    try:
        return AdapterStatus(status)
    except ValueError:
        choices = ", ".join(AdapterStatus)
        raise RegistryError(f"unknown adapter status {status!r}: use one of {choices}") from None


def _record(row: Mapping[str, Any]) -> AdapterRecord:
    return AdapterRecord(
        **{
            **row,
            "path": Path(row["path"]),
            "status": AdapterStatus(row["status"]),
            "eval": row["eval"] or {},
        }
    )
