"""Batched decoding with our own loop: rows that decode together, joined by new rows as they run.

A ``DecodeBatch`` holds the rows decoding now and one KV cache for all of them. Prompts are
left-padded; every row's positions are counted from its own attention mask (``lengths``), so
padding never shifts them. Rows that arrive while a batch runs are prefilled on their own
(``DecodeBatch.prefill``) and then merged into it (``merge``): the narrower of the two caches
gets empty (masked) columns on the left, and both are stacked along the batch dimension. Rows
that finish leave it (``keep``), and cache columns that no remaining row uses are cut off the
left, so the cache is as wide as its longest row, however long the batch has been running.

Merging and dropping rows copy the whole cache; a decode step does not (the cache's layers grow
in place, ``graphs.policies.kv_cache``).

A row with a final line (``Row.final``) switches from free decoding to forced tokens and then
to an option (``graphs.policies.final_decode``) within the batch; the cache columns of the
free tokens it drops are masked, never removed, so the other rows are not touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedTokenizerBase

from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.final_decode import FinalLineState
from graphs.policies.kv_cache import GrowingLayer
from graphs.policies.sampling import Sampler


@dataclass
class Row:
    """Decoding state of one request."""

    request: GenerationRequest
    prompt_ids: list[int]
    owner: Any = None
    """What the caller of the decoder needs back with the row (the backend: its queue entry)."""
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = ""
    """"stop" or "length" once finished (``CANCELLED`` if abandoned)."""
    stopped_by_string: bool = False
    delivered: bool = False
    """Set by the caller once it has handed the finished row over."""
    final: FinalLineState | None = None
    """For a request with a final line: where the row is in it."""

    @property
    def params(self) -> SamplingParams:
        return self.request.sampling

    @property
    def adapter(self) -> str | None:
        return self.request.adapter


Forward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, DynamicCache, list[Row]], torch.Tensor]
"""(input_ids, attention_mask, position_ids, cache, rows) -> the last position's logits per row."""


def completion_text(tokenizer: PreTrainedTokenizerBase, row: Row) -> str:
    """The text of a row's tokens, cut before the stop string that ended it (as vLLM does)."""
    text = tokenizer.decode(row.ids, skip_special_tokens=True)
    if row.stopped_by_string:
        cuts = [text.find(s) for s in row.params.stop if s in text]
        if cuts:
            text = text[: min(cuts)]
    return text


class Endings:
    """Decides when a row is finished: an EOS token, a stop string, or max_new_tokens; for a
    row with a final line, these (and the marker's first word) end its free part instead."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, eos_ids: set[int]) -> None:
        self._tokenizer = tokenizer
        self.eos_ids = eos_ids

    def advance(self, row: Row, token: int, logprob: float) -> None:
        line = row.final
        if line is not None and not line.free:
            belongs, complete = line.take(token)
            if belongs:
                row.ids.append(token)
                row.logprobs.append(logprob)
            if complete:
                row.finish = "stop"
            return
        if token in self.eos_ids:
            self._end(row, "stop")
            return
        row.ids.append(token)
        row.logprobs.append(logprob)
        if row.params.stop and self._hits_stop(row):
            row.stopped_by_string = True
            self._end(row, "stop")
        elif line is not None and line.marker_in(self._tail(row, line.window)):
            self._end(row, "stop")
        elif len(row.ids) >= row.params.max_new_tokens:
            self._end(row, "length")

    def _end(self, row: Row, finish: str) -> None:
        """Finish the row, or end the free part of a row with a final line (its forced part
        begins: the tokens it drops are cut from ``ids`` here and from the cache by the batch)."""
        if row.final is None:
            row.finish = finish
            return
        keep = row.final.start(self._tokenizer, row.ids, completion_text(self._tokenizer, row))
        del row.ids[keep:], row.logprobs[keep:]
        row.stopped_by_string = False

    def _hits_stop(self, row: Row) -> bool:
        """Whether the newest token completed a stop string.

        Only the tail is decoded: a stop string of n characters spans at most 4n tokens (a
        character is at most 4 byte-level tokens), and it is checked after every token.
        """
        tail = self._tail(row, 4 * max(len(s) for s in row.params.stop) + 2)
        return any(s in tail for s in row.params.stop)

    def _tail(self, row: Row, window: int) -> str:
        return self._tokenizer.decode(row.ids[-window:], skip_special_tokens=True)


class DecodeBatch:
    """Rows decoding together. Row i of every tensor is ``rows[i]``; finished rows stay (their
    outputs ignored) until ``keep`` drops them."""

    def __init__(
        self,
        rows: list[Row],
        cache: DynamicCache,
        mask: torch.Tensor,
        lengths: torch.Tensor,
        tokens: torch.Tensor,
        sampler: Sampler,
    ) -> None:
        self.rows = rows
        self.cache = cache
        self.mask = mask
        """(rows, width): 1 where a cache column holds one of the row's tokens."""
        self.lengths = lengths
        """Tokens of each row in the cache: the position of its next token."""
        self.tokens = tokens
        """The next token of each row, fed at the next step."""
        self.sampler = sampler

    @classmethod
    def prefill(
        cls,
        rows: list[Row],
        forward: Forward,
        cache: DynamicCache,
        endings: Endings,
        pad_token_id: int,
        device: torch.device,
    ) -> DecodeBatch:
        """Run the left-padded prompts of ``rows`` through the model and choose their first tokens."""
        width = max(len(r.prompt_ids) for r in rows)
        input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, width - len(row.prompt_ids) :] = torch.tensor(row.prompt_ids)
            mask[i, width - len(row.prompt_ids) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp_(min=0)
        sampler = Sampler([r.params for r in rows], device)
        logits = forward(input_ids, mask, positions, cache, rows)
        batch = cls(rows, cache, mask, mask.sum(-1), input_ids[:, -1], sampler)
        batch._choose(logits, endings)
        return batch

    @property
    def live(self) -> list[int]:
        """Indexes of the rows still decoding."""
        return [i for i, row in enumerate(self.rows) if not row.finish]

    @property
    def joinable(self) -> bool:
        """Whether rows can be merged into this batch: its cache is made of plain growing
        layers (sliding-window or other layers keep positions that padding would break)."""
        return all(type(layer) is GrowingLayer and layer.is_initialized for layer in self.cache.layers)

    def step(self, forward: Forward, endings: Endings) -> None:
        """Feed every row its next token and choose the one after."""
        mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=-1)
        logits = forward(self.tokens[:, None], mask, self.lengths[:, None], self.cache, self.rows)
        self.mask = mask
        self.lengths = self.lengths + 1
        self._choose(logits, endings)

    def _choose(self, logits: torch.Tensor, endings: Endings) -> None:
        forced: dict[int, int] = {}
        allowed: dict[int, list[int]] = {}
        for i, row in enumerate(self.rows):
            line = row.final
            if line is None or line.free or row.finish:
                continue
            if line.forced:
                forced[i] = line.forced[0]
            else:
                allowed[i] = line.allowed(endings.eos_ids)
        tokens, logprobs = self.sampler(logits, forced, allowed)
        for i, (row, token, logprob) in enumerate(zip(self.rows, tokens.tolist(), logprobs.tolist(), strict=True)):
            if row.finish:
                continue
            endings.advance(row, token, logprob)
            if row.final is not None and row.final.rewind:
                row.final.rewind = False
                tokens[i] = self._rewind(i, row)
        self.tokens = tokens

    def _rewind(self, index: int, row: Row) -> int:
        """Make the row's last kept token its next one: mask the cache columns from its
        position on (it is fed again, so that its logits score what follows); returns it."""
        sequence = row.prompt_ids + row.ids
        position = len(sequence) - 1
        columns = self.mask[index].nonzero().squeeze(-1)
        self.mask[index, columns[position:]] = 0
        lengths = self.lengths.clone()
        lengths[index] = position
        self.lengths = lengths
        return sequence[position]

    def keep(self, indexes: list[int]) -> None:
        """Keep only the rows at ``indexes``, and only the cache columns they use."""
        index = torch.tensor(indexes, dtype=torch.long, device=self.mask.device)
        mask = self.mask[index]
        used = mask.any(dim=0)
        first = int(used.to(torch.int8).argmax()) if bool(used.any()) else 0
        for layer in self._layers():
            layer.keys = layer.keys[index, :, first:]
            layer.values = layer.values[index, :, first:]
        self.mask = mask[:, first:]
        self.lengths, self.tokens = self.lengths[index], self.tokens[index]
        self.sampler.select(indexes)
        self.rows = [self.rows[i] for i in indexes]

    def merge(self, other: DecodeBatch) -> None:
        """Append the rows of ``other`` (same model, same layers) to this batch."""
        width = max(self.mask.shape[1], other.mask.shape[1])
        for mine, theirs in zip(self._layers(), other._layers(), strict=True):
            mine.keys = torch.cat([_pad_left(mine.keys, width), _pad_left(theirs.keys, width)])
            mine.values = torch.cat([_pad_left(mine.values, width), _pad_left(theirs.values, width)])
        self.mask = torch.cat([_pad_left(self.mask, width), _pad_left(other.mask, width)])
        self.lengths = torch.cat([self.lengths, other.lengths])
        self.tokens = torch.cat([self.tokens, other.tokens])
        self.sampler.extend(other.sampler)
        self.rows = self.rows + other.rows

    def _layers(self) -> list[GrowingLayer]:
        return list(self.cache.layers)  # type: ignore[arg-type]


def _pad_left(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """Zeros on the left of the sequence dimension (the last of a mask, the one before the
    last of keys and values) up to ``width`` columns."""
    sequence_dim = tensor.dim() - 1 if tensor.dim() == 2 else tensor.dim() - 2
    missing = width - tensor.shape[sequence_dim]
    if missing == 0:
        return tensor
    pad = (missing, 0) if tensor.dim() == 2 else (0, 0, missing, 0)
    return F.pad(tensor, pad)
