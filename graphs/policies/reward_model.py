"""Reward models: a base model with a one-score sequence-classification head, and a LoRA
adapter (trained by ``sparring train reward``) that adapts its layers and holds the trained head.

A reward model scores a conversation: the prompt messages followed by one assistant answer,
rendered by the tokenizer's chat template exactly as TRL's ``RewardTrainer`` rendered the
training rows (``apply_chat_template(messages, tokenize=True)``), and read at the last token
that is not padding (``config.pad_token_id``, set to the tokenizer's pad token as TRL sets it).
Higher means "more likely correct"; only differences are learned (Bradley-Terry), so an
absolute cut needs a threshold measured on data (the trainer's ``threshold`` metric).

``load_reward_base`` loads the base for training (the head is new and random, from the
caller's seed); ``RewardModel.load`` loads base and adapter for scoring, in eval mode.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from graphs.policies.base import Message
from graphs.policies.base_models import BUNDLED, ModelLoadError, resolve_device, resolve_dtype, resolve_model

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SCORE_BATCH = 8
"""Conversations scored per forward pass."""


def load_reward_base(
    model: str, *, cache_dir: Path, device: str = "auto", dtype: str | torch.dtype = "auto"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The base model with a fresh one-score head (``num_labels=1``; the causal LM head of
    the checkpoint is not loaded), its tokenizer (pad token: the EOS token when the model
    defines none), and ``config.pad_token_id`` set to the tokenizer's pad token."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    source = resolve_model(model, cache_dir)
    torch_device = resolve_device(device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        scorer = AutoModelForSequenceClassification.from_pretrained(
            source, num_labels=1, dtype=resolve_dtype(dtype, torch_device)
        )
    except Exception as exc:  # transformers raises OSError, ValueError, safetensors errors...
        hint = f' Use "{BUNDLED}" or a local folder written by save_pretrained.' if isinstance(source, str) else ""
        raise ModelLoadError(f"Could not load model {model!r} as a reward model: {exc}.{hint}") from exc
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(f"The tokenizer of {model!r} has neither a pad nor an EOS token; a reward model "
                                 "batch needs one to pad with. Use a chat model whose tokenizer defines them.")
        tokenizer.pad_token = tokenizer.eos_token
    scorer.config.pad_token_id = tokenizer.pad_token_id
    return scorer.to(torch_device), tokenizer


def conversation(prompt: Sequence[Message], answer: str) -> list[Message]:
    """What a reward model scores: the prompt messages, then the answer as the assistant's."""
    return [*prompt, {"role": "assistant", "content": answer}]


@torch.no_grad()
def score_conversations(
    model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, conversations: Sequence[Sequence[Message]],
    *, batch_size: int = SCORE_BATCH,
) -> list[float]:
    """The model's score of each conversation, in order (``model`` in eval mode)."""
    device = next(model.parameters()).device
    scores: list[float] = []
    for start in range(0, len(conversations), batch_size):
        ids = [
            tokenizer.apply_chat_template(list(messages), tokenize=True, return_dict=True)["input_ids"]
            for messages in conversations[start:start + batch_size]
        ]
        width = max(len(row) for row in ids)
        input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, row in enumerate(ids):  # right padding, as TRL's preference collator pads
            input_ids[i, : len(row)] = torch.tensor(row)
            attention_mask[i, : len(row)] = 1
        logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device)).logits
        scores.extend(float(value) for value in logits[:, 0].float().cpu())
    return scores


@dataclass
class RewardModel:
    """A published reward model loaded for scoring."""

    name: str
    """the adapter version's name (``verifier@v2``)"""
    model: Any
    """the PEFT sequence-classification model, in eval mode"""
    tokenizer: PreTrainedTokenizerBase
    threshold: float
    """the score above which an answer counts as correct"""

    @classmethod
    def load(
        cls, name: str, adapter_dir: Path, *, base_model: str, threshold: float, cache_dir: Path,
        device: str = "auto", dtype: str | torch.dtype = "auto",
    ) -> RewardModel:
        """Load ``base_model`` and the reward adapter folder ``adapter_dir`` (LoRA and head)."""
        from peft import PeftModel

        if not math.isfinite(threshold):
            raise ValueError(f"the threshold of reward model {name} must be a finite number, got {threshold}")
        base, tokenizer = load_reward_base(base_model, cache_dir=cache_dir, device=device, dtype=dtype)
        try:
            model = PeftModel.from_pretrained(base, str(adapter_dir))
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ModelLoadError(
                f"{name} in {adapter_dir} is not a reward model of {base_model!r}: {exc}. A verifier is trained by "
                f"`sparring train reward` on the same base model."
            ) from exc
        return cls(name, model.eval(), tokenizer, threshold)

    def score(self, conversations: Sequence[Sequence[Message]]) -> list[float]:
        """The score of each conversation (see ``score_conversations``)."""
        return score_conversations(self.model, self.tokenizer, conversations)
