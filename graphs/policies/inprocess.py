"""The in-process backend: transformers + PEFT in this process, with request batching.

Many running episodes await ``generate`` at once. Their requests go into a queue; one worker
thread takes up to ``max_batch_size`` of them (waiting at most ``batch_wait_s`` for more to
arrive) and decodes them together, so the event loop is never blocked by torch. Results go
back to each caller's event loop through ``call_soon_threadsafe``.

The decode loop is our own rather than ``model.generate`` because every row of a batch has its
own sampling parameters (temperature, top-p, seed, stop strings, length) and its own LoRA
adapter: requests for different adapters and for the base model share one forward pass
through PEFT's mixed-adapter batches (``adapter_names=[...]``, ``"__base__"`` for the base);
a batch of a single adapter (or of the base model alone) runs PEFT's plain, faster path.

Adapter loading and unloading run on the worker thread between batches, so they are
serialised with generation: requests queued before an unload are served by the adapter.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import PeftConfig, PeftModelForCausalLM, PeftType
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from graphs.policies.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    SamplingParams,
    UnknownAdapterError,
)
from graphs.policies.lora_merge import AdapterMerger
from graphs.policies.models import load_model

BASE_ADAPTER = "__base__"
"""PEFT's name for "no adapter" in a mixed-adapter batch."""

ADAPTER_WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")

COMPACT_FRACTION = 0.25
"""Finished rows leave the batch (and the KV cache) once they are at least this fraction of
it. Dropping rows copies the whole cache (about 10-25 ms at 64 rows x 100 tokens on the
bundled model, 2 CPU cores, against about 200 ms a step), so each dropped row must save some
steps first. Best of three runs, 64 prompts: dropping rows as they finish 182 tokens/s, at
0.25 198, at 0.5 192, never 174."""


@dataclass
class BackendStats:
    """Counters for benchmarks and logs, since the backend was created."""

    requests: int = 0
    batches: int = 0
    decode_steps: int = 0
    """Forward passes, prefill included."""
    generated_tokens: int = 0
    """Completion tokens returned to callers (EOS tokens are not counted)."""

    @property
    def mean_batch_size(self) -> float:
        return self.requests / self.batches if self.batches else 0.0


@dataclass
class _Pending:
    request: GenerationRequest
    future: asyncio.Future[GenerationResult]
    loop: asyncio.AbstractEventLoop
    submitted: float


@dataclass
class _Control:
    """Work that must not overlap a batch (adapter loading and unloading)."""

    run: Callable[[], None]
    future: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop


_STOP = object()


@dataclass
class _Row:
    """Decoding state of one request inside a batch."""

    pending: _Pending
    prompt_ids: list[int]
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = ""
    """"stop" or "length" once finished."""
    stopped_by_string: bool = False

    @property
    def params(self) -> SamplingParams:
        return self.pending.request.sampling


class InProcessBackend:
    """Serves chat requests from a transformers model in this process, batching concurrent ones.

    ``completion_token_ids``, ``logprobs`` and ``text`` exclude the EOS token that ended a
    completion. A completion cut by a stop string keeps in its ids (and logprobs) the tokens
    that produced the stop string, while ``text`` ends just before it (as vLLM does).
    """

    name = "inprocess"

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        model_name: str,
        max_batch_size: int = 64,
        batch_wait_s: float = 0.005,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if tokenizer.pad_token_id is None:
            raise ValueError(
                "the tokenizer needs a pad token (load it with graphs.policies.models.load_model)"
            )
        self.model_name = model_name
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.stats = BackendStats()
        self._model: torch.nn.Module = model.eval()
        self._peft: PeftModelForCausalLM | None = None
        """Set while adapters are loaded; then ``_model`` is this wrapper of the base model."""
        self._merger: AdapterMerger | None = None
        """With ``_peft`` on CPU: merges the adapter of single-adapter batches."""
        self._tokenizer = tokenizer
        self._adapter_paths: dict[str, Path] = {}
        self._adapters_lock = threading.Lock()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name=f"inprocess-{model_name}", daemon=True)
        self._thread.start()

    @classmethod
    def from_pretrained(
        cls,
        model: str,
        *,
        cache_dir: Path,
        device: str = "auto",
        max_batch_size: int = 64,
    ) -> InProcessBackend:
        """Load ``model`` ("bundled", a local folder or a hub id) with ``load_model``."""
        lm, tokenizer = load_model(model, cache_dir=cache_dir, device=device)
        return cls(lm, tokenizer, model_name=model, max_batch_size=max_batch_size)

    @property
    def model(self) -> torch.nn.Module:
        """The model served: the base model, or PEFT's wrapper of it while adapters are loaded.
        The worker thread uses it; touch it only while no request or adapter call is pending."""
        return self._model

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    # ----------------------------------------------------------------------------- public API

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self._check_open()
        if request.adapter is not None:
            self._check_adapter(request.adapter)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenerationResult] = loop.create_future()
        self._queue.put(_Pending(request, future, loop, time.perf_counter()))
        return await future

    async def load_adapter(self, name: str, path: str) -> None:
        if not name or "." in name or name == BASE_ADAPTER:
            raise BackendError(
                f"invalid adapter name {name!r}: use a non-empty name without '.', e.g. critic@v3"
            )
        await self._control(lambda: self._load_adapter_now(name, Path(path).expanduser().resolve()))

    async def unload_adapter(self, name: str) -> None:
        self._check_adapter(name)
        await self._control(lambda: self._unload_adapter_now(name))

    def adapters(self) -> list[str]:
        with self._adapters_lock:
            return sorted(self._adapter_paths)

    async def aclose(self) -> None:
        """Stop the worker once the batch it is running finishes; queued requests fail."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        await asyncio.to_thread(self._thread.join)
        self._fail_queued()
        self._model = self._peft = self._merger = None  # type: ignore[assignment]
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------------- event-loop side

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError(f"the in-process backend for {self.model_name} is closed")

    def _check_adapter(self, name: str) -> None:
        with self._adapters_lock:
            if name in self._adapter_paths:
                return
            loaded = ", ".join(sorted(self._adapter_paths)) or "none"
        raise UnknownAdapterError(
            f"adapter {name!r} is not loaded on the in-process backend ({self.model_name}); "
            f"loaded adapters: {loaded}. Load it first with load_adapter(name, path)."
        )

    async def _control(self, run: Callable[[], None]) -> None:
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue.put(_Control(run, future, loop))
        await future

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, (_Pending, _Control)):
                _deliver(item.loop, item.future, error=BackendError("the in-process backend was closed"))

    # ---------------------------------------------------------------------------- worker side

    def _work(self) -> None:
        held: list[Any] = []  # items taken off the queue while gathering a batch, not run yet
        while True:
            item = held.pop(0) if held else self._queue.get()
            if item is _STOP:
                return
            if isinstance(item, _Control):
                self._run_control(item)
                continue
            batch = [item]
            deadline = time.monotonic() + self.batch_wait_s
            while len(batch) < self.max_batch_size:
                wait = deadline - time.monotonic()
                try:
                    more = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
                except queue.Empty:
                    break
                if not isinstance(more, _Pending):
                    held.append(more)  # a control or stop runs after this batch, in order
                    break
                batch.append(more)
            self._run_batch(batch)

    def _run_control(self, item: _Control) -> None:
        try:
            item.run()
        except Exception as exc:  # delivered to the caller, the worker goes on
            _deliver(item.loop, item.future, error=exc)
        else:
            _deliver(item.loop, item.future, value=None)

    def _run_batch(self, batch: list[_Pending]) -> None:
        rows: list[_Row] = []
        for pending in batch:
            if pending.future.cancelled():
                continue
            try:
                rows.append(self._prepare_row(pending))
            except BackendError as exc:
                _deliver(pending.loop, pending.future, error=exc)
        if not rows:
            return
        try:
            with torch.inference_mode():
                self.stats.decode_steps += self._decode(rows)
        except Exception as exc:  # one bad batch fails its requests, never the worker
            error = BackendError(
                f"in-process generation failed for a batch of {len(rows)} request(s) on "
                f"{self.model_name}: {type(exc).__name__}: {exc}"
            )
            for row in rows:
                _deliver(row.pending.loop, row.pending.future, error=error)
            return
        self.stats.batches += 1
        self.stats.requests += len(rows)
        for row in rows:
            self.stats.generated_tokens += len(row.ids)
            _deliver(row.pending.loop, row.pending.future, value=self._result(row))

    def _prepare_row(self, pending: _Pending) -> _Row:
        request = pending.request
        if request.adapter is not None:
            self._check_adapter(request.adapter)  # it may have been unloaded since it was queued
        try:
            encoded = self._tokenizer.apply_chat_template(
                request.messages, add_generation_prompt=True, return_dict=True
            )
        except Exception as exc:
            raise BackendError(
                f"could not apply {self.model_name}'s chat template to the request's messages: {exc} "
                f"(the backend serves chat requests: use a chat/instruct model)"
            ) from exc
        return _Row(pending, list(encoded["input_ids"]))

    def _result(self, row: _Row) -> GenerationResult:
        text = self._tokenizer.decode(row.ids, skip_special_tokens=True)
        if row.stopped_by_string:
            cuts = [text.find(s) for s in row.params.stop if s in text]
            if cuts:
                text = text[: min(cuts)]
        adapter = row.pending.request.adapter
        return GenerationResult(
            text=text,
            prompt_token_ids=row.prompt_ids,
            completion_token_ids=row.ids,
            logprobs=row.logprobs,
            finish_reason=row.finish,
            served_by=adapter or self.model_name,
            latency_s=time.perf_counter() - row.pending.submitted,
        )

    # ------------------------------------------------------------------------------- decoding

    def _eos_ids(self) -> set[int]:
        ids = {self._tokenizer.eos_token_id}
        config_eos = getattr(self._model.generation_config, "eos_token_id", None)
        ids.update(config_eos if isinstance(config_eos, list) else [config_eos])
        ids.discard(None)
        return ids  # type: ignore[return-value]

    def _decode(self, rows: list[_Row]) -> int:
        """Decode ``rows`` together until every one finishes; returns the forward passes run.

        Prefill runs on the left-padded prompts; each step then feeds one token per row with
        the KV cache, the attention mask grown by one column and positions counted from the
        mask, so padding never shifts a row's positions.
        """
        device = self._model.device
        eos_ids = self._eos_ids()
        width = max(len(r.prompt_ids) for r in rows)
        input_ids = torch.full((len(rows), width), self._tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids)
            mask[i, width - len(row.prompt_ids) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        sampler = _Sampler([r.params for r in rows], device)
        with self._adapters_for([r.pending.request.adapter for r in rows]) as adapter_names:
            return self._decode_loop(rows, input_ids, mask, sampler, adapter_names, eos_ids)

    @contextlib.contextmanager
    def _adapters_for(self, adapters: list[str | None]) -> Iterator[list[str] | None]:
        """Sets the model up for a batch whose rows ask for ``adapters`` (None: the base model)
        and yields the per-row ``adapter_names`` to pass to each forward pass, or None.

        A batch of one adapter runs with it active (on CPU merged into the base weights:
        ``AdapterMerger``) and a batch of the base model alone with the adapters disabled;
        only a mixed batch goes through PEFT's mixed-adapter forward, which re-indexes the
        sub-batch of each adapter in every LoRA layer at every step (64 rows of one adapter,
        bundled model, CPU: 108 tokens/s mixed, 134 single, unmerged).
        """
        if self._peft is None:
            yield None
            return
        distinct = set(adapters)
        mixed = len(distinct) > 1
        only = None if mixed else next(iter(distinct))
        if self._merger is not None and only is not None:
            self._merger.merge(only)
            yield None
            return
        if self._merger is not None:
            self._merger.unmerge()
        if mixed:
            yield [a or BASE_ADAPTER for a in adapters]
        elif only is None:
            with self._peft.disable_adapter():
                yield None
        else:
            if self._peft.active_adapter != only:
                self._peft.set_adapter(only, inference_mode=True)
            yield None

    def _decode_loop(
        self,
        rows: list[_Row],
        input_ids: torch.Tensor,
        mask: torch.Tensor,
        sampler: _Sampler,
        adapter_names: list[str] | None,
        eos_ids: set[int],
    ) -> int:
        device = input_ids.device
        positions = (mask.cumsum(-1) - 1).clamp_(min=0)
        lengths = mask.sum(-1)
        cache = DynamicCache(config=self._model.config)
        present = list(range(len(rows)))  # rows[present[j]] is row j of the tensors
        steps = 0
        while True:
            logits = self._forward(input_ids, mask, positions, cache, adapter_names)
            steps += 1
            tokens, logprobs = sampler(logits)
            for row, token, logprob in zip(
                (rows[i] for i in present), tokens.tolist(), logprobs.tolist(), strict=True
            ):
                if not row.finish:
                    self._advance(row, token, logprob, eos_ids)
            alive = [j for j, i in enumerate(present) if not rows[i].finish]
            if not alive:
                return steps
            if len(present) - len(alive) >= COMPACT_FRACTION * len(present):
                keep = torch.tensor(alive, device=device)
                cache.batch_select_indices(keep)
                tokens, mask, lengths = tokens[keep], mask[keep], lengths[keep]
                sampler.select(alive)
                present = [present[j] for j in alive]
                if adapter_names is not None:
                    adapter_names = [adapter_names[j] for j in alive]
            input_ids = tokens[:, None]
            positions = lengths[:, None]
            lengths = lengths + 1
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)

    def _forward(
        self,
        input_ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        cache: DynamicCache,
        adapter_names: list[str] | None,
    ) -> torch.Tensor:
        extra = {"adapter_names": adapter_names} if adapter_names is not None else {}
        out = self._model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
            **extra,
        )
        return out.logits[:, -1, :]

    def _advance(self, row: _Row, token: int, logprob: float, eos_ids: set[int]) -> None:
        if token in eos_ids:
            row.finish = "stop"
            return
        row.ids.append(token)
        row.logprobs.append(logprob)
        if row.params.stop and self._hits_stop(row):
            row.finish = "stop"
            row.stopped_by_string = True
        elif len(row.ids) >= row.params.max_new_tokens:
            row.finish = "length"

    def _hits_stop(self, row: _Row) -> bool:
        """Whether the newest token completed a stop string.

        Only the tail is decoded: a stop string of n characters spans at most 4n tokens (a
        character is at most 4 byte-level tokens), and it is checked after every token.
        """
        window = 4 * max(len(s) for s in row.params.stop) + 2
        tail = self._tokenizer.decode(row.ids[-window:], skip_special_tokens=True)
        return any(s in tail for s in row.params.stop)

    # -------------------------------------------------------------------------------- adapters

    def _load_adapter_now(self, name: str, path: Path) -> None:
        known = self._adapter_paths.get(name)
        if known is not None:
            if known == path:
                return
            raise BackendError(
                f"adapter {name!r} is already loaded from {known}; adapter names are immutable, "
                f"so load {path} under a new name (the next version)."
            )
        config = _read_adapter_config(path)
        created = self._peft is None
        if self._merger is not None:
            self._merger.unmerge()
        try:
            if self._peft is None:
                self._peft = PeftModelForCausalLM(self._model, config, adapter_name=name)
                self._model = self._peft
                self._merger = AdapterMerger(self._peft) if self._peft.device.type == "cpu" else None
            result = self._peft.load_adapter(str(path), adapter_name=name)
            _check_loaded_keys(name, result.missing_keys, result.unexpected_keys)
        except Exception as exc:
            self._discard_adapter(name, created)
            raise BackendError(
                f"could not load adapter folder {path} as {name!r} on {self.model_name}: "
                f"{type(exc).__name__}: {str(exc).rstrip('.')}. "
                f"Check that it is a LoRA adapter trained for this base model."
            ) from exc
        self._model.eval()  # new LoRA modules (dropout) start in training mode
        with self._adapters_lock:
            self._adapter_paths[name] = path

    def _unload_adapter_now(self, name: str) -> None:
        self._check_adapter(name)
        self._discard_adapter(name, last=len(self._adapter_paths) == 1)
        with self._adapters_lock:
            del self._adapter_paths[name]

    def _discard_adapter(self, name: str, last: bool) -> None:
        """Remove ``name`` from the model; when no adapter is left, unwrap the base model
        (PEFT cannot run a forward pass with zero adapters)."""
        if self._peft is None:
            return
        if self._merger is not None:
            self._merger.unmerge()
        if last:
            self._model = self._peft.unload()
            self._peft = self._merger = None
        elif name in self._peft.peft_config:
            self._peft.delete_adapter(name)


class _Sampler:
    """Chooses the next token of every row at once, each row with its own parameters.

    Sampled rows use the Gumbel-max trick: argmax(logits / T + Gumbel noise), with the noise
    drawn from the row's own generator (seeded with the request's seed). A seeded row thus
    draws the same numbers whatever shares its batch, and its choice flips only when two
    noisy scores tie to within float round-off; inverse-CDF sampling instead flips whenever
    the round-off of a 49k-entry cumulative sum moves a boundary past the uniform draw,
    which batching (other padding, other matmul shapes) does often on flat distributions.
    """

    def __init__(self, params: list[SamplingParams], device: torch.device) -> None:
        self.device = device
        self.params = params
        self.generators = [  # None: greedy, or the global generator for an unseeded row
            torch.Generator(device=device).manual_seed(p.seed)
            if p.temperature > 0 and p.seed is not None
            else None
            for p in params
        ]
        self._index()

    def _index(self) -> None:
        self.sampled = [i for i, p in enumerate(self.params) if p.temperature > 0]
        self.sampled_index = torch.tensor(self.sampled, dtype=torch.long, device=self.device)
        self.temperature = torch.tensor(
            [self.params[i].temperature for i in self.sampled], device=self.device
        )
        self.top_p = torch.tensor([self.params[i].top_p for i in self.sampled], device=self.device)
        self.any_top_p = bool((self.top_p < 1).any())

    def select(self, keep: list[int]) -> None:
        """Keep only the rows at positions ``keep`` (finished rows leave the batch)."""
        self.params = [self.params[i] for i in keep]
        self.generators = [self.generators[i] for i in keep]
        self._index()

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Next tokens and their log-probabilities under the raw logits (before temperature)."""
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        tokens = logprobs.argmax(dim=-1)
        if self.sampled:
            tokens[self.sampled_index] = self._sample(logprobs[self.sampled_index])
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)

    def _sample(self, logprobs: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logprobs / self.temperature.clamp(min=1e-5)[:, None], dim=-1)  # tiny T: no inf
        if self.any_top_p:
            probs = probs.masked_fill(probs < _nucleus_floor(probs, self.top_p[:, None]), 0.0)
        uniform = torch.empty_like(probs)
        for row, i in zip(uniform, self.sampled, strict=True):
            row.uniform_(generator=self.generators[i])
        # argmax(p / Exp(1) noise) is the Gumbel-max trick (an exponential race) without logs of p.
        return probs.div_(uniform.log_().neg_()).argmax(dim=-1)


NUCLEUS_CANDIDATES = 64
"""Top-p first looks for the nucleus among this many most likely tokens: a full sort of the
vocabulary costs ~3 ms per row on a CPU core, top-k of 64 about 1/50 of that. Rows whose
nucleus is larger (flat distributions) fall back to the full sort."""


def _nucleus_floor(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Per row, the smallest probability inside the top-p nucleus (the smallest set of most
    likely tokens whose mass reaches top_p); 0 where top_p is 1. Shape (rows, 1)."""
    floor = torch.zeros_like(top_p)
    cut = (top_p < 1).squeeze(-1)
    if not cut.any():
        return floor
    top = probs[cut].topk(min(NUCLEUS_CANDIDATES, probs.shape[-1]), dim=-1).values
    floor[cut] = _floor_of_sorted(top, top_p[cut])
    wide = cut.clone()
    wide[cut] = top.sum(dim=-1) < top_p[cut].squeeze(-1)
    if wide.any():
        floor[wide] = _floor_of_sorted(probs[wide].sort(dim=-1, descending=True).values, top_p[wide])
    return floor


def _floor_of_sorted(sorted_probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of the more likely tokens
    last = (before < top_p).sum(dim=-1, keepdim=True) - 1  # >= 0: the top token always stays
    return sorted_probs.gather(-1, last)


def _read_adapter_config(path: Path) -> PeftConfig:
    """The folder's LoRA config, or a BackendError naming what is missing or wrong."""
    if not path.is_dir():
        raise BackendError(f"adapter folder {path} does not exist (or is not a folder)")
    if not (path / "adapter_config.json").is_file():
        raise BackendError(
            f"adapter folder {path} has no adapter_config.json: expected a PEFT adapter saved "
            f"with save_pretrained (adapter_config.json and adapter_model.safetensors)"
        )
    if not any((path / f).is_file() for f in ADAPTER_WEIGHT_FILES):
        raise BackendError(
            f"adapter folder {path} has no weights: expected {' or '.join(ADAPTER_WEIGHT_FILES)}"
        )
    try:
        config = PeftConfig.from_pretrained(str(path))
    except Exception as exc:
        raise BackendError(
            f"adapter folder {path}: adapter_config.json is not a valid PEFT config: {exc}"
        ) from exc
    if config.peft_type != PeftType.LORA:
        raise BackendError(
            f"adapter folder {path} holds a {config.peft_type} adapter; "
            f"the in-process backend serves LoRA adapters"
        )
    config.inference_mode = True
    return config


def _check_loaded_keys(name: str, missing: list[str], unexpected: list[str]) -> None:
    """PEFT only warns when an adapter's weights file lacks tensors the adapter needs (they
    would stay randomly initialised); here that is an error, as are tensors that fit nowhere."""
    own = re.compile(rf"\.(lora_\w+|modules_to_save)\.{re.escape(name)}\.")
    missing = [k for k in missing if own.search(k)]
    if missing:
        raise BackendError(f"the weights file lacks {len(missing)} adapter tensor(s), e.g. {missing[0]}")
    if unexpected:
        raise BackendError(
            f"the weights file has {len(unexpected)} tensor(s) that fit no module, e.g. {unexpected[0]}"
        )


def _deliver(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    *,
    value: Any = None,
    error: BaseException | None = None,
) -> None:
    """Complete ``future`` on its own loop (from the worker thread), unless it was cancelled
    or its loop has closed meanwhile."""

    def complete() -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody waits any more
        loop.call_soon_threadsafe(complete)
