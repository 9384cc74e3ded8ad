"""Export a published adapter for other tools: PEFT, lm-eval, vLLM.

A published folder records its base model as sparring configured it: ``"bundled"`` for the
bundled SmolLM2, which only sparring can resolve (to the safetensors folder it converted the
GGUF into). An export is a standard PEFT folder whose ``adapter_config.json`` names the base
model by what any tool can load (that converted folder, a local model folder, or a hub id
kept as it is), with the base model's tokenizer beside it; or, merged, a full model folder
(the adapter's weights added into the base model's) that needs no PEFT at all.

The export is written to a temporary sibling folder and renamed into place when complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from graphs.policies.adapter_folder import CONFIG_FILE, WEIGHTS_FILE
from graphs.policies.base_models import ModelLoadError, resolve_model
from training.adapter_folders import verify_folder
from training.registry import AdapterRecord


class ExportError(RuntimeError):
    """The export cannot be written; the message says why and what to do."""


@dataclass(frozen=True)
class ExportedAdapter:
    """Where an export went and what other tools need to load it."""

    name: str
    """the version exported (``role@vN``)"""
    folder: Path
    base_model: str
    """what the adapter's ``base_model_name_or_path`` names: a local folder or a hub id"""
    merged: bool
    """a full model folder (no adapter) rather than a PEFT adapter folder"""
    rank: int
    """the adapter's LoRA rank (vLLM's ``--max-lora-rank`` must be at least this)"""


def export_adapter(
    record: AdapterRecord, target: Path, *, cache_dir: Path, merged: bool = False, force: bool = False
) -> ExportedAdapter:
    """Write ``record``'s adapter (``merged``: the base model with the adapter merged in) and
    the base model's tokenizer to ``target``, which must be missing or empty unless ``force``
    (its contents are then replaced once the export is complete)."""
    verify_folder(record.path, base_model=record.base_model, status=str(record.status))
    base = base_model_source(record.base_model, cache_dir)
    target = Path(os.path.abspath(Path(target).expanduser()))
    _check_target(target, record, base, force=force)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        config = json.loads((record.path / CONFIG_FILE).read_text())
        if merged:
            _write_merged(record.path, base, staging)
        else:
            config["base_model_name_or_path"] = base
            (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            shutil.copyfile(record.path / WEIGHTS_FILE, staging / WEIGHTS_FILE)
        _tokenizer(base).save_pretrained(staging)
        staging.chmod(0o755)  # mkdtemp makes it private; other users (a vLLM server) read it
        _replace(target, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ExportedAdapter(name=record.name, folder=target, base_model=base, merged=merged, rank=int(config["r"]))


def base_model_source(base_model: str, cache_dir: Path) -> str:
    """What other tools load ``base_model`` from: for ``"bundled"`` the converted safetensors
    folder under ``cache_dir`` (converting it first if needed), a local folder as an absolute
    path, a hub id as it is."""
    try:
        source = resolve_model(base_model, cache_dir)
    except ModelLoadError as exc:
        raise ExportError(f"cannot find the base model {base_model!r} of the adapter: {exc}") from exc
    return str(Path(source).resolve()) if isinstance(source, Path) else source


def _check_target(target: Path, record: AdapterRecord, base: str, *, force: bool) -> None:
    if target.exists() and not target.is_dir():
        raise ExportError(f"{target} is a file, not a folder: choose a folder to export {record.name} to.")
    kept = {"the adapter's published folder": record.path.resolve()}
    if Path(base).is_dir():
        kept["the base model's folder"] = Path(base).resolve()
    for what, folder in kept.items():
        if folder.is_relative_to(target.resolve()):
            raise ExportError(
                f"{target} holds {what} ({folder}), which the export would replace: choose another folder."
            )
    if target.is_dir() and any(target.iterdir()) and not force:
        raise ExportError(
            f"{target} exists and is not empty: choose a new folder, or pass --force to replace its contents "
            f"with the export."
        )


def _write_merged(adapter: Path, base: str, staging: Path) -> None:
    """The base model with the adapter's update added into its weights, in the base model's dtype."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
    except Exception as exc:  # transformers raises OSError, ValueError, safetensors errors...
        raise ExportError(f"cannot load the base model {base} to merge the adapter into: {exc}") from exc
    merged = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    merged.save_pretrained(staging)


def _tokenizer(base: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(base)
    except Exception as exc:
        raise ExportError(
            f"cannot load the tokenizer of the base model {base} (the export carries it): {exc}"
        ) from exc


def _replace(target: Path, staging: Path) -> None:
    """Rename ``staging`` to ``target``; an existing ``target`` is moved aside first and removed after."""
    if not target.exists():
        os.rename(staging, target)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    os.rename(target, old / "export")
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
