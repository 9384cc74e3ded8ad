"""The command line of a vLLM server that sparring can deploy adapters to: runtime LoRA loading
on, room for each role's adapters, a rank limit vLLM accepts. `sparring vllm` prints or runs it;
the benchmarks start one with it."""

from __future__ import annotations

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
