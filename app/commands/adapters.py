"""`sparring adapters list|show|promote|reject|rollback`: the adapter registry."""

from __future__ import annotations

from typing import Annotated

import typer

from app.commands.common import DbOption, FormatOption, engine_or_exit, err, fail, out
from app.output import Format, emit

adapters_app = typer.Typer(
    help="The adapter registry: versions, lineage, promote, reject and rollback.", no_args_is_help=True
)


def _registry_call(call, *args, **kwargs):
    from training.registry import RegistryError

    try:
        return call(*args, **kwargs)
    except RegistryError as exc:
        fail(str(exc))


def _adapter_row(record) -> dict:
    return {
        "name": record.name,
        "role": record.role,
        "status": str(record.status),
        "trainer": record.trainer,
        "base_model": record.base_model,
        "parent_id": record.parent_id,
        "dataset": record.dataset_snapshot_id,
        "created_at": record.created_at,
        "promoted_at": record.promoted_at,
        "path": str(record.path),
        "eval": record.eval,
    }


@adapters_app.command("list")
def adapters_list(
    role: Annotated[str | None, typer.Option(help="Only this role.")] = None,
    status: Annotated[str | None, typer.Option(help="candidate, active, retired or rejected.")] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """List adapter versions by role, oldest version first.

    Examples:

    * `sparring adapters list`
    * `sparring adapters list --role critic --status active --format json`
    """
    from training.registry import list_versions

    engine = engine_or_exit(db)
    rows = [_adapter_row(r) for r in _registry_call(list_versions, engine, role=role, status=status)]
    emit(
        rows,
        fmt,
        columns=["name", "status", "trainer", "parent_id", "dataset", "created_at", "promoted_at"],
        title="adapters",
    )


@adapters_app.command("show")
def adapters_show(
    name: Annotated[str, typer.Argument(help="Version name (role@vN) or id.")],
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Show one adapter version with its lineage and evaluation figures.

    Example: `sparring adapters show actor@v3`
    """
    from training.registry import get_version

    engine = engine_or_exit(db)
    row = _adapter_row(_registry_call(get_version, engine, name))
    if fmt == Format.table:
        emit([{"field": k, "value": v} for k, v in row.items()], fmt, title=row["name"], console=out)
    else:
        emit([row], fmt)


@adapters_app.command("promote")
def adapters_promote(
    name: Annotated[str, typer.Argument(help="Candidate version to make active (role@vN).")],
    db: DbOption = None,
) -> None:
    """Make a candidate the active version of its role, by hand (the previous one is retired).

    `sparring deploy ROLE` promotes through the evaluation gate instead.

    Example: `sparring adapters promote critic@v4`
    """
    from training.registry import promote

    engine = engine_or_exit(db)
    record = _registry_call(promote, engine, name, eval={"promoted_by": "hand"})
    err.print(f"{record.name} is now the active {record.role} adapter")


@adapters_app.command("reject")
def adapters_reject(
    name: Annotated[str, typer.Argument(help="Candidate version to set aside (role@vN).")],
    db: DbOption = None,
) -> None:
    """Mark a candidate rejected by hand, without evaluating it: `sparring deploy ROLE` then
    takes the newest other candidate. Use it for a candidate whose folder is broken.

    Example: `sparring adapters reject actor@v3`
    """
    from training.registry import reject

    engine = engine_or_exit(db)
    record = _registry_call(reject, engine, name, eval={"rejected_by": "hand"})
    err.print(f"{record.name} is rejected; it will not be deployed")


@adapters_app.command("rollback")
def adapters_rollback(
    role: Annotated[str, typer.Argument(help="Role whose active version is rolled back.")],
    to: Annotated[str | None, typer.Option(help="A retired version to go back to (default: the previous one).")] = None,
    db: DbOption = None,
) -> None:
    """Re-activate the previous version of a role and retire the current one.

    Examples:

    * `sparring adapters rollback actor`
    * `sparring adapters rollback actor --to actor@v2`
    """
    from training.registry import rollback

    engine = engine_or_exit(db)
    record = _registry_call(rollback, engine, role, to=to)
    err.print(f"{record.name} is the active {record.role} adapter again")
