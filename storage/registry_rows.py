"""The rows of the adapter registry (``adapter_versions``): reading, inserting and updating them.

A version comes back as a dict of the table's columns. Each function runs on the Connection of
a transaction the caller opened (``storage.engine.in_transaction``), so that a status change
and the lock it takes stay one transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, insert, select, update

from storage.models import AdapterVersion, DatasetSnapshot
from storage.tables import ADAPTER_VERSIONS as _TABLE

_VERSIONS = select(*_TABLE.c)


def versions(conn: Connection, *, role: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
    """Versions by role and version, optionally of one role and one status."""
    query = _VERSIONS.order_by(AdapterVersion.role, AdapterVersion.version)
    if role is not None:
        query = query.where(AdapterVersion.role == role)
    if status is not None:
        query = query.where(AdapterVersion.status == status)
    return [dict(row) for row in conn.execute(query).mappings()]


def version_by_id(conn: Connection, version_id: int) -> dict[str, Any] | None:
    row = conn.execute(_VERSIONS.where(AdapterVersion.id == version_id)).mappings().one_or_none()
    return None if row is None else dict(row)


def version_named(conn: Connection, name: str) -> dict[str, Any] | None:
    row = conn.execute(_VERSIONS.where(AdapterVersion.name == name)).mappings().one_or_none()
    return None if row is None else dict(row)


def role_versions(conn: Connection, role: str) -> list[dict[str, Any]]:
    """The versions of ``role``, by version."""
    query = _VERSIONS.where(AdapterVersion.role == role).order_by(AdapterVersion.version)
    return [dict(row) for row in conn.execute(query).mappings()]


def lock_role(conn: Connection, role: str) -> list[dict[str, Any]]:
    """All versions of ``role`` (by version), locked until the transaction ends, so that status
    changes of one role run one after the other.

    A no-op UPDATE takes the lock on both databases: on PostgreSQL it locks the role's rows
    (as SELECT ... FOR UPDATE would); on SQLite, which has no row locks and whose Python driver
    opens the transaction only at the first write, it takes the database's write lock before
    anything is read.
    """
    conn.execute(update(AdapterVersion).where(AdapterVersion.role == role).values(status=AdapterVersion.status))
    return role_versions(conn, role)


def trained_by(conn: Connection, role: str, trainer: str, *, same: bool) -> tuple[str, str] | None:
    """(name, trainer) of one version of ``role`` trained by ``trainer`` (``same``) or by any
    other trainer (not ``same``); None when there is none."""
    which = AdapterVersion.trainer == trainer if same else AdapterVersion.trainer != trainer
    found = conn.execute(
        select(AdapterVersion.name, AdapterVersion.trainer).where(AdapterVersion.role == role, which).limit(1)
    ).first()
    return None if found is None else (found.name, found.trainer)


def highest_version(conn: Connection, role: str) -> int:
    """The highest version number registered for ``role``; 0 when it has none."""
    return conn.scalar(select(func.max(AdapterVersion.version)).where(AdapterVersion.role == role)) or 0


def insert_version(conn: Connection, row: dict[str, Any]) -> dict[str, Any]:
    """Insert a version (IntegrityError when its name or its role and version are taken);
    returns the row as stored."""
    return dict(conn.execute(insert(AdapterVersion).values(**row).returning(*_TABLE.c)).mappings().one())


def update_version(conn: Connection, version_id: int, changes: dict[str, Any]) -> None:
    conn.execute(update(AdapterVersion).where(AdapterVersion.id == version_id).values(**changes))


def snapshot_exists(conn: Connection, snapshot_id: int) -> bool:
    """Whether the dataset snapshot ``snapshot_id`` is in the store."""
    return conn.scalar(select(DatasetSnapshot.id).where(DatasetSnapshot.id == snapshot_id)) is not None
