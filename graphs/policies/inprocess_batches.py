"""The in-process backend's model work: decode batches that requests join and leave, and
choice passes, each answered on its caller's loop.

A batch is prefilled, then decoded step by step (``graphs.policies.decoding``); requests that
join a running batch are prefilled on their own and merged into its KV cache. Every row is
answered as soon as it finishes, and finished rows leave the cache once they are enough of it
(``COMPACT_FRACTION``). A failure fails the requests of the pass it happened in, never the
worker. All of it runs on the worker thread (``graphs.policies.inprocess_scheduler``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from graphs.policies.adapter_switch import AdapterSwitch
from graphs.policies.base import CANCELLED, BackendError, GenerationRequest, GenerationResult
from graphs.policies.choice import choose, option_token_ids
from graphs.policies.decoding import DecodeBatch, Endings, Forward, Row, completion_text
from graphs.policies.final_decode import FinalLineState
from graphs.policies.inprocess_adapters import LoadedAdapters
from graphs.policies.inprocess_queue import Pending, deliver
from graphs.policies.kv_cache import GrowingCache
from graphs.policies.logits_to_keep import last_positions

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
class Running:
    """The batch the worker is decoding, and the model set-up its rows need."""

    batch: DecodeBatch
    switch: AdapterSwitch
    endings: Endings


class BatchRunner:
    """Runs the model for the worker thread: starts and advances decode batches, runs choice
    passes, and counts what it did in ``stats``."""

    def __init__(self, adapters: LoadedAdapters, tokenizer: PreTrainedTokenizerBase, *, model_name: str) -> None:
        self.stats = BackendStats()
        self._adapters = adapters
        self._tokenizer = tokenizer
        self._model_name = model_name

    @torch.inference_mode()
    def start(self, pending: list[Pending]) -> Running | None:
        """Prefill a new batch; None if nothing is left to decode."""
        rows = self._rows(pending)
        if not rows:
            return None
        switch = self._adapters.switch()
        endings = Endings(self._tokenizer, self._eos_ids())
        try:
            batch = self._prefill(rows, switch, endings, {r.adapter for r in rows})
        except Exception as exc:  # one bad batch fails its requests, never the worker
            switch.release()
            self._fail_rows(rows, exc)
            return None
        return self._settle(Running(batch, switch, endings))

    @torch.inference_mode()
    def advance(self, running: Running, joining: list[Pending]) -> Running | None:
        """Let ``joining`` join the running batch, then run one decode step; None once no row
        is left."""
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

    def choose(self, request: GenerationRequest) -> GenerationResult:
        """A choice request's one forward pass (``graphs.policies.choice``), never in the decode loop."""
        assert request.choice is not None
        if request.adapter is not None:
            self._adapters.check(request.adapter)  # it may have been unloaded since it was queued
        switch = self._adapters.switch()
        try:
            switch.prepare({request.adapter})
            with torch.inference_mode():
                result = choose(
                    self._adapters.model,
                    self._tokenizer,
                    request.messages,
                    request.choice,
                    request.sampling,
                    served_by=request.adapter or self._model_name,
                    adapter_names=switch.names([request.adapter] * len(request.choice.options)),
                )
        except Exception as exc:
            raise BackendError(
                f"in-process choice among {list(request.choice.options)} failed on {self._model_name}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        finally:
            switch.release()
        self.stats.choice_passes += 1
        self.stats.prefill_tokens += len(result.prompt_token_ids) * len(request.choice.options) + sum(
            len(ids) for ids in option_token_ids(self._tokenizer, request.choice)
        )
        return result

    def _rows(self, pending: list[Pending]) -> list[Row]:
        """Rows for the requests still awaited; a request that cannot be served fails alone."""
        rows: list[Row] = []
        for item in pending:
            if item.future.cancelled():
                continue
            try:
                rows.append(self._prepare_row(item))
            except BackendError as exc:
                deliver(item.loop, item.future, error=exc)
        return rows

    def _prepare_row(self, pending: Pending) -> Row:
        request = pending.request
        if request.adapter is not None:
            self._adapters.check(request.adapter)  # it may have been unloaded since it was queued
        try:
            encoded = self._tokenizer.apply_chat_template(
                request.messages, add_generation_prompt=True, return_dict=True
            )
        except Exception as exc:
            raise BackendError(
                f"could not apply {self._model_name}'s chat template to the request's messages: {exc} "
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
            served_by=row.adapter or self._model_name,
            latency_s=time.perf_counter() - row.owner.submitted,
            chosen=None if line is None else line.chosen,
        )

    def _prefill(
        self, rows: list[Row], switch: AdapterSwitch, endings: Endings, adapters: set[str | None]
    ) -> DecodeBatch:
        """Prefill ``rows`` as a batch of their own, with the model set up for ``adapters``
        (theirs and those of the rows they join)."""
        switch.prepare(adapters)
        model = self._adapters.model
        batch = DecodeBatch.prefill(
            rows,
            self._forward_for(switch),
            GrowingCache(model.config),
            endings,
            self._tokenizer.pad_token_id,
            model.device,
        )
        self.stats.batches += 1
        self.stats.decode_steps += 1
        self.stats.row_steps += len(rows)
        self.stats.prefill_tokens += sum(len(r.prompt_ids) for r in rows)
        return batch

    def _settle(self, running: Running) -> Running | None:
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
                deliver(row.owner.loop, row.owner.future, value=self._result(row))

    def _fail_rows(self, rows: list[Row], exc: Exception) -> None:
        error = BackendError(
            f"in-process generation failed for a batch of {len(rows)} request(s) on "
            f"{self._model_name}: {type(exc).__name__}: {exc}"
        )
        for row in rows:
            row.delivered = True
            deliver(row.owner.loop, row.owner.future, error=error)

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
            out = self._adapters.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=last_positions(input_ids.shape[1], 1, input_ids.device),
                **extra,
            )
            return out.logits[:, -1, :]

        return forward

    def _eos_ids(self) -> set[int]:
        ids = {self._tokenizer.eos_token_id}
        config_eos = getattr(self._adapters.model.generation_config, "eos_token_id", None)
        ids.update(config_eos if isinstance(config_eos, list) else [config_eos])
        ids.discard(None)
        return ids  # type: ignore[return-value]
