"""The in-process backend on a tiny random Llama: batching, decoding, logprobs and adapters."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file
from tiny_model import save_random_lora, tiny_config, tiny_model, tiny_tokenizer
from transformers import LlamaForCausalLM, PreTrainedTokenizerBase

from graphs.policies.base import (
    Backend,
    BackendError,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    UnknownAdapterError,
)
from graphs.policies.inprocess import InProcessBackend
from graphs.policies.lora_merge import AdapterMerger
from graphs.policies.sampling import Sampler, nucleus_floor

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


PROMPTS = [
    chat("hi"),
    chat("What is 12 + 30? " * 3),
    chat("Tell me a story about a dragon and a knight."),
    chat("ok"),
]


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerBase:
    return tiny_tokenizer()


@pytest.fixture
def model(tokenizer: PreTrainedTokenizerBase) -> LlamaForCausalLM:
    return tiny_model(tokenizer)


@pytest.fixture
def backend(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase) -> Iterator[InProcessBackend]:
    backend = InProcessBackend(model, tokenizer, model_name="tiny", batch_wait_s=0.05)
    yield backend
    asyncio.run(backend.aclose())


@pytest.fixture(scope="module")
def adapter_dirs(
    tmp_path_factory: pytest.TempPathFactory, tokenizer: PreTrainedTokenizerBase
) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    base = tiny_model(tokenizer)
    return {name: save_random_lora(base, root / name, seed) for name, seed in (("a", 1), ("b", 2))}


def one(
    backend: InProcessBackend,
    messages: list[dict[str, str]],
    sampling: SamplingParams = GREEDY,
    adapter: str | None = None,
) -> GenerationResult:
    return asyncio.run(backend.generate(GenerationRequest(messages, sampling, adapter)))


def together(backend: InProcessBackend, requests: list[GenerationRequest]) -> list[GenerationResult]:
    async def go() -> list[GenerationResult]:
        return list(await asyncio.gather(*(backend.generate(r) for r in requests)))

    return asyncio.run(go())


def test_implements_the_backend_protocol(backend: InProcessBackend) -> None:
    assert isinstance(backend, Backend)
    assert (backend.name, backend.model_name) == ("inprocess", "tiny")


def test_concurrent_requests_share_batches(backend: InProcessBackend) -> None:
    requests = [GenerationRequest(PROMPTS[i % 4], replace(GREEDY, max_new_tokens=3 + i)) for i in range(12)]
    results = together(backend, requests)
    assert [len(r.completion_token_ids) for r in results] == [3 + i for i in range(12)]
    stats = backend.stats
    assert stats.requests == 12
    assert stats.batches <= 2 < stats.mean_batch_size
    assert stats.generated_tokens == sum(3 + i for i in range(12))
    assert stats.decode_steps < 2 * 14  # the batch ran once, not once per request


def test_greedy_row_is_the_same_alone_and_in_a_padded_batch(backend: InProcessBackend) -> None:
    alone = one(backend, PROMPTS[1])
    others = [
        GenerationRequest(p, replace(GREEDY, max_new_tokens=n))
        for p, n in zip(PROMPTS, (2, 20, 5, 1), strict=True)
    ]
    batched = together(backend, [*others[:2], GenerationRequest(PROMPTS[1], GREEDY), *others[2:]])[2]
    assert batched.completion_token_ids == alone.completion_token_ids
    assert batched.text == alone.text
    assert batched.prompt_token_ids == alone.prompt_token_ids
    assert batched.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


def test_greedy_matches_transformers_generate(backend: InProcessBackend, model, tokenizer) -> None:
    result = one(backend, PROMPTS[2])
    prompt = torch.tensor([result.prompt_token_ids])
    reference = model.generate(
        prompt, do_sample=False, max_new_tokens=GREEDY.max_new_tokens, pad_token_id=tokenizer.pad_token_id
    )
    assert result.completion_token_ids == reference[0, prompt.shape[1] :].tolist()
    assert result.finish_reason == "length"
    assert result.served_by == "tiny"
    assert result.latency_s > 0


def test_seeded_sampling_is_reproducible_whatever_shares_the_batch(backend: InProcessBackend) -> None:
    seeded = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=16, seed=7)
    alone = one(backend, PROMPTS[0], seeded)
    crowd = [
        GenerationRequest(PROMPTS[1], SamplingParams(temperature=0.8, max_new_tokens=4)),
        GenerationRequest(PROMPTS[0], seeded),
        GenerationRequest(PROMPTS[2], GREEDY),
        GenerationRequest(PROMPTS[3], SamplingParams(temperature=1.5, top_p=0.5, max_new_tokens=30, seed=1)),
    ]
    assert together(backend, crowd)[1].completion_token_ids == alone.completion_token_ids
    other_seed = one(backend, PROMPTS[0], replace(seeded, seed=8))
    assert other_seed.completion_token_ids != alone.completion_token_ids


@pytest.mark.parametrize(
    "sampling", [GREEDY, SamplingParams(temperature=1.3, top_p=0.8, max_new_tokens=10, seed=3)]
)
def test_logprobs_are_the_raw_log_softmax_at_the_chosen_tokens(backend, model, sampling) -> None:
    result = together(
        backend, [GenerationRequest(PROMPTS[3], sampling), GenerationRequest(PROMPTS[1], GREEDY)]
    )[0]
    ids = torch.tensor([result.prompt_token_ids + result.completion_token_ids])
    with torch.inference_mode():
        logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    n = len(result.prompt_token_ids)
    positions = torch.arange(n - 1, ids.shape[1] - 1)
    expected = logp[positions, ids[0, n:]]
    assert result.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    if sampling.temperature == 0:
        assert logp[positions].argmax(-1).tolist() == result.completion_token_ids


P = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03])


@pytest.mark.parametrize(
    ("temperature", "top_p", "expected"),
    [(1.0, 1.0, P), (1.0, 0.8, torch.cat([P[:3] / 0.9, torch.zeros(2)])), (0.5, 1.0, P**2 / (P**2).sum())],
    ids=["plain", "top-p", "temperature"],
)
def test_sampling_follows_the_tempered_nucleus_distribution(temperature, top_p, expected) -> None:
    n = 4000
    sampler = Sampler([SamplingParams(temperature, top_p, seed=i) for i in range(n)], torch.device("cpu"))
    tokens, logprobs = sampler(P.log().expand(n, -1))
    frequencies = torch.bincount(tokens, minlength=len(P)).float() / n
    assert frequencies.tolist() == pytest.approx(expected.tolist(), abs=0.03)
    assert logprobs.tolist() == pytest.approx(P.log()[tokens].tolist(), abs=1e-5)  # before temperature


@pytest.mark.parametrize("spread", [0.3, 5.0], ids=["flat: wider than the candidates", "peaked"])
def test_nucleus_matches_a_full_sort(spread: float) -> None:
    torch.manual_seed(0)
    probs = torch.softmax(torch.randn(32, 5000) * spread, dim=-1)
    top_p = torch.rand(32, 1) * 0.9 + 0.05
    top_p[0] = 1.0
    ordered = probs.sort(dim=-1, descending=True).values
    expected_sizes = ((ordered.cumsum(dim=-1) - ordered) < top_p).sum(dim=-1)
    expected_sizes[0] = probs.shape[-1]
    assert torch.equal((probs >= nucleus_floor(probs, top_p)).sum(dim=-1), expected_sizes)


def test_eos_ends_a_completion_and_is_left_out(backend: InProcessBackend, model) -> None:
    full = one(backend, PROMPTS[2])
    k = next(
        i
        for i, t in enumerate(full.completion_token_ids)
        if i >= 2 and t not in full.completion_token_ids[:i]
    )
    model.generation_config.eos_token_id = [
        model.generation_config.eos_token_id,
        full.completion_token_ids[k],
    ]
    cut = one(backend, PROMPTS[2])
    assert cut.finish_reason == "stop"
    assert cut.completion_token_ids == full.completion_token_ids[:k]
    assert len(cut.logprobs) == k


def test_stop_string_cuts_the_text_before_it(backend: InProcessBackend) -> None:
    full = one(backend, PROMPTS[0], replace(GREEDY, max_new_tokens=20))
    stop = full.text[len(full.text) // 2 : len(full.text) // 2 + 3]
    result = one(backend, PROMPTS[0], replace(GREEDY, max_new_tokens=20, stop=("@@never@@", stop)))
    assert result.finish_reason == "stop"
    assert result.text == full.text[: full.text.find(stop)]
    ids = result.completion_token_ids
    assert ids == full.completion_token_ids[: len(ids)] and len(ids) < 20
    assert len(result.logprobs) == len(ids)


def test_max_new_tokens_ends_with_length(backend: InProcessBackend) -> None:
    results = together(
        backend, [GenerationRequest(PROMPTS[0], replace(GREEDY, max_new_tokens=n)) for n in (1, 7)]
    )
    assert [(len(r.completion_token_ids), r.finish_reason) for r in results] == [(1, "length"), (7, "length")]


def reference_generate(
    tokenizer, adapter_dirs, adapter: str | None, prompt_ids: list[int], n: int
) -> list[int]:
    """Greedy ``generate`` on a PeftModel with only ``set_adapter`` (or the adapters disabled)."""
    peft = PeftModel.from_pretrained(tiny_model(tokenizer), str(adapter_dirs["a"]), adapter_name="a")
    peft.load_adapter(str(adapter_dirs["b"]), adapter_name="b")
    prompt = torch.tensor([prompt_ids])
    kwargs = dict(do_sample=False, max_new_tokens=n, pad_token_id=tokenizer.pad_token_id)
    if adapter is None:
        with peft.disable_adapter():
            out = peft.generate(input_ids=prompt, **kwargs)
    else:
        peft.set_adapter(adapter)
        out = peft.generate(input_ids=prompt, **kwargs)
    return out[0, prompt.shape[1] :].tolist()


def test_mixed_adapters_share_a_batch_and_match_single_adapter_runs(backend, tokenizer, adapter_dirs) -> None:
    asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))
    asyncio.run(backend.load_adapter("b", str(adapter_dirs["b"])))
    assert backend.adapters() == ["a", "b"]
    plan = [("a", PROMPTS[1]), ("b", PROMPTS[0]), (None, PROMPTS[2]), ("a", PROMPTS[3]), ("b", PROMPTS[1])]
    batches_before = backend.stats.batches
    results = together(backend, [GenerationRequest(p, GREEDY, adapter) for adapter, p in plan])
    assert backend.stats.batches == batches_before + 1
    for (adapter, _), result in zip(plan, results, strict=True):
        assert result.served_by == (adapter or "tiny")
        expected = reference_generate(
            tokenizer, adapter_dirs, adapter, result.prompt_token_ids, GREEDY.max_new_tokens
        )
        assert result.completion_token_ids == expected
    # The adapters really change the output (else the test above proves nothing).
    same_prompt = together(backend, [GenerationRequest(PROMPTS[1], GREEDY, a) for a in ("a", "b", None)])
    assert len({tuple(r.completion_token_ids) for r in same_prompt}) == 3


def test_single_adapter_batches_switch_adapters_and_match_single_adapter_runs(
    backend, tokenizer, adapter_dirs
) -> None:
    """A batch of one adapter, or of the base model alone, takes PEFT's plain path (the active
    adapter set, or the adapters disabled); the next batch may need another."""
    asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))
    asyncio.run(backend.load_adapter("b", str(adapter_dirs["b"])))
    for adapter in ("b", None, "a", "b", None):
        batches_before = backend.stats.batches
        results = together(backend, [GenerationRequest(p, GREEDY, adapter) for p in PROMPTS[:3]])
        assert backend.stats.batches == batches_before + 1
        for result in results:
            assert result.served_by == (adapter or "tiny")
            expected = reference_generate(
                tokenizer, adapter_dirs, adapter, result.prompt_token_ids, GREEDY.max_new_tokens
            )
            assert result.completion_token_ids == expected, adapter


def test_merged_adapters_leave_the_base_weights_exactly_as_they_were(backend, model, adapter_dirs) -> None:
    """On CPU a single-adapter batch runs with its adapter merged into the base weights;
    switching and unloading restore them bit for bit (no round-off from subtracting)."""
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    plain = one(backend, PROMPTS[0])
    asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))
    asyncio.run(backend.load_adapter("b", str(adapter_dirs["b"])))
    for adapter in ("a", "b", "a", None, "b"):
        result = one(backend, PROMPTS[0], adapter=adapter)
        if adapter is None:  # the base model again, after two merges and unmerges
            assert (result.completion_token_ids, result.logprobs) == (plain.completion_token_ids, plain.logprobs)
    asyncio.run(backend.unload_adapter("a"))
    asyncio.run(backend.unload_adapter("b"))
    assert backend.model is model
    assert all(torch.equal(p, weights[name]) for name, p in model.named_parameters())


def test_unknown_adapter_is_refused_with_the_loaded_ones(backend, adapter_dirs) -> None:
    asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))
    with pytest.raises(UnknownAdapterError, match=r"'nope'.*loaded adapters: a"):
        one(backend, PROMPTS[0], adapter="nope")


def test_loading_the_same_name_again(backend, adapter_dirs) -> None:
    asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))
    asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))  # same path: no-op
    with pytest.raises(BackendError, match="already loaded"):
        asyncio.run(backend.load_adapter("a", str(adapter_dirs["b"])))
    assert backend.adapters() == ["a"]


def broken_adapters(root: Path, good: Path, tokenizer) -> dict[str, Path]:
    def copy(name: str) -> Path:
        return Path(shutil.copytree(good, root / name))

    folders = {"missing folder": root / "nowhere"}
    folders["no adapter_config.json"] = copy("no-config")
    (folders["no adapter_config.json"] / "adapter_config.json").unlink()
    folders["no weights"] = copy("no-weights")
    (folders["no weights"] / "adapter_model.safetensors").unlink()
    folders["other architecture"] = copy("other-arch")
    config_file = folders["other architecture"] / "adapter_config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "target_modules": ["c_attn"]}))
    bigger = tiny_config(tokenizer)
    bigger.hidden_size = 128
    folders["other shapes"] = save_random_lora(LlamaForCausalLM(bigger), root / "other-shapes", seed=5)
    folders["garbage weights"] = copy("garbage")
    (folders["garbage weights"] / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    folders["renamed tensors"] = copy("renamed")
    weights = folders["renamed tensors"] / "adapter_model.safetensors"
    save_file({k.replace("lora_A", "lora_X"): v for k, v in load_file(weights).items()}, weights)
    return folders


@pytest.mark.parametrize("with_other_adapter", [False, True], ids=["first adapter", "second adapter"])
def test_broken_adapter_folders_fail_and_leave_the_backend_usable(
    backend, tokenizer, adapter_dirs, tmp_path, with_other_adapter
) -> None:
    if with_other_adapter:
        asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))
        before_a = one(backend, PROMPTS[1], adapter="a")
    before = one(backend, PROMPTS[1])
    for problem, folder in broken_adapters(tmp_path, adapter_dirs["a"], tokenizer).items():
        with pytest.raises(BackendError, match=str(folder.name)) as error:
            asyncio.run(backend.load_adapter("broken", str(folder)))
        assert not isinstance(error.value, UnknownAdapterError), problem
        assert backend.adapters() == (["a"] if with_other_adapter else []), problem
        assert one(backend, PROMPTS[1]).completion_token_ids == before.completion_token_ids, problem
    if with_other_adapter:
        assert one(backend, PROMPTS[1], adapter="a").completion_token_ids == before_a.completion_token_ids
    asyncio.run(backend.load_adapter("b", str(adapter_dirs["b"])))
    assert "b" in backend.adapters()


def test_unload_waits_for_queued_requests_then_refuses_the_adapter(backend, adapter_dirs) -> None:
    before = one(backend, PROMPTS[2])
    asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))

    async def serve_then_unload() -> list[GenerationResult]:
        running = [asyncio.create_task(backend.generate(GenerationRequest(p, GREEDY, "a"))) for p in PROMPTS]
        await asyncio.sleep(0)  # the requests are queued before the unload
        await backend.unload_adapter("a")
        return list(await asyncio.gather(*running))

    served = asyncio.run(serve_then_unload())
    assert [r.served_by for r in served] == ["a"] * len(PROMPTS)
    assert backend.adapters() == []
    with pytest.raises(UnknownAdapterError):
        one(backend, PROMPTS[2], adapter="a")
    with pytest.raises(UnknownAdapterError):
        asyncio.run(backend.unload_adapter("a"))
    assert one(backend, PROMPTS[2]).completion_token_ids == before.completion_token_ids


def test_a_failing_batch_fails_its_requests_and_the_worker_goes_on(backend, model) -> None:
    def explode(module, args, kwargs):
        raise RuntimeError("simulated forward failure")

    hook = model.register_forward_pre_hook(explode, with_kwargs=True)
    results = asyncio.run(_gather_settled(backend, [GenerationRequest(p, GREEDY) for p in PROMPTS[:3]]))
    assert all(isinstance(r, BackendError) and "simulated forward failure" in str(r) for r in results)
    hook.remove()
    assert len(one(backend, PROMPTS[0]).completion_token_ids) == GREEDY.max_new_tokens


async def _gather_settled(backend: InProcessBackend, requests: list[GenerationRequest]) -> list[object]:
    return list(await asyncio.gather(*(backend.generate(r) for r in requests), return_exceptions=True))


# ------------------------------------------------------------------------ continuous batching


@pytest.fixture
def joining(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerBase) -> Iterator[InProcessBackend]:
    """A backend that lets every queued request join the running batch at the next step, on a
    model slowed to 3 ms a forward pass so that requests surely arrive while a batch runs."""
    hook = model.register_forward_pre_hook(lambda module, args: time.sleep(0.003))
    backend = InProcessBackend(model, tokenizer, model_name="tiny", batch_wait_s=0.0, join_rows=1, join_wait_steps=0)
    yield backend
    asyncio.run(backend.aclose())
    hook.remove()


async def _once_running(backend: InProcessBackend, steps: int) -> None:
    """Wait until the backend has run ``steps`` forward passes (a batch is running)."""
    while backend.stats.decode_steps < steps:
        await asyncio.sleep(0.001)


def _staggered(backend: InProcessBackend, first: GenerationRequest, later: list[GenerationRequest]):
    """Serve ``first`` alone, then send each of ``later`` two steps apart while it runs;
    returns the results and the order in which they completed (0 is ``first``)."""
    done: list[int] = []

    async def go() -> list[GenerationResult]:
        async def call(i: int, request: GenerationRequest) -> GenerationResult:
            result = await backend.generate(request)
            done.append(i)
            return result

        tasks = [asyncio.create_task(call(0, first))]
        for i, request in enumerate(later, start=1):
            await _once_running(backend, 2 * i)
            tasks.append(asyncio.create_task(call(i, request)))
        return list(await asyncio.gather(*tasks))

    return asyncio.run(go()), done


def test_requests_arriving_while_a_batch_runs_join_it_and_match_one_at_a_time(joining, backend) -> None:
    long = GenerationRequest(PROMPTS[2], replace(GREEDY, max_new_tokens=60))
    full = one(backend, PROMPTS[0], replace(GREEDY, max_new_tokens=20))
    stop = full.text[len(full.text) // 2 : len(full.text) // 2 + 3]
    later = [
        GenerationRequest(PROMPTS[1], replace(GREEDY, max_new_tokens=5)),
        GenerationRequest(PROMPTS[0], replace(GREEDY, max_new_tokens=20, stop=(stop,))),
        GenerationRequest(PROMPTS[3], replace(GREEDY, max_new_tokens=9)),
        GenerationRequest(PROMPTS[1], replace(GREEDY, max_new_tokens=14)),
    ]
    alone = [asyncio.run(backend.generate(r)) for r in [long, *later]]  # one request at a time
    assert alone[0].finish_reason == "length" and alone[2].finish_reason == "stop"

    results, done = _staggered(joining, long, later)

    for got, expected in zip(results, alone, strict=True):
        assert got.completion_token_ids == expected.completion_token_ids
        assert (got.text, got.finish_reason) == (expected.text, expected.finish_reason)
        assert got.prompt_token_ids == expected.prompt_token_ids
        assert got.logprobs == pytest.approx(expected.logprobs, abs=1e-4)
    assert done[-1] == 0  # every later request joined the running batch and was answered before it ended
    stats = joining.stats
    assert stats.batches == 5  # one batch started, four joins
    assert stats.decode_steps == 60 + 4  # the long row's 60 passes, plus one prefill per joining request
    assert stats.mean_rows_per_step > 1.5


def test_a_finished_row_is_refilled_at_the_next_step(model, tokenizer) -> None:
    backend = InProcessBackend(
        model, tokenizer, model_name="tiny", max_batch_size=2, batch_wait_s=0.05, join_rows=1, join_wait_steps=0
    )
    sizes = [30, 3, 6, 4]
    try:
        results = together(backend, [GenerationRequest(PROMPTS[i], replace(GREEDY, max_new_tokens=n))
                                     for i, n in enumerate(sizes)])
        stats = backend.stats
    finally:
        asyncio.run(backend.aclose())
    assert [len(r.completion_token_ids) for r in results] == sizes
    # Two rows at a time: the 30-token row runs throughout; the other three take the second
    # row in turn (3 + 6 + 4 tokens), each joining as soon as the one before it finished.
    assert stats.decode_steps == 30 + 2
    assert stats.row_steps <= 2 * stats.decode_steps


def test_a_joining_request_for_another_adapter_turns_the_batch_mixed(joining, tokenizer, adapter_dirs) -> None:
    asyncio.run(joining.load_adapter("a", str(adapter_dirs["a"])))
    asyncio.run(joining.load_adapter("b", str(adapter_dirs["b"])))
    first = GenerationRequest(PROMPTS[2], replace(GREEDY, max_new_tokens=30), "a")  # starts alone: merged
    later = [GenerationRequest(PROMPTS[1], GREEDY, "b"), GenerationRequest(PROMPTS[0], GREEDY, None),
             GenerationRequest(PROMPTS[3], GREEDY, "a")]
    results, done = _staggered(joining, first, later)
    assert done[-1] == 0
    for request, result in zip([first, *later], results, strict=True):
        assert result.served_by == (request.adapter or "tiny")
        expected = reference_generate(
            tokenizer, adapter_dirs, request.adapter, result.prompt_token_ids, request.sampling.max_new_tokens
        )
        assert result.completion_token_ids == expected, request.adapter


def test_a_cancelled_request_leaves_the_running_batch(joining) -> None:
    async def go() -> tuple[GenerationResult, float]:
        long = replace(GREEDY, max_new_tokens=40)
        kept = asyncio.create_task(joining.generate(GenerationRequest(PROMPTS[2], long)))
        dropped = asyncio.create_task(joining.generate(GenerationRequest(PROMPTS[1], long)))
        await _once_running(joining, 5)
        dropped.cancel()
        steps_at_cancel = joining.stats.decode_steps
        return await kept, steps_at_cancel

    result, steps_at_cancel = asyncio.run(go())
    assert len(result.completion_token_ids) == 40
    stats = joining.stats
    assert stats.requests == 1 and stats.generated_tokens == 40
    # Both rows ran until the cancel (within a step or two), then only the kept one.
    assert stats.row_steps <= 2 * (steps_at_cancel + 2) + (stats.decode_steps - steps_at_cancel)


def test_requests_cancelled_while_queued_never_reach_the_model(model, tokenizer) -> None:
    """A request and a choice whose tasks are cancelled while a batch runs (an episode stopped)
    are dropped before the next step: no prefill, no choice pass, and no row taken from the live
    request queued behind them, which joins at the very next step."""
    backend = InProcessBackend(model, tokenizer, model_name="tiny", max_batch_size=2, batch_wait_s=0.0,
                               join_rows=1, join_wait_steps=0)
    calls: list[tuple[int, ...]] = []  # the shape of every forward pass's input ids
    armed, entered, release = threading.Event(), threading.Event(), threading.Event()

    def gate(module, args, kwargs):
        calls.append(tuple(kwargs["input_ids"].shape))
        if armed.is_set() and not entered.is_set():  # hold the worker inside one decode step
            entered.set()
            release.wait(timeout=60)

    hook = model.register_forward_pre_hook(gate, with_kwargs=True)

    async def go() -> tuple[GenerationResult, GenerationResult, list[object], int]:
        running = asyncio.create_task(backend.generate(GenerationRequest(PROMPTS[2], replace(GREEDY,
                                                                                              max_new_tokens=30))))
        await _once_running(backend, 2)
        armed.set()
        assert await asyncio.to_thread(entered.wait, 60)
        gone = [asyncio.create_task(backend.generate(GenerationRequest(PROMPTS[1], GREEDY))),
                asyncio.create_task(backend.generate(verdict_request(PROMPTS[1])))]
        live = asyncio.create_task(backend.generate(GenerationRequest(PROMPTS[0], replace(GREEDY, max_new_tokens=5))))
        await asyncio.sleep(0)  # all three are queued behind the held step
        for task in gone:
            task.cancel()
        cancelled = list(await asyncio.gather(*gone, return_exceptions=True))
        next_call = len(calls)
        release.set()
        return await running, await live, cancelled, next_call

    try:
        long, short, cancelled, next_call = asyncio.run(go())
    finally:
        release.set()
        hook.remove()
        asyncio.run(backend.aclose())
    assert [type(c) for c in cancelled] == [asyncio.CancelledError] * 2
    assert (len(long.completion_token_ids), len(short.completion_token_ids)) == (30, 5)
    stats = backend.stats
    assert stats.choice_passes == 0 and stats.requests == 2
    assert stats.batches == 2  # the first request's batch, and the live request joining it
    assert stats.prefill_tokens == len(long.prompt_token_ids) + len(short.prompt_token_ids)
    assert calls[next_call] == (1, len(short.prompt_token_ids))  # the step after the held one: its join


def test_no_request_queued_after_an_unload_joins_the_batch_running_before_it(joining, adapter_dirs) -> None:
    asyncio.run(joining.load_adapter("a", str(adapter_dirs["a"])))

    async def go() -> list[object]:
        first = GenerationRequest(PROMPTS[2], replace(GREEDY, max_new_tokens=30), "a")
        running = asyncio.create_task(joining.generate(first))
        await _once_running(joining, joining.stats.decode_steps + 3)
        unload = asyncio.create_task(joining.unload_adapter("a"))
        await asyncio.sleep(0)  # the unload is queued first
        late = asyncio.create_task(joining.generate(GenerationRequest(PROMPTS[0], GREEDY, "a")))
        return list(await asyncio.gather(running, unload, late, return_exceptions=True))

    served, unloaded, late = asyncio.run(go())
    assert isinstance(served, GenerationResult) and served.served_by == "a"
    assert len(served.completion_token_ids) == 30
    assert unloaded is None
    assert isinstance(late, UnknownAdapterError)  # it waited behind the unload, then found no adapter


def test_a_failing_join_fails_only_the_joining_requests(joining, model, backend) -> None:
    long = GenerationRequest(PROMPTS[2], replace(GREEDY, max_new_tokens=40))
    expected = asyncio.run(backend.generate(long))
    broken = {"on": False}

    def explode(module, args, kwargs):
        if broken["on"] and kwargs["input_ids"].shape[1] > 1:  # a prefill, not a decode step
            raise RuntimeError("simulated prefill failure")

    hook = model.register_forward_pre_hook(explode, with_kwargs=True)

    async def go() -> list[object]:
        running = asyncio.create_task(joining.generate(long))
        await _once_running(joining, 3)
        broken["on"] = True
        joiner = asyncio.create_task(joining.generate(GenerationRequest(PROMPTS[1], GREEDY)))
        return list(await asyncio.gather(running, joiner, return_exceptions=True))

    try:
        survivor, failed = asyncio.run(go())
    finally:
        hook.remove()
    assert isinstance(failed, BackendError) and "simulated prefill failure" in str(failed)
    assert isinstance(survivor, GenerationResult)
    assert survivor.completion_token_ids == expected.completion_token_ids


def test_choices_between_decode_steps_leave_the_running_batch_on_its_adapter(
    joining, tokenizer, adapter_dirs
) -> None:
    """A choice request runs between two decode steps, setting the model up for its own
    adapter; the running rows then go on with theirs (here: merged "a", then mixed)."""
    backend = InProcessBackend(tiny_model(tokenizer), tokenizer, model_name="tiny")  # its own model
    for served in (joining, backend):
        asyncio.run(served.load_adapter("a", str(adapter_dirs["a"])))
        asyncio.run(served.load_adapter("b", str(adapter_dirs["b"])))
    choices = [verdict_request(PROMPTS[1], adapter=a) for a in (None, "b", "a")]
    alone = [asyncio.run(backend.generate(r)) for r in choices]
    asyncio.run(backend.aclose())
    first = GenerationRequest(PROMPTS[2], replace(GREEDY, max_new_tokens=30), "a")
    later = [choices[0], GenerationRequest(PROMPTS[0], GREEDY, "b"), choices[1], choices[2]]

    results, done = _staggered(joining, first, later)

    assert done[-1] == 0  # the choices were answered while the batch ran
    expected = reference_generate(tokenizer, adapter_dirs, "a", results[0].prompt_token_ids, 30)
    assert results[0].completion_token_ids == expected
    assert results[2].completion_token_ids == reference_generate(
        tokenizer, adapter_dirs, "b", results[2].prompt_token_ids, GREEDY.max_new_tokens
    )
    for got, want in zip([results[1], results[3], results[4]], alone, strict=True):
        assert (got.chosen, got.served_by) == (want.chosen, want.served_by)
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


def test_closed_backend_refuses_requests(backend) -> None:
    asyncio.run(backend.aclose())
    with pytest.raises(BackendError, match="closed"):
        one(backend, PROMPTS[0])


# --- constrained choice (graphs/policies/choice.py) ---------------------------------------------


def verdict_request(
    messages: list[dict[str, str]], adapter: str | None = None, seed: int | None = None
) -> GenerationRequest:
    from graphs.policies.base import Choice  # here: the top of this file is another feature's

    sampling = GREEDY if seed is None else SamplingParams(temperature=1.0, seed=seed)
    choice = Choice((" correct", " incorrect"), prefix="I checked each step.\nVerdict:")
    return GenerationRequest(messages, sampling, adapter, choice=choice)


def test_choice_requests_mixed_with_normal_ones_answer_as_they_would_alone(backend: InProcessBackend) -> None:
    normal = [GenerationRequest(p, GREEDY) for p in PROMPTS]
    choices = [verdict_request(p) for p in PROMPTS] + [verdict_request(PROMPTS[0], seed=s) for s in range(4)]
    alone = [one(backend, r.messages) for r in normal]
    alone_choices = [asyncio.run(backend.generate(r)) for r in choices]

    mixed = together(backend, [r for pair in zip(normal, choices, strict=False) for r in pair] + choices[4:])

    got_normal, got_choices = mixed[0:8:2], mixed[1:8:2] + mixed[8:]
    assert [r.completion_token_ids for r in got_normal] == [r.completion_token_ids for r in alone]
    assert [r.chosen for r in got_choices] == [r.chosen for r in alone_choices]
    assert {r.chosen for r in got_choices} <= {" correct", " incorrect"}
    for result in got_choices:
        assert result.text == "I checked each step.\nVerdict:" + result.chosen
        assert len(result.logprobs) == len(result.completion_token_ids)
        assert backend.tokenizer.decode(result.completion_token_ids) == result.text


def test_choice_on_an_adapter_is_served_by_it(backend: InProcessBackend, adapter_dirs: dict[str, Path]) -> None:
    asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))
    on_adapter = asyncio.run(backend.generate(verdict_request(PROMPTS[1], adapter="a")))
    on_base = asyncio.run(backend.generate(verdict_request(PROMPTS[1])))
    assert (on_adapter.served_by, on_base.served_by) == ("a", "tiny")
    assert on_adapter.completion_token_ids[:5] == on_base.completion_token_ids[:5]
    assert on_adapter.logprobs != pytest.approx(on_base.logprobs)  # the adapter changes the scores
    with pytest.raises(UnknownAdapterError):
        asyncio.run(backend.generate(verdict_request(PROMPTS[1], adapter="missing")))


# --- a final line continuing the free text's own row (graphs/policies/final_decode.py) ----------


def final_request(
    messages: list[dict[str, str]], final, sampling: SamplingParams = GREEDY, adapter: str | None = None
) -> GenerationRequest:
    return GenerationRequest(messages, sampling, adapter, final=final)


def verdict_final():
    from graphs.policies.final_line import FinalChoice  # here: the top of this file is another feature's

    return FinalChoice("Verdict:", (" correct", " incorrect"))


def marker_in_the_text(backend: InProcessBackend, messages: list[dict[str, str]], max_new_tokens: int):
    """A final line whose marker's first word is one the model writes in its free text (the
    tiny random model never writes "verdict"), so that the free part ends at the marker."""
    import re

    from graphs.policies.final_line import FinalChoice

    text = one(backend, messages, replace(GREEDY, max_new_tokens=max_new_tokens)).text
    word = next(w for w in re.findall(r"[A-Za-z]{4,}", text[len(text) // 3 :]))
    return FinalChoice(f"{word}:", (" correct", " incorrect"))


def plain_forward_logprobs(model: LlamaForCausalLM, prompt: list[int], completion: list[int]) -> list[float]:
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return [logprobs[len(prompt) + j - 1, token].item() for j, token in enumerate(completion)]


def test_a_final_line_is_what_the_two_request_path_chooses_without_a_second_prefill(backend, model) -> None:
    """Greedy: same kept text, same verdict, same tokens as free text then a choice request; the
    logprobs are a plain forward pass's; and the only prefill is the prompt's."""
    from graphs.policies.final_line import generate_in_two_requests

    sampling = replace(GREEDY, max_new_tokens=24)
    finals = [verdict_final(), marker_in_the_text(backend, PROMPTS[2], 24)]
    cases = [(p, f) for p in PROMPTS for f in finals[:1]] + [(PROMPTS[2], finals[1])]
    for messages, final in cases:
        before = replace(backend.stats)
        got = asyncio.run(backend.generate(final_request(messages, final, sampling)))
        after = replace(backend.stats)
        two = asyncio.run(generate_in_two_requests(backend, final_request(messages, final, sampling)))
        end = backend.stats

        assert got.chosen in final.options
        assert (got.text, got.chosen, got.completion_token_ids) == (two.text, two.chosen, two.completion_token_ids)
        assert got.text.endswith(f"\n{final.marker}{got.chosen}") or got.text == final.marker + got.chosen
        assert got.completion_token_ids == backend.tokenizer(got.text, add_special_tokens=False)["input_ids"]
        assert got.prompt_token_ids == two.prompt_token_ids
        plain = plain_forward_logprobs(model, got.prompt_token_ids, got.completion_token_ids)
        assert got.logprobs == pytest.approx(plain, abs=1e-4)
        assert two.logprobs == pytest.approx(plain, abs=1e-4)
        assert (got.finish_reason, got.served_by) == ("stop", "tiny")
        # one prefill, of the prompt alone; the two-request path re-runs prompt + text per option
        prompt = len(got.prompt_token_ids)
        assert (after.batches - before.batches, after.choice_passes - before.choice_passes) == (1, 0)
        assert after.prefill_tokens - before.prefill_tokens == prompt
        assert after.decode_steps - before.decode_steps <= sampling.max_new_tokens + len(got.completion_token_ids)
        assert end.choice_passes - after.choice_passes == 1
        assert end.prefill_tokens - after.prefill_tokens > 3 * prompt + len(got.completion_token_ids)
    cut = asyncio.run(backend.generate(final_request(PROMPTS[2], finals[1], sampling)))
    word = finals[1].marker.rstrip(":")
    assert word.lower() not in cut.text[: -len(finals[1].marker + cut.chosen)].lower()  # cut at the marker
    assert len(cut.completion_token_ids) < sampling.max_new_tokens


def test_final_rows_share_a_batch_with_plain_rows_and_answer_as_alone(backend) -> None:
    final = verdict_final()
    seeded = SamplingParams(temperature=1.0, max_new_tokens=10, seed=3)
    requests = [
        GenerationRequest(PROMPTS[0], GREEDY),
        final_request(PROMPTS[1], final),
        GenerationRequest(PROMPTS[2], replace(GREEDY, max_new_tokens=30)),
        final_request(PROMPTS[3], final, seeded),
        final_request(PROMPTS[2], marker_in_the_text(backend, PROMPTS[2], 12)),
    ]
    alone = [asyncio.run(backend.generate(r)) for r in requests]
    batches = backend.stats.batches

    mixed = together(backend, requests)

    assert backend.stats.batches == batches + 1  # all in one batch
    for got, want in zip(mixed, alone, strict=True):
        assert (got.text, got.chosen, got.completion_token_ids) == (want.text, want.chosen, want.completion_token_ids)
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert [r.chosen is not None for r in mixed] == [False, True, False, True, True]


def test_a_final_request_joining_a_running_batch_answers_as_alone(joining, backend) -> None:
    final = verdict_final()
    long = GenerationRequest(PROMPTS[2], replace(GREEDY, max_new_tokens=50))
    later = [
        final_request(PROMPTS[0], final),
        GenerationRequest(PROMPTS[1], replace(GREEDY, max_new_tokens=6)),
        final_request(PROMPTS[2], marker_in_the_text(backend, PROMPTS[2], 12)),
        final_request(PROMPTS[3], final, SamplingParams(temperature=0.9, max_new_tokens=8, seed=5)),
    ]
    alone = [asyncio.run(backend.generate(r)) for r in [long, *later]]

    results, done = _staggered(joining, long, later)

    assert done[-1] == 0  # the final lines were answered while the long row still ran
    for got, want in zip(results, alone, strict=True):
        assert (got.text, got.chosen, got.completion_token_ids) == (want.text, want.chosen, want.completion_token_ids)
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert joining.stats.batches == 5 and joining.stats.choice_passes == 0


def test_a_sampled_final_line_is_an_option_and_reproducible_by_seed(backend) -> None:
    final = verdict_final()

    def sampled(seed: int) -> GenerationResult:
        return asyncio.run(backend.generate(final_request(PROMPTS[1], final, SamplingParams(1.5, 1.0, 8, seed))))

    first = [sampled(s) for s in range(6)]
    again = [sampled(s) for s in range(6)]
    assert [(r.text, r.chosen) for r in first] == [(r.text, r.chosen) for r in again]
    assert {r.chosen for r in first} <= set(final.options)
    assert len({r.text for r in first}) > 1  # the free part was sampled


def test_multi_token_options_are_picked_token_by_token(backend, model) -> None:
    """An option that begins another (" yes" / " yes please"): the pick is always a whole option,
    ended by EOS where a longer one could go on; ids and logprobs are a plain forward pass's."""
    from graphs.policies.final_line import FinalChoice

    final = FinalChoice("Answer:", (" yes", " yes please", " no way"))
    chosen = set()
    for seed in range(16):
        sampling = SamplingParams(temperature=2.0, max_new_tokens=6, seed=seed)
        result = asyncio.run(backend.generate(final_request(PROMPTS[seed % 4], final, sampling)))
        chosen.add(result.chosen)
        assert result.text.endswith(final.marker + result.chosen)
        assert result.completion_token_ids == backend.tokenizer(result.text, add_special_tokens=False)["input_ids"]
        plain = plain_forward_logprobs(model, result.prompt_token_ids, result.completion_token_ids)
        assert result.logprobs == pytest.approx(plain, abs=1e-4)
    assert chosen == set(final.options)  # the short option (ended by EOS) and the long one both come up


def test_a_request_cannot_have_both_a_choice_and_a_final_line() -> None:
    from graphs.policies.base import Choice

    with pytest.raises(ValueError, match="either a choice"):
        GenerationRequest(PROMPTS[0], final=verdict_final(), choice=Choice(("a", "b")))


def test_the_option_trie_allows_only_continuations_and_eos_where_an_option_is_complete(tokenizer) -> None:
    from graphs.policies.final_decode import FinalLineState
    from graphs.policies.final_line import FinalChoice

    final = FinalChoice("Answer:", (" yes", " yes please", " no way"))
    state = FinalLineState(final)
    keep = state.start(tokenizer, [], "Sure.")
    targets = [tokenizer("Sure.\nAnswer:" + o, add_special_tokens=False)["input_ids"] for o in final.options]
    shared = next(i for i, tokens in enumerate(zip(*targets, strict=False)) if len(set(tokens)) > 1)
    assert (keep, list(state.forced)) == (0, targets[0][:shared])
    for _ in range(shared):
        assert state.take(state.forced[0]) == (True, False)
    yes, please, no = (t[shared:] for t in targets)
    assert please[: len(yes)] == yes and len(please) > len(yes)  # " yes" begins " yes please"
    assert state.allowed({0}) == sorted({yes[0], no[0]})
    for token in yes:
        assert state.take(token) == (True, False)  # " yes please" could still go on
    assert state.allowed({0}) == [please[len(yes)], 0]
    assert state.take(0) == (False, True)  # EOS: " yes" is complete
    assert (state.chosen, state.text) == (" yes", "Sure.\nAnswer: yes")


def test_a_free_part_ended_by_eos_or_a_stop_string_still_gets_its_final_line(backend, model) -> None:
    from graphs.policies.final_line import generate_in_two_requests

    final = verdict_final()
    full = one(backend, PROMPTS[2], replace(GREEDY, max_new_tokens=20))

    def check(request: GenerationRequest, free_text: str) -> None:
        got = asyncio.run(backend.generate(request))
        two = asyncio.run(generate_in_two_requests(backend, request))
        assert got.text == final.prefix(final.body(free_text)) + got.chosen
        assert (got.text, got.chosen, got.completion_token_ids) == (two.text, two.chosen, two.completion_token_ids)
        plain = plain_forward_logprobs(model, got.prompt_token_ids, got.completion_token_ids)
        assert got.logprobs == pytest.approx(plain, abs=1e-4)

    stop = full.text[len(full.text) // 2 : len(full.text) // 2 + 3]
    stopped = final_request(PROMPTS[2], final, replace(GREEDY, max_new_tokens=20, stop=(stop,)))
    check(stopped, full.text[: full.text.find(stop)])
    k = next(i for i, t in enumerate(full.completion_token_ids) if i >= 2 and t not in full.completion_token_ids[:i])
    model.generation_config.eos_token_id = [model.generation_config.eos_token_id, full.completion_token_ids[k]]
    ended = final_request(PROMPTS[2], final, replace(GREEDY, max_new_tokens=20))
    check(ended, backend.tokenizer.decode(full.completion_token_ids[:k]))


def test_a_bfloat16_model_serves_an_adapter_merged_by_stochastic_rounding(tokenizer, adapter_dirs) -> None:
    """bfloat16 keeps 8 bits of mantissa: a bfloat16 backend merges a single adapter with
    stochastic rounding (``lora_merge``; the update kept on average, tests/test_lora_merge.py),
    from a fixed seed: its answer is that of PEFT's model merged the same way, and the base
    weights come back exactly."""
    model = tiny_model(tokenizer).to(torch.bfloat16)
    weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    backend = InProcessBackend(model, tokenizer, model_name="tiny")
    try:
        assert backend.precision == "bfloat16"
        asyncio.run(backend.load_adapter("a", str(adapter_dirs["a"])))
        served = one(backend, PROMPTS[0], adapter="a")
        assert backend._adapters.merger is not None and backend._adapters.merger.merged == "a"
        base = one(backend, PROMPTS[0])
        asyncio.run(backend.unload_adapter("a"))
        assert all(torch.equal(p, weights[name]) for name, p in model.named_parameters())
    finally:
        asyncio.run(backend.aclose())
    reference = PeftModel.from_pretrained(tiny_model(tokenizer).to(torch.bfloat16), str(adapter_dirs["a"])).eval()
    AdapterMerger(reference).merge("default")
    ids = torch.tensor([served.prompt_token_ids])
    with torch.inference_mode():
        expected = reference.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      max_new_tokens=GREEDY.max_new_tokens, pad_token_id=tokenizer.pad_token_id)
    assert served.completion_token_ids == expected[0, ids.shape[1]:].tolist()[: len(served.completion_token_ids)]
    assert served.completion_token_ids != base.completion_token_ids


def test_auto_precision_is_bfloat16_only_for_serving_on_a_cpu_where_it_pays() -> None:
    from graphs.policies.base_models import resolve_dtype
    from graphs.policies.cpu_precision import bfloat16_pays

    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32  # training on a CPU
    assert resolve_dtype("auto", cpu, serving=True) == (torch.bfloat16 if bfloat16_pays() else torch.float32)
    assert resolve_dtype("float32", cpu, serving=True) == torch.float32
