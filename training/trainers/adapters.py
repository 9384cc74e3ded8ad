"""Adapter folders on the trainer's side: checking a parent before training, writing the
trained adapter and its ``sparring.json`` after. What makes a folder a LoRA adapter (file
names and checks) is ``graphs.policies.adapter_folder``'s; removing a folder is the
registry's (``training.adapter_files.discard``).

A trained adapter folder holds PEFT's files (``adapter_config.json``,
``adapter_model.safetensors``) and ``sparring.json``: the role, the trainer kind, the base
model as configured (``"bundled"``, a folder or a hub id), the parent adapter, the trainer's
config, its final metrics and the dataset snapshot id. It is written to a temporary sibling
folder and renamed into place when complete, so a folder that exists is whole.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphs.policies.adapter_folder import (
    CONFIG_FILE,
    METADATA_FILE,
    AdapterFolderError,
    check_weights,
    read_lora_config,
)
from graphs.policies.base_models import ModelLoadError, resolve_model
from training.trainers.errors import AdapterError, AdapterMismatchError, OutputExistsError, TrainerError

if TYPE_CHECKING:
    from peft import PeftModel

    from training.trainers.base_config import TrainingConfig

METADATA_FORMAT = 1


@dataclass(frozen=True)
class AdapterMetadata:
    """What ``sparring.json`` records about a trained adapter."""

    role: str
    trainer: str
    """the trainer kind: sft, dpo, kto, ppo, grpo or reward"""
    base_model: str
    """the base model exactly as configured ("bundled", a folder path or a hub id); also written
    as ``base_model_name_or_path`` into ``adapter_config.json``"""
    parent_adapter: str | None
    config: dict[str, Any]
    metrics: dict[str, float]
    dataset_snapshot_id: int | None
    created_at: str
    """ISO 8601, UTC"""
    format: int = METADATA_FORMAT

    @classmethod
    def new(
        cls,
        *,
        role: str,
        trainer: str,
        config: TrainingConfig,
        metrics: dict[str, float],
        parent_adapter: Path | None,
        dataset_snapshot_id: int | None,
    ) -> AdapterMetadata:
        """The metadata of an adapter trained now with ``config``."""
        return cls(
            role=role,
            trainer=str(trainer),
            base_model=config.model,
            parent_adapter=str(Path(parent_adapter).resolve()) if parent_adapter is not None else None,
            config=config.to_dict(),
            metrics=metrics,
            dataset_snapshot_id=dataset_snapshot_id,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )


def read_metadata(folder: Path) -> AdapterMetadata | None:
    """The ``sparring.json`` of an adapter folder, or None when it has none."""
    path = Path(folder) / METADATA_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        return AdapterMetadata(**raw)
    except (OSError, ValueError, TypeError) as exc:
        raise AdapterError(
            f"{path} is unreadable ({exc}). It is written by sparring's trainers; restore it from the "
            f"adapter's registry row, or delete it to use the folder as an adapter of unknown origin."
        ) from exc


def prepare_run(*, role: str, output_dir: Path, parent_adapter: Path | None, model: str, cache_dir: Path) -> Path:
    """The checks before a model is loaded: the role, a free output folder, the parent adapter."""
    if not role or not role.strip():
        raise TrainerError('role is empty: name the learner role whose adapter is trained, e.g. "actor".')
    output_dir = prepare_output_dir(Path(output_dir))
    if parent_adapter is not None:
        check_parent_adapter(parent_adapter, model=model, role=role, cache_dir=cache_dir)
    return output_dir


def check_parent_adapter(folder: Path, *, model: str, role: str, cache_dir: Path) -> None:
    """Check that ``folder`` is a complete LoRA adapter for base model ``model`` and ``role``.

    The base model is compared with ``sparring.json`` when the folder has one, else with
    ``base_model_name_or_path`` of ``adapter_config.json`` when that is set. The role is
    compared only when ``sparring.json`` records one.
    """
    folder = Path(folder)
    fresh_hint = "or train a fresh adapter (no parent adapter)"
    if not folder.is_dir():
        raise AdapterError(
            f"Parent adapter folder {folder} does not exist: pass an adapter folder written by a trainer, {fresh_hint}."
        )
    label = f"Parent adapter folder {folder}"
    fix = f"Copy the whole folder again, pass another LoRA adapter folder, {fresh_hint}."
    try:
        adapter_config = read_lora_config(folder, label=label, fix=fix)
        check_weights(folder, label=label, fix=fix)
    except AdapterFolderError as exc:
        raise AdapterError(str(exc)) from exc
    metadata = read_metadata(folder)
    if metadata is not None:
        if not _same_model(metadata.base_model, model):
            raise AdapterMismatchError(
                f"The parent adapter in {folder} was trained on base model {metadata.base_model!r}, not "
                f"{model!r}: LoRA weights only fit the model they were trained on. Set the model to "
                f"{metadata.base_model!r}, {fresh_hint}."
            )
        if metadata.role != role:
            raise AdapterMismatchError(
                f"The parent adapter in {folder} belongs to role {metadata.role!r}, not {role!r}: each role "
                f"trains its own adapter. Continue from the {role!r} role's adapter, {fresh_hint}."
            )
        return
    recorded = adapter_config.get("base_model_name_or_path")
    if recorded and not (_same_model(recorded, model) or _same_model(recorded, _resolved(model, cache_dir))):
        raise AdapterMismatchError(
            f"The parent adapter in {folder} was built for base model {recorded!r} ({CONFIG_FILE}), "
            f"not {model!r}. Set the model to the one it was built for, {fresh_hint}."
        )


def _same_model(recorded: str, configured: str) -> bool:
    """Equal names, or two paths of the same existing folder."""
    return _normalised(recorded) == _normalised(configured)


def _normalised(model: str) -> str:
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def _resolved(model: str, cache_dir: Path) -> str:
    """What ``model`` loads from (for "bundled", its converted folder), as PEFT records it."""
    try:
        return str(resolve_model(model, cache_dir))
    except ModelLoadError:
        return model


def prepare_output_dir(output_dir: Path) -> Path:
    """Refuse an output folder that holds files (an adapter is never overwritten)."""
    output_dir = Path(output_dir)
    if output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise OutputExistsError(
            f"Output folder {output_dir} already exists and is not empty: adapters are never overwritten. "
            f"Choose a new folder (for instance the next version number) or delete this one."
        )
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    return output_dir


def staging_dir(output_dir: Path) -> Path:
    """A fresh temporary folder beside ``output_dir``, renamed into place by ``write_adapter``."""
    return Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.tmp-", dir=output_dir.parent))


def write_adapter(model: PeftModel, staging: Path, output_dir: Path, metadata: AdapterMetadata) -> None:
    """Write the trained ``default`` adapter (not TRL's frozen "ref" copy) and ``sparring.json``
    to ``staging``, then rename it to ``output_dir`` (an empty folder there is replaced).

    ``adapter_config.json`` records the base model by its configured name (``"bundled"``
    rather than the cache folder it was loaded from), which the registry checks. The adapters
    train no embedding layer, so none is saved: with PEFT's default ("auto") it would look the
    base model's config up by that name, on the Hugging Face hub for "bundled".
    """
    model.peft_config["default"].base_model_name_or_path = metadata.base_model
    model.save_pretrained(staging, selected_adapters=["default"], save_embedding_layers=False)
    (staging / METADATA_FILE).write_text(json.dumps(asdict(metadata), indent=2, sort_keys=True) + "\n")
    prepare_output_dir(output_dir)
    if output_dir.is_dir():
        output_dir.rmdir()
    staging.chmod(0o755)
    os.rename(staging, output_dir)
