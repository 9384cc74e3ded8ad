"""TRL's conversational dataset columns, and the Arrow features every snapshot kind loads with.

TRL (``docs/source/dataset_formats.md``): a prompt is a list of ``{"role", "content"}``
messages; ``chosen``, ``rejected`` and ``completion`` are lists holding one assistant
message; ``messages`` is a whole conversation. Only ``role`` and ``content`` of a logged
message are kept. Metadata columns ride along: TRL's trainers drop the columns they do not
use (``remove_unused_columns``). No builder writes a ``margin`` column, which TRL's
RewardTrainer would read as a reward margin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from datasets import List, Value

Message = dict[str, str]

MESSAGES = List({"role": Value("string"), "content": Value("string")})
STRING = Value("string")
FLOAT = Value("float64")
TURN_METADATA = {"episode_id": STRING, "turn_id": STRING, "task_id": STRING, "seat": STRING}
PAIR_METADATA = {
    "seat": STRING,
    "task_id": STRING,
    "chosen_episode_id": STRING,
    "rejected_episode_id": STRING,
    "chosen_turn_id": STRING,
    "rejected_turn_id": STRING,
}


def chat(messages: Sequence[dict[str, Any]]) -> list[Message]:
    """Logged prompt messages as TRL conversational messages (role and content only)."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def assistant(text: str) -> list[Message]:
    """A completion in TRL's conversational format: one assistant message."""
    return [{"role": "assistant", "content": text}]
