"""The in-process backend: transformers + PEFT in this process, with continuous batching.

Many running episodes await ``generate`` at once. Their requests go into a queue; one worker
thread decodes them together, so the event loop is never blocked by torch. Requests that
arrive while a batch runs join it between two decode steps (prefilled on their own, then
merged into its KV cache: ``graphs.policies.decoding``), and every row is answered as soon as
it finishes, so an episode's next turn can join the batch its previous turn left. Results go
back to each caller's event loop through ``call_soon_threadsafe``. Work whose caller has gone
(its future cancelled: an episode or the command stopped) is dropped between two decode steps:
a running row leaves the batch, a queued request or choice is never admitted or run.

The decode loop is our own rather than ``model.generate`` because every row of a batch has its
own sampling parameters (temperature, top-p, seed, stop strings, length) and its own LoRA
adapter: requests for different adapters and for the base model share one forward pass
through PEFT's mixed-adapter batches, and a batch of a single adapter (or of the base model
alone) runs PEFT's plain, faster path (``graphs.policies.adapter_switch``).

A request with a final line (``GenerationRequest.final``: a critique, then "Verdict:" and one
of the options) is one row: once its free part ends, the marker's tokens are fed and the
option picked in later steps of the same batch (``graphs.policies.final_decode``), with no
second prefill. A pure choice request (``GenerationRequest.choice``) is one forward pass of its
own (``graphs.policies.choice``).

Adapter loading and unloading run on the worker thread between batches, so they are
serialised with generation: requests queued before an unload are served by the adapter, and
no request queued after a load or unload joins the batch running before it.

This module is the backend's interface; the parts are ``inprocess_queue`` (what callers
queue, how answers get back), ``inprocess_scheduler`` (the worker thread: gathering, joining,
barriers), ``inprocess_batches`` (decode batches and choice passes on the model) and
``inprocess_adapters`` (the adapters loaded on it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from graphs.policies.adapter_switch import BASE_ADAPTER
from graphs.policies.base import BackendError, GenerationRequest, GenerationResult
from graphs.policies.base_models import load_model
from graphs.policies.batch_invariant import BATCH_INVARIANT, make_batch_invariant
from graphs.policies.inprocess_adapters import LoadedAdapters
from graphs.policies.inprocess_batches import BackendStats, BatchRunner
from graphs.policies.inprocess_queue import Control, Pending
from graphs.policies.inprocess_scheduler import JOIN_ROWS_DIVISOR, JOIN_WAIT_STEPS, Scheduler


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
        join_rows: int | None = None,
        join_wait_steps: int = JOIN_WAIT_STEPS,
        batch_invariant: bool = False,
    ) -> None:
        """``join_rows`` (default ``max_batch_size // JOIN_ROWS_DIVISOR``, at least 1) and
        ``join_wait_steps``: queued requests join a running batch once that many of them can
        (or all its free rows can be filled), or once the oldest has waited that many steps.
        ``batch_invariant``: change ``model`` so that no row depends on what shares its batch
        (``graphs.policies.batch_invariant``)."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if join_rows is not None and join_rows < 1:
            raise ValueError(f"join_rows must be >= 1, got {join_rows}")
        if join_wait_steps < 0:
            raise ValueError(f"join_wait_steps must be >= 0, got {join_wait_steps}")
        if tokenizer.pad_token_id is None:
            raise ValueError(
                "the tokenizer needs a pad token (load it with graphs.policies.base_models.load_model)"
            )
        self.model_name = model_name
        self.precision = str(model.dtype).removeprefix("torch.")
        """the weights' dtype ("float32", "bfloat16"): part of an evaluation's key"""
        self.kernels = BATCH_INVARIANT if batch_invariant else None
        """"batch-invariant" when rows do not depend on their batch; part of an evaluation's key"""
        if batch_invariant:
            make_batch_invariant(model)
        self._tokenizer = tokenizer
        self._adapters = LoadedAdapters(model, model_name=model_name, batch_invariant=batch_invariant)
        self._runner = BatchRunner(self._adapters, tokenizer, model_name=model_name)
        self._scheduler = Scheduler(
            self._runner,
            name=f"inprocess-{model_name}",
            max_batch_size=max_batch_size,
            batch_wait_s=batch_wait_s,
            join_rows=join_rows or max(1, max_batch_size // JOIN_ROWS_DIVISOR),
            join_wait_steps=join_wait_steps,
        )
        self._closed = False

    @classmethod
    def from_pretrained(
        cls,
        model: str,
        *,
        cache_dir: Path,
        device: str = "auto",
        dtype: str = "auto",
        max_batch_size: int = 64,
        batch_invariant: bool = False,
    ) -> InProcessBackend:
        """Load ``model`` ("bundled", a local folder or a hub id) with ``load_model``;
        ``batch_invariant`` as in ``__init__`` (its cost: bench/batch_invariance.py)."""
        lm, tokenizer = load_model(model, cache_dir=cache_dir, device=device, dtype=dtype, serving=True)
        return cls(lm, tokenizer, model_name=model, max_batch_size=max_batch_size, batch_invariant=batch_invariant)

    @property
    def model(self) -> torch.nn.Module:
        """The model served: the base model, or PEFT's wrapper of it while adapters are loaded.
        The worker thread uses it; touch it only while no request or adapter call is pending."""
        return self._adapters.model

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self._tokenizer

    @property
    def stats(self) -> BackendStats:
        """Counters since the backend was created, or since ``stats`` was last replaced by a
        fresh ``BackendStats`` (as a benchmark does between its runs)."""
        return self._runner.stats

    @stats.setter
    def stats(self, stats: BackendStats) -> None:
        self._runner.stats = stats

    @property
    def max_batch_size(self) -> int:
        return self._scheduler.max_batch_size

    @property
    def batch_wait_s(self) -> float:
        return self._scheduler.batch_wait_s

    @property
    def join_rows(self) -> int:
        """How many queued requests join a running batch together (see ``__init__``); a
        benchmark may change it while no request is pending."""
        return self._scheduler.join_rows

    @join_rows.setter
    def join_rows(self, rows: int) -> None:
        self._scheduler.join_rows = rows

    @property
    def join_wait_steps(self) -> int:
        """How many decode steps a queued request waits at most to join (see ``__init__``)."""
        return self._scheduler.join_wait_steps

    @join_wait_steps.setter
    def join_wait_steps(self, steps: int) -> None:
        self._scheduler.join_wait_steps = steps

    async def generate(self, request: GenerationRequest) -> GenerationResult:
        self._check_open()
        if request.adapter is not None:
            self._adapters.check(request.adapter)
        if request.choice is not None:
            return await self._generate_choice(request)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenerationResult] = loop.create_future()
        self._scheduler.put(Pending(request, future, loop, time.perf_counter()))
        return await future

    async def load_adapter(self, name: str, path: str) -> None:
        if not name or "." in name or name == BASE_ADAPTER:
            raise BackendError(
                f"invalid adapter name {name!r}: use a non-empty name without '.', e.g. critic@v3"
            )
        await self._control(lambda: self._adapters.load(name, Path(path).expanduser().resolve()))

    async def unload_adapter(self, name: str) -> None:
        self._adapters.check(name)
        await self._control(lambda: self._adapters.unload(name))

    def adapters(self) -> list[str]:
        return self._adapters.names()

    def adapter_path(self, name: str) -> Path:
        """The folder a loaded adapter came from (UnknownAdapterError if ``name`` is not loaded)."""
        return self._adapters.path(name)

    async def aclose(self) -> None:
        """Stop the worker once the batch it is running finishes; queued requests fail."""
        if self._closed:
            return
        self._closed = True
        await self._scheduler.stop()
        self._adapters.close()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    async def _generate_choice(self, request: GenerationRequest) -> GenerationResult:
        """A choice request is one forward pass (graphs/policies/choice.py), run on the worker
        between batches or between two decode steps, so it never enters the decode loop."""
        submitted = time.perf_counter()
        results: list[GenerationResult] = []
        await self._control(lambda: results.append(self._runner.choose(request)), between_steps=True)
        return replace(results[0], latency_s=time.perf_counter() - submitted)

    def _check_open(self) -> None:
        if self._closed:
            raise BackendError(f"the in-process backend for {self.model_name} is closed")

    async def _control(self, run: Callable[[], None], between_steps: bool = False) -> None:
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._scheduler.put(Control(run, future, loop, between_steps))
        await future
