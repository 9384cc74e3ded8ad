"""`sparring vllm`: the vLLM server command line that sparring's settings need, printed or run."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import typer

from app.commands.common import err, fail, settings_or_exit
from app.vllm_server import CPU_KV_CACHE_GIB, vllm_command


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
