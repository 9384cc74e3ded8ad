"""`sparring adapters list|show|promote|reject|rollback|export`: the adapter registry."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from app.api.errors import one_line
from app.commands.common import DbOption, FormatOption, engine_or_exit, err, fail, out, settings_or_exit
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


@adapters_app.command("export")
def adapters_export(
    name: Annotated[str, typer.Argument(help="Version to export (role@vN) or its id.")],
    folder: Annotated[Path, typer.Argument(help="Folder to write (missing or empty, unless --force).")],
    merged: Annotated[
        bool, typer.Option("--merged", help="Write the base model with the adapter merged in (no PEFT needed).")
    ] = False,
    force: Annotated[bool, typer.Option("--force", help="Replace what FOLDER holds.")] = False,
    db: DbOption = None,
) -> None:
    """Export an adapter version as a standard PEFT folder that other tools load (lm-eval,
    vLLM, PEFT): its adapter_config.json names the base model by a real path (the bundled
    model's converted folder) instead of "bundled", with the base model's tokenizer beside it.
    `--merged` writes a full model folder instead. Prints the lm-eval and vLLM command lines.

    Examples:

    * `sparring adapters export actor@v3 exports/actor-v3`
    * `sparring adapters export critic@v2 exports/critic-v2-merged --merged`
    """
    from graphs.policies.adapter_folder import AdapterFolderError
    from training.export_adapter import ExportError, export_adapter
    from training.registry import get_version

    settings = settings_or_exit(database_url=db)
    record = _registry_call(get_version, engine_or_exit(db), name)
    try:
        with err.status(f"exporting {record.name}{' merged into its base model' if merged else ''}…"):
            exported = export_adapter(record, folder, cache_dir=settings.cache_dir, merged=merged, force=force)
    except (ExportError, AdapterFolderError) as exc:
        fail(f"cannot export {record.name}: {one_line(exc)}", code=1)
    err.print(f"exported {exported.name} to {exported.folder}")
    for line in usage_lines(exported):
        out.print(line, highlight=False, soft_wrap=True)


def usage_lines(exported) -> list[str]:
    """The lm-eval and vLLM command lines that load an export (``ExportedAdapter``)."""
    from app.vllm_server import VLLM_LORA_RANKS

    folder = str(exported.folder)
    if exported.merged:
        return [
            f"lm_eval --model hf --model_args {shlex.quote(f'pretrained={folder}')} --tasks gsm8k",
            f"vllm serve {shlex.quote(folder)}",
        ]
    rank = next((r for r in VLLM_LORA_RANKS if r >= exported.rank), exported.rank)
    model_args = f"pretrained={exported.base_model},peft={folder}"
    return [
        f"lm_eval --model hf --model_args {shlex.quote(model_args)} --tasks gsm8k",
        f"vllm serve {shlex.quote(exported.base_model)} --enable-lora --max-lora-rank {rank} "
        f"--lora-modules {shlex.quote(f'{exported.name}={folder}')}",
    ]
