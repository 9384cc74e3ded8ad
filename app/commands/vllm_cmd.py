"""`sparring vllm`: the vLLM server command line that sparring's settings need, printed or run."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from app.commands.common import err, fail, settings_or_exit

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM 0.32 accepts for --max-lora-rank."""
ADAPTERS_PER_ROLE = 2
"""A role's active version and the candidate evaluated against it are loaded at once."""
CPU_KV_CACHE_GIB = "4"
"""VLLM_CPU_KVCACHE_SPACE unless set: without it a CPU build of vLLM reserves 92% of the NUMA
node's memory and refuses to start while other processes hold a few GB.
GPU builds ignore it."""


def vllm_command(
    *,
    python: str,
    model: str,
    served_name: str,
    roles: int,
    lora_rank: int,
    host: str,
    port: int,
    extra: tuple[str, ...] = (),
    cpu_kv_cache_gib: str = CPU_KV_CACHE_GIB,
) -> tuple[dict[str, str], list[str]]:
    """The environment variables and argv of a vLLM server that sparring can deploy adapters to.

    Runtime LoRA loading is switched on (``/v1/load_lora_adapter``), with room for
    ``ADAPTERS_PER_ROLE`` adapters per role and a rank limit of ``lora_rank`` rounded up to a
    value vLLM accepts, and a KV cache of ``cpu_kv_cache_gib`` on CPU builds. ``extra`` options
    go last, so they can override any of ours.
    """
    if roles < 1:
        raise ValueError(f"roles must be >= 1, got {roles}")
    rank = next((r for r in VLLM_LORA_RANKS if r >= lora_rank), None)
    if rank is None:
        raise ValueError(f"LoRA rank {lora_rank} is above vLLM's largest --max-lora-rank ({VLLM_LORA_RANKS[-1]})")
    argv = [
        python, "-m", "vllm.entrypoints.openai.api_server",  # `vllm serve` needs the dist named vllm, not vllm-cpu
        "--model", model,
        "--served-model-name", served_name,
        "--enable-lora",
        "--max-loras", str(roles * ADAPTERS_PER_ROLE),
        "--max-lora-rank", str(rank),
        "--host", host,
        "--port", str(port),
        *extra,
    ]  # fmt: skip
    return {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_CPU_KVCACHE_SPACE": cpu_kv_cache_gib}, argv


def shell_line(env: dict[str, str], argv: list[str]) -> str:
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(argv)])


def learner_roles() -> list[str]:
    """Every learner seat of every game: each may get an adapter."""
    from graphs.registry import game_registry
    from graphs.seats import SeatKind

    return sorted({s.name for g in game_registry().values() for s in g.seats if s.kind == SeatKind.LEARNER})


def vllm(
    extra: Annotated[
        list[str] | None, typer.Argument(help="Further vLLM options, after `--` (e.g. -- --max-model-len 2048).")
    ] = None,
    start: Annotated[bool, typer.Option("--start", help="Run the server (in place of this process).")] = False,
    python: Annotated[
        str | None, typer.Option(help="Python of the vLLM venv (default: SPARRING_VLLM_VENV's bin/python).")
    ] = None,
    roles: Annotated[
        str | None, typer.Option(help="Comma-separated roles that get adapters (default: every learner seat).")
    ] = None,
    max_lora_rank: Annotated[
        int | None, typer.Option(min=1, help="Largest adapter rank (default: the trainers' LoRA rank).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on (default: SPARRING_VLLM_URL's).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: SPARRING_VLLM_URL's).")] = None,
) -> None:
    """Print the command line of a vLLM server for the configured base model and roles;
    with --start, run it.

    The bundled model is served from its converted safetensors folder. Use the server with
    `SPARRING_BACKEND=vllm`; sparring loads adapters into it at runtime. Create the vLLM venv
    with `scripts/setup-vllm` (CPU), or install vLLM for your GPU and pass --python.

    Examples:

    * `sparring vllm`
    * `sparring vllm --start -- --max-model-len 2048 --dtype bfloat16`
    * `SPARRING_VLLM_URL=http://0.0.0.0:8001/v1 sparring vllm --roles actor,critic --python /opt/vllm/bin/python`
    """
    from graphs.policies.base_models import ModelLoadError, resolve_model
    from training.trainers.lora import LoraSettings

    settings = settings_or_exit()
    url = urlsplit(settings.vllm_url)
    role_names = [r.strip() for r in roles.split(",") if r.strip()] if roles else learner_roles()
    python = python or str(settings.vllm_venv / "bin" / "python")
    if start and not Path(python).is_file():
        fail(f"no vLLM python at {python}: run scripts/setup-vllm (CPU) or pass --python /path/to/vllm/venv/bin/python")
    try:
        with err.status(f"preparing model {settings.model}…"):
            model = resolve_model(settings.model, settings.cache_dir)
        env, argv = vllm_command(
            python=python,
            model=str(model),
            served_name=settings.served_model,
            roles=len(role_names),
            lora_rank=max_lora_rank or LoraSettings().r,
            host=host or url.hostname or "127.0.0.1",
            port=port or url.port or 8000,
            extra=tuple(extra or ()),
            cpu_kv_cache_gib=os.environ.get("VLLM_CPU_KVCACHE_SPACE", CPU_KV_CACHE_GIB),
        )
    except (ModelLoadError, ValueError) as exc:
        fail(str(exc))
    line = shell_line(env, argv)
    if not start:
        print(line)
        return
    err.print(line, highlight=False, markup=False, soft_wrap=True)
    os.execve(python, argv, {**os.environ, **env})
