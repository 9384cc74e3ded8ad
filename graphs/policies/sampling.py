"""Per-row sampling for batched decoding: greedy, temperature and top-p, each row seeded alone."""

from __future__ import annotations

import torch

from graphs.policies.base import SamplingParams


class Sampler:
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

    def extend(self, other: Sampler) -> None:
        """Append the rows of ``other`` (rows joining a running batch), generators included."""
        self.params = self.params + other.params
        self.generators = self.generators + other.generators
        self._index()

    def __call__(
        self,
        logits: torch.Tensor,
        forced: dict[int, int] | None = None,
        allowed: dict[int, list[int]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Next tokens and their log-probabilities under the raw logits (before temperature).
        ``forced``: rows whose next token is given; ``allowed``: rows whose next token is picked
        among these ids only (the likeliest, or drawn at the row's temperature; no top_p)."""
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        tokens = logprobs.argmax(dim=-1)
        if self.sampled:
            tokens[self.sampled_index] = self._sample(logprobs[self.sampled_index])
        for i, ids in (allowed or {}).items():
            tokens[i] = self._pick(i, logprobs[i], ids)
        for i, token in (forced or {}).items():
            tokens[i] = token
        return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)

    def _pick(self, row: int, logprobs: torch.Tensor, ids: list[int]) -> int:
        index = torch.tensor(ids, dtype=torch.long, device=logprobs.device)
        candidates = logprobs[index]
        temperature = self.params[row].temperature
        if temperature == 0:
            return ids[int(candidates.argmax())]
        probs = torch.softmax(candidates / max(temperature, 1e-5), dim=-1)
        uniform = torch.empty_like(probs).uniform_(generator=self.generators[row])
        return ids[int(probs.div_(uniform.log_().neg_()).argmax())]

    def _sample(self, logprobs: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logprobs / self.temperature.clamp(min=1e-5)[:, None], dim=-1)  # tiny T: no inf
        if self.any_top_p:
            probs = probs.masked_fill(probs < nucleus_floor(probs, self.top_p[:, None]), 0.0)
        uniform = torch.empty_like(probs)
        for row, i in zip(uniform, self.sampled, strict=True):
            row.uniform_(generator=self.generators[i])
        # argmax(p / Exp(1) noise) is the Gumbel-max trick (an exponential race) without logs of p.
        return probs.div_(uniform.log_().neg_()).argmax(dim=-1)


NUCLEUS_CANDIDATES = 64
"""Top-p first looks for the nucleus among this many most likely tokens: a full sort of the
vocabulary costs ~3 ms per row on a CPU core, top-k of 64 about 1/50 of that. Rows whose
nucleus is larger (flat distributions) fall back to the full sort."""


def nucleus_floor(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
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
