"""Writing adapter folders and keeping them: a trainer's output folder with its ``sparring.json``,
and the registry's published copies of it, checked later to be intact.

A trainer first checks its parent adapter and that its output folder is free (``prepare_run``),
then writes PEFT's files (``adapter_config.json``, ``adapter_model.safetensors``) and
``sparring.json`` (``AdapterMetadata``: the role, the trainer kind, the base model as configured
(``"bundled"``, a folder or a hub id), the parent adapter, the trainer's config, its final metrics
and the dataset snapshot id) to a temporary sibling folder (``staging_dir``), and renames it into
place when complete (``write_adapter``), so a folder that exists is whole.

The registry publishes such a folder as ``<adapters_root>/<role>@v<N>``. It appears by one
rename of a complete, fsynced temporary folder ``<adapters_root>/.tmp-<hex>`` (``stage``,
``place``), so nobody ever sees it half-written, and it is never overwritten: a rename onto an
existing folder fails instead. Each published folder holds ``SHA256SUMS`` (the format of
``sha256sum``, so ``sha256sum -c SHA256SUMS`` checks it by hand too), against which
``verify_folder`` finds files deleted, truncated or overwritten after publishing.

What makes a folder a LoRA adapter (its file names and checks) is
``graphs.policies.adapter_folder``'s, which the in-process backend loads by. The trainers' errors
and the base-model lookup are imported in the functions that need them: both load torch, which
the registry's side (every command's clean-up, ``sparring adapters``) does without.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphs.policies.adapter_folder import (
    CHECKSUMS_FILE,
    CONFIG_FILE,
    METADATA_FILE,
    WEIGHTS_FILE,
    AdapterFolderError,
    check_weights,
    read_lora_config,
)

if TYPE_CHECKING:
    from peft import PeftModel

    from training.trainers.base_config import TrainingConfig

METADATA_FORMAT = 1
TMP_PREFIX = ".tmp-"
STALE_TMP_S = 3600.0
"""A temporary folder untouched for this long was left by a publish that crashed (a running
publish writes to its folder continuously, and renames it within seconds)."""
_ROLE = r"[A-Za-z0-9][A-Za-z0-9_-]*"
ROLE_PATTERN = re.compile(_ROLE)
NAME_PATTERN = re.compile(rf"(?P<role>{_ROLE})@v(?P<version>[1-9][0-9]*)")
"""``role@vN``: the immutable name of a published version, and its folder's name."""
_CHUNK = 1 << 20


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
    from training.trainers.errors import AdapterError

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
    from training.trainers.errors import TrainerError

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
    from training.trainers.errors import AdapterError, AdapterMismatchError

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
    from graphs.policies.base_models import ModelLoadError, resolve_model

    try:
        return str(resolve_model(model, cache_dir))
    except ModelLoadError:
        return model


def prepare_output_dir(output_dir: Path) -> Path:
    """Refuse an output folder that holds files (an adapter is never overwritten)."""
    from training.trainers.errors import OutputExistsError

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


def version_name(role: str, version: int) -> str:
    return f"{role}@v{version}"


def check_trained_folder(folder: Path, *, base_model: str) -> None:
    """Check that a trainer's output folder holds a complete LoRA adapter for ``base_model``."""
    label = f"trained adapter folder {folder}"
    if not folder.is_dir():
        raise AdapterFolderError(
            f"{label} does not exist or is not a folder: pass the folder the trainer saved the adapter to "
            f"(its output_dir, holding {CONFIG_FILE} and {WEIGHTS_FILE})"
        )
    _check_adapter(folder, base_model=base_model, label=label, fix="Train the adapter again.")


def stage(trained_dir: Path, adapters_root: Path, *, base_model: str) -> Path:
    """Copy a checked trainer's output folder into a new temporary folder under
    ``adapters_root``, with SHA256SUMS, every file and the folder fsynced, and check the copy
    (the trainer may have changed the folder meanwhile). The folder is removed if anything fails.

    Only the files at the top of ``trained_dir`` are copied: its sub-folders hold trainer
    state (``checkpoint-*``), not the adapter.
    """
    tmp = adapters_root / f"{TMP_PREFIX}{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        files = sorted(p for p in trained_dir.iterdir() if p.is_file() and p.name != CHECKSUMS_FILE)
        sums = {source.name: _copy_file(source, tmp / source.name) for source in files}
        listing = "".join(f"{digest}  {name}\n" for name, digest in sorted(sums.items()))
        _write_synced(tmp / CHECKSUMS_FILE, listing.encode())
        _fsync_dir(tmp)
        _check_adapter(
            tmp,
            base_model=base_model,
            label=f"the copy of {trained_dir}",
            fix="Was the trainer still writing it? Publish once training has finished.",
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def place(staged: Path, final: Path) -> bool:
    """Rename ``staged`` to ``final`` unless ``final`` exists already (False then), and make
    the rename durable before anything refers to it; if that fails, ``final`` is removed."""
    try:
        os.rename(staged, final)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False
        raise
    try:
        _fsync_dir(final.parent)
    except BaseException:
        discard(final)
        raise
    return True


def withdraw(folder: Path) -> Path:
    """Rename a folder that no row refers to back to a fresh temporary name."""
    tmp = folder.with_name(f"{TMP_PREFIX}{uuid.uuid4().hex}")
    os.rename(folder, tmp)
    return tmp


def discard(folder: Path) -> None:
    """Remove a folder that no row refers to (a trainer's staging folder too). It is renamed to
    a temporary name first, so that a crash halfway leaves a ``.tmp-*`` folder (removed later),
    never a half-deleted ``role@vN``."""
    try:
        folder = withdraw(folder)
    except OSError:
        pass
    shutil.rmtree(folder, ignore_errors=True)


def remove_stale_temporaries(adapters_root: Path) -> None:
    """Remove the temporary folders that crashed publishes left behind; younger ones may
    belong to publishes running now in other processes."""
    now = time.time()
    for tmp in adapters_root.glob(f"{TMP_PREFIX}*"):
        try:
            newest = max([tmp.stat().st_mtime, *(entry.stat().st_mtime for entry in tmp.iterdir())])
        except OSError:  # removed meanwhile, or not a folder
            continue
        if now - newest > STALE_TMP_S:
            shutil.rmtree(tmp, ignore_errors=True)


def highest_version_on_disk(adapters_root: Path, role: str) -> int:
    """The highest N of the ``role@vN`` folders in ``adapters_root`` (0 if none), registered
    or not: a folder left by a crash between rename and registration keeps its number."""
    versions = [0]
    for entry in adapters_root.iterdir():
        match = NAME_PATTERN.fullmatch(entry.name)
        if match and match["role"] == role:
            versions.append(int(match["version"]))
    return max(versions)


def verify_folder(path: Path, *, base_model: str, status: str | None = None) -> None:
    """Check that a published adapter folder is still there and unchanged: every file listed
    in its SHA256SUMS has that checksum, and it is a LoRA adapter for ``base_model``.

    Raises AdapterFolderError naming the version and how to recover, which depends on the
    version's registry ``status``: a candidate is set aside (``adapters reject``), the active
    version is rolled back from (``adapters rollback``); both are offered when it is not given.
    """
    match = NAME_PATTERN.fullmatch(path.name)
    label = f"adapter {path.name}" if match else f"adapter folder {path}"
    fix = f"Restore {path} from a backup" + (_other_fix(path.name, match["role"], status) if match else "") + "."
    if not path.is_dir():
        raise AdapterFolderError(f"{label}: the folder {path} is missing (deleted or moved after publishing). {fix}")
    for name, digest in _read_checksums(path, label=label, fix=fix).items():
        file = path / name
        if not file.is_file():
            raise AdapterFolderError(f"{label}: {name} is missing from {path}. {fix}")
        if _sha256(file) != digest:
            raise AdapterFolderError(
                f"{label}: {name} in {path} has changed since publishing (checksum mismatch: "
                f"truncated, overwritten or corrupted). {fix}"
            )
    _check_adapter(path, base_model=base_model, label=label, fix=fix)


def _other_fix(name: str, role: str, status: str | None) -> str:
    reject = f"set the candidate aside: `sparring adapters reject {name}`"
    rollback = f"go back to the previous version: `sparring adapters rollback {role}`"
    if status == "candidate":
        return f", or {reject}"
    if status == "active":
        return f", or {rollback}"
    if status is None:
        return f"; if it is a candidate, {reject}; if it is the active version, {rollback}"
    return ""  # retired or rejected: nothing plays it unless asked for by name


def _check_adapter(folder: Path, *, base_model: str, label: str, fix: str) -> None:
    """A LoRA adapter in safetensors for exactly ``base_model`` (the name the trainer recorded)."""
    config = read_lora_config(folder, label=label, fix=fix)
    recorded = config.get("base_model_name_or_path")
    if recorded != base_model:
        raise AdapterFolderError(
            f"{label} holds an adapter for the base model {recorded!r} ({CONFIG_FILE}, "
            f"base_model_name_or_path), not for {base_model!r}; a LoRA adapter only works on the "
            f"base model it was trained on. Use it with {recorded!r}, or train one on {base_model!r} "
            "(the trainer records the name the base model was loaded by)."
        )
    check_weights(folder, label=label, fix=fix)


def _read_checksums(folder: Path, *, label: str, fix: str) -> dict[str, str]:
    try:
        lines = (folder / CHECKSUMS_FILE).read_text().splitlines()
    except FileNotFoundError as exc:
        raise AdapterFolderError(
            f"{label}: {folder} has no {CHECKSUMS_FILE}, which every published folder has: it was "
            f"deleted, or the folder was not written by the registry. {fix}"
        ) from exc
    sums: dict[str, str] = {}
    for line in lines:
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise AdapterFolderError(f"{label}: {folder / CHECKSUMS_FILE} is damaged (line {line!r}). {fix}")
        sums[name] = digest
    return sums


def _copy_file(source: Path, target: Path) -> str:
    """Copy one file, fsync it and return the SHA-256 of the bytes written."""
    digest = hashlib.sha256()
    with source.open("rb") as src, target.open("xb") as dst:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    return digest.hexdigest()


def _write_synced(target: Path, data: bytes) -> None:
    with target.open("xb") as dst:
        dst.write(data)
        dst.flush()
        os.fsync(dst.fileno())


def _sha256(file: Path) -> str:
    with file.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _fsync_dir(folder: Path) -> None:
    """Make a folder's entries (new files, a rename into it) durable. Windows cannot open a
    folder for this, and its renames need no such step."""
    if os.name == "nt":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
