"""Constrained choice for the in-process backend: score every option in one forward pass.

A choice request (``base.Choice``) asks for ``prefix`` + one of ``options`` after the chat
prompt. Each option makes one row, prompt + tokens(prefix + option); one left-padded forward
pass gives every completion token's logprob. An option's score is the summed logprob of its
tokens after the part that all rows share (the prefix, up to where the options' tokens start
to differ), so the score compares options and not the long, common prefix (whose logprobs
differ between rows only by float round-off). Greedy takes the
best score; sampling draws an option with probability softmax(score / temperature).

The prefix and option are tokenized together, as the model would have written them (" correct"
after "Verdict:" is one token, not a space and a word).

A final line after free text (``GenerationRequest.final``) does not come here in-process: it
continues the free text's own decode row (``final_decode.py``), with no second prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from graphs.policies.base import Choice, GenerationResult, Message, SamplingParams
from graphs.policies.logits_to_keep import last_positions


@dataclass(frozen=True)
class Scored:
    """One option: the tokens of prefix + option and the logprob of each under the model."""

    token_ids: list[int]
    logprobs: list[float]
    score: float
    """summed logprob of the tokens after the part shared by every option"""


def chat_prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: list[Message]) -> list[int]:
    """The prompt the in-process backend decodes after: the chat template with the
    generation prompt (as the decode loop builds it)."""
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"])


def option_token_ids(tokenizer: PreTrainedTokenizerBase, choice: Choice) -> list[list[int]]:
    return [list(tokenizer(choice.prefix + option, add_special_tokens=False)["input_ids"]) for option in choice.options]


def score_options(
    model: torch.nn.Module,
    prompt_ids: list[int],
    completions: list[list[int]],
    pad_id: int,
    adapter_names: list[str] | None = None,
) -> list[Scored]:
    """Logprobs of each completion after ``prompt_ids`` in one forward pass (rows left-padded,
    positions counted from the mask, as in the decode loop); call under ``torch.inference_mode``."""
    longest = max(len(c) for c in completions)
    width = len(prompt_ids) + longest
    input_ids = torch.full((len(completions), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(completions), width), dtype=torch.long)
    for i, completion in enumerate(completions):
        row = prompt_ids + completion
        input_ids[i, width - len(row) :] = torch.tensor(row)
        mask[i, width - len(row) :] = 1
    device = next(model.parameters()).device
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp_(min=0)
    extra = {"adapter_names": adapter_names} if adapter_names is not None else {}
    keep = last_positions(width, longest + 1, device)  # the logits before each completion token
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep, **extra)
    logits = out.logits
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    shared = shared_length(completions)
    scored = []
    for i, completion in enumerate(completions):
        start = longest - len(completion)  # logits index predicting the completion's first token
        rows = torch.arange(start, start + len(completion), device=device)
        own = logprobs[i, rows, torch.tensor(completion, device=device)].tolist()
        scored.append(Scored(completion, own, sum(own[shared:])))
    return scored


def pick(scores: list[float], sampling: SamplingParams) -> int:
    """Index of the chosen option: the best score when greedy, else a draw by softmax(score / T)
    from a generator seeded with the request's seed (the global one when unseeded)."""
    if sampling.temperature == 0:
        return max(range(len(scores)), key=scores.__getitem__)
    weights = torch.softmax(torch.tensor(scores, dtype=torch.float64) / sampling.temperature, dim=0)
    generator = torch.Generator().manual_seed(sampling.seed) if sampling.seed is not None else None
    return int(torch.multinomial(weights, 1, generator=generator))


def choose(
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    messages: list[Message],
    choice: Choice,
    sampling: SamplingParams,
    *,
    served_by: str,
    adapter_names: list[str] | None = None,
) -> GenerationResult:
    """Serve a choice request: the result's text is ``choice.prefix`` + the chosen option."""
    prompt_ids = chat_prompt_ids(tokenizer, messages)
    completions = option_token_ids(tokenizer, choice)
    scored = score_options(model, prompt_ids, completions, tokenizer.pad_token_id, adapter_names)
    index = pick([s.score for s in scored], sampling)
    best, option = scored[index], choice.options[index]
    return GenerationResult(
        text=choice.prefix + option,
        prompt_token_ids=prompt_ids,
        completion_token_ids=best.token_ids,
        logprobs=best.logprobs,
        finish_reason="stop",
        served_by=served_by,
        chosen=option,
    )


def shared_length(completions: list[list[int]]) -> int:
    """Number of leading tokens every completion has in common, less one when an option's
    tokens begin another's (each option keeps at least one scored token; what follows an
    option is not scored, as in vLLM's token-by-token guided choice)."""
    shared = 0
    for tokens in zip(*completions, strict=False):
        if any(t != tokens[0] for t in tokens):
            break
        shared += 1
    return min(shared, min(len(c) for c in completions) - 1)
