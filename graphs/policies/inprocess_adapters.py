"""The LoRA adapters loaded on the in-process backend's model, by name.

The model run is the base model while no adapter is loaded and PEFT's wrapper of it while
any is: PEFT cannot run a forward pass with zero adapters, so the first load wraps the base
model and the last unload unwraps it. On CPU (float32 or bfloat16) an ``AdapterMerger`` merges
the adapter of single-adapter batches (``graphs.policies.adapter_switch``), except on a batch-
invariant model (``graphs.policies.batch_invariant``): there a merge would change a row's
arithmetic with the other rows' adapters, so adapters stay unmerged, in the model's precision
(PEFT would otherwise keep bfloat16 adapters in float32, and its mixed-adapter path rounds
their output to bfloat16 where its single-adapter path does not), and their linear layers
multiply fixed numbers of rows like the model's. Loading and unloading
run on the backend's worker thread, between batches; the names loaded are also read from the
event loop, under a lock.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from peft import PeftConfig, PeftModelForCausalLM

from graphs.policies.adapter_folder import (
    CONFIG_FILE,
    AdapterFolderError,
    check_loaded_keys,
    check_weights,
    is_size_mismatch,
    load_failure,
    read_lora_config,
)
from graphs.policies.adapter_switch import AdapterSwitch
from graphs.policies.base import BackendError, UnknownAdapterError
from graphs.policies.batch_invariant import fix_rows
from graphs.policies.lora_merge import AdapterMerger


class LoadedAdapters:
    """The model to run and the adapters loaded on it, each from one folder."""

    def __init__(self, model: torch.nn.Module, *, model_name: str, batch_invariant: bool = False) -> None:
        """``batch_invariant``: ``model`` went through ``make_batch_invariant``; so do the adapters."""
        self.model: torch.nn.Module = model.eval()
        """The base model, or PEFT's wrapper of it while adapters are loaded."""
        self.merger: AdapterMerger | None = None
        """With the wrapper on CPU in float32 or bfloat16: merges the adapter of single-adapter batches."""
        self._model_name = model_name
        self._invariant = batch_invariant
        self._peft: PeftModelForCausalLM | None = None
        self._paths: dict[str, Path] = {}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._paths)

    def path(self, name: str) -> Path:
        """The folder adapter ``name`` was loaded from (UnknownAdapterError if it is not loaded)."""
        with self._lock:
            found = self._paths.get(name)
        if found is None:
            self.check(name)  # raises, listing what is loaded
        return found

    def check(self, name: str) -> None:
        """Raise UnknownAdapterError, listing the loaded adapters, unless ``name`` is loaded."""
        with self._lock:
            if name in self._paths:
                return
            loaded = ", ".join(sorted(self._paths)) or "none"
        raise UnknownAdapterError(
            f"adapter {name!r} is not loaded on the in-process backend ({self._model_name}); "
            f"loaded adapters: {loaded}. Load it first with load_adapter(name, path)."
        )

    def switch(self) -> AdapterSwitch:
        """A set-up of the model for one batch's adapters."""
        return AdapterSwitch(self._peft, self.merger)

    def load(self, name: str, path: Path) -> None:
        """Load the adapter folder ``path`` as ``name`` (worker thread, no batch running); the
        same folder again is a no-op. A failure leaves the model as it was."""
        known = self._paths.get(name)
        if known is not None:
            if known == path:
                return
            raise BackendError(
                f"adapter {name!r} is already loaded from {known}; adapter names are immutable, "
                f"so load {path} under a new name (the next version)."
            )
        config = _lora_config(path)
        created = self._peft is None
        if self.merger is not None:
            self.merger.unmerge()
        try:
            autocast = not self._invariant
            if self._peft is None:
                self._peft = PeftModelForCausalLM(self.model, config, adapter_name=name,
                                                  autocast_adapter_dtype=autocast)
                self.model = self._peft
                # float16 would need its own rounding (lora_merge); GPUs keep no copy of the weights
                base = self._peft.get_base_model()
                merge = base.device.type == "cpu" and base.dtype in (torch.float32, torch.bfloat16)
                self.merger = AdapterMerger(self._peft) if merge and not self._invariant else None
            result = self._peft.load_adapter(str(path), adapter_name=name, autocast_adapter_dtype=autocast)
            check_loaded_keys(name, result.missing_keys, result.unexpected_keys)
            if self._invariant:
                fix_rows(self.model)
        except Exception as exc:
            self._remove(name, created)
            # a size mismatch is summed up in the message: chained, its full text would show in tracebacks
            cause = None if is_size_mismatch(exc) else exc
            raise BackendError(
                f"could not load adapter folder {path} as {name!r} on {self._model_name}: "
                f"{load_failure(exc, getattr(config, 'r', None))}. Check that it is a LoRA adapter trained for "
                "this base model."
            ) from cause
        self.model.eval()  # new LoRA modules (dropout) start in training mode
        with self._lock:
            self._paths[name] = path

    def unload(self, name: str) -> None:
        self.check(name)
        self._remove(name, last=len(self._paths) == 1)
        with self._lock:
            del self._paths[name]

    def close(self) -> None:
        """Let go of the model (the backend is closed)."""
        self.model = self._peft = self.merger = None  # type: ignore[assignment]

    def _remove(self, name: str, last: bool) -> None:
        """Remove ``name`` from the model; when no adapter is left, unwrap the base model."""
        if self._peft is None:
            return
        if self.merger is not None:
            self.merger.unmerge()
            self.merger.forget(name)
        if last:
            self.model = self._peft.unload()
            self._peft = self.merger = None
        elif name in self._peft.peft_config:
            self._peft.delete_adapter(name)


def _lora_config(path: Path) -> PeftConfig:
    """The folder's LoRA config for inference, or a BackendError naming what is missing or wrong."""
    label = f"adapter folder {path}"
    if not path.is_dir():
        raise BackendError(f"{label} does not exist (or is not a folder)")
    try:
        read_lora_config(path, label=label)
        check_weights(path, label=label, pickled_ok=True)
    except AdapterFolderError as exc:
        raise BackendError(str(exc)) from exc
    try:
        config = PeftConfig.from_pretrained(str(path))
    except Exception as exc:
        raise BackendError(f"{label}: {CONFIG_FILE} is not a valid PEFT config: {exc}") from exc
    config.inference_mode = True
    return config
