"""What a LoRA adapter folder is: its files and the checks that it holds a usable adapter.

An adapter folder is what PEFT's ``save_pretrained`` writes: ``adapter_config.json`` (a LoRA
config naming its base model) and ``adapter_model.safetensors`` (older PEFT:
``adapter_model.bin``). sparring's trainers add ``sparring.json`` (the adapter's lineage) and a
published folder adds ``SHA256SUMS``; ``training.adapter_folders`` writes both and reads them back.

This module is the one place that knows those names and checks a folder against them; the
in-process backend (loading), the trainers (a parent adapter), the registry (publishing and
verifying) and the export use it. It lives under ``graphs.policies`` because the backend needs
it and ``graphs`` never imports ``training``, while ``training`` already imports
``graphs.policies`` (``base_models.py``, finding and loading the base model, sits beside it).

Each check raises ``AdapterFolderError`` whose message starts with the caller's ``label`` (what
the folder is to it: "Parent adapter folder ...", "adapter critic@v3") and ends with its
``fix`` (what to do, which depends on the caller).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PICKLED_WEIGHTS_FILE = "adapter_model.bin"
"""PEFT's weights file without safe_serialization; the in-process backend still loads it."""
METADATA_FILE = "sparring.json"
CHECKSUMS_FILE = "SHA256SUMS"
LORA_TENSOR_MARK = "lora_"
"""Every LoRA tensor's name holds this (PEFT names them ``...q_proj.lora_A.weight``)."""


class AdapterFolderError(RuntimeError):
    """An adapter folder is missing, incomplete or not the adapter expected; the message names
    the folder, the problem and what to do."""


def read_lora_config(folder: Path, *, label: str, fix: str = "") -> dict[str, Any]:
    """The folder's ``adapter_config.json``, checked to be a JSON object of a LoRA adapter."""
    config_file = folder / CONFIG_FILE
    if not config_file.is_file():
        raise _error(
            f"{label} has no {CONFIG_FILE}: expected a PEFT adapter saved with save_pretrained "
            f"({CONFIG_FILE} and {WEIGHTS_FILE})",
            fix,
        )
    try:
        config = json.loads(config_file.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _error(f"{label}: {CONFIG_FILE} is not valid JSON ({exc})", fix) from exc
    if not isinstance(config, dict):
        raise _error(f"{label}: {CONFIG_FILE} is not a JSON object", fix)
    if config.get("peft_type") != "LORA":
        raise _error(
            f"{label}: {CONFIG_FILE} has peft_type {config.get('peft_type')!r}, not 'LORA'; sparring "
            "trains, publishes and serves LoRA adapters only",
            fix,
        )
    return config


def check_weights(folder: Path, *, label: str, fix: str = "", pickled_ok: bool = False) -> None:
    """Check that the folder's weights file is there, and, when it is a safetensors file, that
    it is readable and holds LoRA tensors (a pickled one, allowed by ``pickled_ok``, is only
    read by the loader)."""
    weights = folder / WEIGHTS_FILE
    if not weights.is_file():
        pickled = (folder / PICKLED_WEIGHTS_FILE).is_file()
        if pickled and pickled_ok:
            return
        hint = f" (it has {PICKLED_WEIGHTS_FILE}: save with safe_serialization=True)" if pickled else ""
        raise _error(f"{label} has no {WEIGHTS_FILE}{hint}", fix)
    try:
        with safe_open(str(weights), framework="numpy") as tensors:
            names = list(tensors.keys())
    except (SafetensorError, OSError) as exc:
        raise _error(
            f"{label}: {WEIGHTS_FILE} is not a readable safetensors file ({exc}); it may be truncated "
            "(an interrupted copy or save)",
            fix,
        ) from exc
    if not any(LORA_TENSOR_MARK in name for name in names):
        raise _error(
            f"{label}: {WEIGHTS_FILE} holds no LoRA tensors ({len(names)} tensor(s), none named "
            f"*{LORA_TENSOR_MARK}*)",
            fix,
        )


_SIZE_MISMATCH = re.compile(
    r"size mismatch for (?P<key>\S+): copying a param with shape torch\.Size\(\[(?P<found>[\d, ]*)\]\) from "
    r"checkpoint, the shape in current model is torch\.Size\(\[(?P<expected>[\d, ]*)\]\)"
)
MAX_ERROR_CHARS = 600


def is_size_mismatch(exc: BaseException) -> bool:
    """Whether loading the weights failed on tensor shapes (PyTorch's text lists every tensor:
    tens of kilobytes for a real model, so a caller summarises it rather than chaining it)."""
    return _SIZE_MISMATCH.search(str(exc)) is not None


def load_failure(exc: BaseException, rank: int | None) -> str:
    """One line on why PEFT could not load an adapter's weights into a base model: a size
    mismatch is counted, with its first tensor's shapes; other errors are cut to
    ``MAX_ERROR_CHARS``. ``rank`` is the ``r`` of the folder's config."""
    mismatches = list(_SIZE_MISMATCH.finditer(str(exc)))
    if mismatches:
        first = mismatches[0]
        return (
            f"{len(mismatches)} tensor(s) of its weights do not have the shapes that its {CONFIG_FILE} "
            f"(r={rank}) and the base model call for, e.g. {first['key']}: expected [{first['expected']}], found "
            f"[{first['found']}] (a rank r other than the one it was trained with, or an adapter for another "
            "base model)"
        )
    text = " ".join(f"{type(exc).__name__}: {str(exc).rstrip('.')}".split())
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def check_loaded_keys(adapter_name: str, missing: list[str], unexpected: list[str]) -> None:
    """Check what PEFT's ``load_adapter`` reports: it only warns when the weights file lacks
    tensors the adapter needs (they would stay randomly initialised); here that is an error,
    as are tensors that fit no module of the base model."""
    own = re.compile(rf"\.(lora_\w+|modules_to_save)\.{re.escape(adapter_name)}\.")
    missing = [k for k in missing if own.search(k)]
    if missing:
        raise AdapterFolderError(f"the weights file lacks {len(missing)} adapter tensor(s), e.g. {missing[0]}")
    if unexpected:
        raise AdapterFolderError(
            f"the weights file has {len(unexpected)} tensor(s) that fit no module, e.g. {unexpected[0]}"
        )


def _error(text: str, fix: str) -> AdapterFolderError:
    return AdapterFolderError(f"{text}. {fix}" if fix else text)
