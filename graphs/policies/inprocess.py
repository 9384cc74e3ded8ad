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
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from peft import PeftConfig, PeftModelForCausalLM
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from graphs.policies.adapter_folder import (
    CONFIG_FILE,
    AdapterFolderError,
    check_loaded_keys,
    check_weights,
    is_size_mismatch,
    load_failure,
    read_lora_config,
)
from graphs.policies.adapter_switch import BASE_ADAPTER, AdapterSwitch
from graphs.policies.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    UnknownAdapterError,
)
from graphs.policies.choice import choose, option_token_ids
from graphs.policies.decoding import CANCELLED, DecodeBatch, Endings, Forward, Row, completion_text
from graphs.policies.final_decode import FinalLineState
from graphs.policies.lora_merge import AdapterMerger
from graphs.policies.models import load_model

JOIN_ROWS_DIVISOR = 8
JOIN_WAIT_STEPS = 4
"""Join policy defaults (see ``InProcessBackend.__init__``): join when max_batch_size / 8 rows
can (all free rows, if fewer), or once the oldest queued request has waited 4 steps. A join
costs one extra forward pass (the joiners' prefill, whose fixed cost is that of a whole
decode step on CPU) and a copy of the whole KV cache (the merge: about as much as the
concatenation every decode step already does); a free row wastes 1/64 of a step per step.
So a join waits for a few rows to share it, but never long: an episode's next turn waits
behind it. Chosen by this cost argument; not yet tuned on the bundled model (its bench was
not run on a quiet machine), see bench/play_throughput.py --join-rows/--join-wait-steps."""

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
    """Prefill passes: a new batch, or requests joining a running one."""
    decode_steps: int = 0
    """Forward passes, prefill included."""
    row_steps: int = 0
    """Rows in each forward pass, summed (finished rows not yet dropped included)."""
    generated_tokens: int = 0
    """Completion tokens returned to callers (EOS tokens are not counted)."""
    prefill_tokens: int = 0
    """Tokens run through prefill passes (padding not counted), those of choice requests included."""
    choice_passes: int = 0
    """Forward passes of choice requests (``choice.py``: one each, a row per option). A final
    line (``GenerationRequest.final``) needs none: it continues its row of the decode loop."""

    @property
    def mean_batch_size(self) -> float:
        """Requests per prefill."""
        return self.requests / self.batches if self.batches else 0.0

    @property
    def mean_rows_per_step(self) -> float:
        """How full forward passes were, on average."""
        return self.row_steps / self.decode_steps if self.decode_steps else 0.0


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
    between_steps: bool = False
    """It may also run between two decode steps of a running batch, which then waits for it
    (a constrained choice: one forward pass of its own). It sets the model up for itself
    with ``_adapters_for``. Otherwise it waits until no batch runs."""


_STOP = object()


@dataclass
class _Running:
    """The batch the worker is decoding, and the model set-up its rows need."""

    batch: DecodeBatch
    switch: AdapterSwitch
    endings: Endings


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
    ) -> None:
        """``join_rows`` (default ``max_batch_size // JOIN_ROWS_DIVISOR``, at least 1) and
        ``join_wait_steps``: queued requests join a running batch once that many of them can
        (or all its free rows can be filled), or once the oldest has waited that many steps."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if join_rows is not None and join_rows < 1:
            raise ValueError(f"join_rows must be >= 1, got {join_rows}")
        if join_wait_steps < 0:
            raise ValueError(f"join_wait_steps must be >= 0, got {join_wait_steps}")
        if tokenizer.pad_token_id is None:
            raise ValueError(
                "the tokenizer needs a pad token (load it with graphs.policies.models.load_model)"
            )
        self.model_name = model_name
        self.precision = str(model.dtype).removeprefix("torch.")
        """the weights' dtype ("float32", "bfloat16"): part of an evaluation's key"""
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.join_rows = join_rows or max(1, max_batch_size // JOIN_ROWS_DIVISOR)
        self.join_wait_steps = join_wait_steps
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
        self._running: _Running | None = None
        """The batch being decoded (worker thread only)."""
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
        dtype: str = "auto",
        max_batch_size: int = 64,
    ) -> InProcessBackend:
        """Load ``model`` ("bundled", a local folder or a hub id) with ``load_model``."""
        lm, tokenizer = load_model(model, cache_dir=cache_dir, device=device, dtype=dtype, serving=True)
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
        if request.choice is not None:
            return await self._generate_choice(request)
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

    # ------------------------------------------------------------- constrained choice (choice.py)

    async def _generate_choice(self, request: GenerationRequest) -> GenerationResult:
        """A choice request is one forward pass (graphs/policies/choice.py), run on the worker
        between batches or between two decode steps, so it never enters the decode loop."""
        submitted = time.perf_counter()
        results: list[GenerationResult] = []
        await self._control(lambda: results.append(self._choose_now(request)), between_steps=True)
        return replace(results[0], latency_s=time.perf_counter() - submitted)

    def _choose_now(self, request: GenerationRequest) -> GenerationResult:
        assert request.choice is not None
        if request.adapter is not None:
            self._check_adapter(request.adapter)  # it may have been unloaded since it was queued
        switch = AdapterSwitch(self._peft, self._merger)
        try:
            switch.prepare({request.adapter})
            with torch.inference_mode():
                result = choose(
                    self._model,
                    self._tokenizer,
                    request.messages,
                    request.choice,
                    request.sampling,
                    served_by=request.adapter or self.model_name,
                    adapter_names=switch.names([request.adapter] * len(request.choice.options)),
                )
        except Exception as exc:
            raise BackendError(
                f"in-process choice among {list(request.choice.options)} failed on {self.model_name}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        finally:
            switch.release()
        self.stats.choice_passes += 1
        self.stats.prefill_tokens += len(result.prompt_token_ids) * len(request.choice.options) + sum(
            len(ids) for ids in option_token_ids(self._tokenizer, request.choice)
        )
        return result

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

    async def _control(self, run: Callable[[], None], between_steps: bool = False) -> None:
        self._check_open()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._queue.put(_Control(run, future, loop, between_steps))
        await future

    def _fail_queued(self) -> None:
        while True:
            try:
                self._fail_items([self._queue.get_nowait()])
            except queue.Empty:
                return

    def _fail_items(self, items: list[Any]) -> None:
        for item in items:
            if isinstance(item, (_Pending, _Control)):
                _deliver(item.loop, item.future, error=BackendError("the in-process backend was closed"))

    # ---------------------------------------------------------------------------- worker side

    def _work(self) -> None:
        waiting: deque[tuple[int, Any]] = deque()
        """Items taken off the queue and not run yet, in order, with the decode step they were
        taken at. A control or stop is a barrier: no request behind it joins a running batch."""
        while True:
            running = self._running
            if running is not None:
                self._take_queued(waiting)
                _drop_abandoned(waiting)
                self._run_between_steps(running, waiting)
                self._running = self._advance(running, self._admit(running, waiting))
                continue
            item = waiting.popleft()[1] if waiting else self._queue.get()
            if item is _STOP:
                self._fail_items([i for _, i in waiting])
                return
            if isinstance(item, _Control):
                self._run_control(item)
                continue
            self._running = self._start(self._gather(item, waiting))

    def _gather(self, first: _Pending, waiting: deque[tuple[int, Any]]) -> list[_Pending]:
        """``first`` and the requests behind it, waiting up to ``batch_wait_s`` for more."""
        batch = [first]
        deadline = time.monotonic() + self.batch_wait_s
        while len(batch) < self.max_batch_size:
            if waiting:
                if not isinstance(waiting[0][1], _Pending):
                    break
                batch.append(waiting.popleft()[1])
                continue
            wait = deadline - time.monotonic()
            try:
                more = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if not isinstance(more, _Pending):
                waiting.append((self.stats.decode_steps, more))  # runs after this batch, in order
                break
            if not more.future.cancelled():  # a request whose caller has gone takes no row
                batch.append(more)
        return batch

    def _take_queued(self, waiting: deque[tuple[int, Any]]) -> None:
        while True:
            try:
                waiting.append((self.stats.decode_steps, self._queue.get_nowait()))
            except queue.Empty:
                return

    def _admit(self, running: _Running, waiting: deque[tuple[int, Any]]) -> list[_Pending]:
        """The queued requests that join the running batch now (see ``join_rows``)."""
        free = self.max_batch_size - len(running.batch.live)
        if free <= 0 or not waiting or not running.batch.joinable:
            return []
        ready = 0
        for _, item in waiting:
            if not isinstance(item, _Pending) or ready == free:
                break
            ready += 1
        waited = self.stats.decode_steps - waiting[0][0]
        if ready == 0 or (ready < min(free, self.join_rows) and waited < self.join_wait_steps):
            return []
        return [waiting.popleft()[1] for _ in range(ready)]

    def _run_between_steps(self, running: _Running, waiting: deque[tuple[int, Any]]) -> None:
        """Run the controls that may run in a running batch, up to the first barrier. Each sets
        the model up for itself, so the batch's set-up is released first (and made again
        before the next step)."""
        for entry in list(waiting):
            item = entry[1]
            if isinstance(item, _Control) and item.between_steps:
                waiting.remove(entry)
                running.switch.release()
                self._run_control(item)
            elif not isinstance(item, _Pending):
                return

    def _run_control(self, item: _Control) -> None:
        if item.future.cancelled():  # its caller has gone (an episode or command stopped): nobody wants it
            return
        try:
            item.run()
        except Exception as exc:  # delivered to the caller, the worker goes on
            _deliver(item.loop, item.future, error=exc)
        else:
            _deliver(item.loop, item.future, value=None)

    def _rows(self, pending: list[_Pending]) -> list[Row]:
        """Rows for the requests still awaited; a request that cannot be served fails alone."""
        rows: list[Row] = []
        for item in pending:
            if item.future.cancelled():
                continue
            try:
                rows.append(self._prepare_row(item))
            except BackendError as exc:
                _deliver(item.loop, item.future, error=exc)
        return rows

    def _prepare_row(self, pending: _Pending) -> Row:
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
        final = FinalLineState(request.final) if request.final is not None else None
        return Row(request, list(encoded["input_ids"]), owner=pending, final=final)

    def _result(self, row: Row) -> GenerationResult:
        line = row.final
        return GenerationResult(
            text=completion_text(self._tokenizer, row) if line is None else line.text,
            prompt_token_ids=row.prompt_ids,
            completion_token_ids=row.ids,
            logprobs=row.logprobs,
            finish_reason=row.finish,
            served_by=row.adapter or self.model_name,
            latency_s=time.perf_counter() - row.owner.submitted,
            chosen=None if line is None else line.chosen,
        )

    # ------------------------------------------------------------------------------- decoding

    @torch.inference_mode()
    def _start(self, pending: list[_Pending]) -> _Running | None:
        """Prefill a new batch; None if nothing is left to decode."""
        rows = self._rows(pending)
        if not rows:
            return None
        switch = AdapterSwitch(self._peft, self._merger)
        endings = Endings(self._tokenizer, self._eos_ids())
        try:
            batch = self._prefill(rows, switch, endings, {r.adapter for r in rows})
        except Exception as exc:  # one bad batch fails its requests, never the worker
            switch.release()
            self._fail_rows(rows, exc)
            return None
        return self._settle(_Running(batch, switch, endings))

    @torch.inference_mode()
    def _advance(self, running: _Running, joining: list[_Pending]) -> _Running | None:
        """Let ``joining`` join the running batch, then run one decode step."""
        batch = running.batch
        for row in batch.rows:
            if not row.finish and row.owner.future.cancelled():
                row.finish = CANCELLED  # the caller gave up: the row leaves at the next compaction
        rows = self._rows(joining)
        if rows:
            if len(batch.live) < len(batch.rows):
                batch.keep(batch.live)
            adapters = {r.adapter for r in batch.rows + rows}
            try:
                joined = self._prefill(rows, running.switch, running.endings, adapters)
            except Exception as exc:  # the joining requests fail; the running batch goes on
                self._fail_rows(rows, exc)
            else:
                self._deliver_finished(joined.rows)
                joined.keep(joined.live)
                batch.merge(joined)
        if not batch.live:
            running.switch.release()
            return None
        try:
            running.switch.prepare({r.adapter for r in batch.rows})  # a no-op unless they changed
            batch.step(self._forward_for(running.switch), running.endings)
        except Exception as exc:
            running.switch.release()
            self._fail_rows([r for r in batch.rows if not r.finish], exc)
            return None
        self.stats.decode_steps += 1
        self.stats.row_steps += len(batch.rows)
        return self._settle(running)

    def _prefill(
        self, rows: list[Row], switch: AdapterSwitch, endings: Endings, adapters: set[str | None]
    ) -> DecodeBatch:
        """Prefill ``rows`` as a batch of their own, with the model set up for ``adapters``
        (theirs and those of the rows they join)."""
        switch.prepare(adapters)
        batch = DecodeBatch.prefill(
            rows,
            self._forward_for(switch),
            DynamicCache(config=self._model.config),
            endings,
            self._tokenizer.pad_token_id,
            self._model.device,
        )
        self.stats.batches += 1
        self.stats.decode_steps += 1
        self.stats.row_steps += len(rows)
        self.stats.prefill_tokens += sum(len(r.prompt_ids) for r in rows)
        return batch

    def _settle(self, running: _Running) -> _Running | None:
        """Deliver the rows that have just finished, drop finished rows once they are enough
        of the batch (``COMPACT_FRACTION``); None when no row is left."""
        batch = running.batch
        self._deliver_finished(batch.rows)
        live = batch.live
        if not live:
            running.switch.release()
            return None
        if len(batch.rows) - len(live) >= COMPACT_FRACTION * len(batch.rows):
            batch.keep(live)
        return running

    def _deliver_finished(self, rows: list[Row]) -> None:
        """Answer each finished row once, as soon as it finishes (its episode goes on at once)."""
        for row in rows:
            if row.finish and not row.delivered:
                row.delivered = True
                if row.finish == CANCELLED:
                    continue
                self.stats.requests += 1
                self.stats.generated_tokens += len(row.ids)
                _deliver(row.owner.loop, row.owner.future, value=self._result(row))

    def _fail_rows(self, rows: list[Row], exc: Exception) -> None:
        error = BackendError(
            f"in-process generation failed for a batch of {len(rows)} request(s) on "
            f"{self.model_name}: {type(exc).__name__}: {exc}"
        )
        for row in rows:
            row.delivered = True
            _deliver(row.owner.loop, row.owner.future, error=error)

    def _forward_for(self, switch: AdapterSwitch) -> Forward:
        def forward(
            input_ids: torch.Tensor,
            mask: torch.Tensor,
            positions: torch.Tensor,
            cache: DynamicCache,
            rows: list[Row],
        ) -> torch.Tensor:
            names = switch.names([r.adapter for r in rows])
            extra = {"adapter_names": names} if names is not None else {}
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

        return forward

    def _eos_ids(self) -> set[int]:
        ids = {self._tokenizer.eos_token_id}
        config_eos = getattr(self._model.generation_config, "eos_token_id", None)
        ids.update(config_eos if isinstance(config_eos, list) else [config_eos])
        ids.discard(None)
        return ids  # type: ignore[return-value]

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
                # bfloat16 weights would round a small LoRA update away: merge only float32 ones
                base = self._peft.get_base_model()
                merge = base.device.type == "cpu" and base.dtype == torch.float32
                self._merger = AdapterMerger(self._peft) if merge else None
            result = self._peft.load_adapter(str(path), adapter_name=name)
            check_loaded_keys(name, result.missing_keys, result.unexpected_keys)
        except Exception as exc:
            self._discard_adapter(name, created)
            # a size mismatch is summed up in the message: chained, its full text would show in tracebacks
            cause = None if is_size_mismatch(exc) else exc
            raise BackendError(
                f"could not load adapter folder {path} as {name!r} on {self.model_name}: "
                f"{load_failure(exc, getattr(config, 'r', None))}. Check that it is a LoRA adapter trained for "
                "this base model."
            ) from cause
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


def _read_adapter_config(path: Path) -> PeftConfig:
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


def _drop_abandoned(waiting: deque[tuple[int, Any]]) -> None:
    """Forget the queued requests and controls whose caller has gone (their future is cancelled:
    an episode stopped, a command was interrupted), so that none is admitted to the running batch,
    takes a free row or runs a forward pass of its own."""
    kept = [entry for entry in waiting
            if not (isinstance(entry[1], (_Pending, _Control)) and entry[1].future.cancelled())]
    if len(kept) < len(waiting):
        waiting.clear()
        waiting.extend(kept)


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
