"""What a seat reads: textarena's observation as the user message, under textarena's own
system prompt for game-playing agents."""

from __future__ import annotations

from graphs.policies.base import Message

SYSTEM = ("You are a competitive game player. Make sure you read the game instructions carefully, and always "
          "follow the required format.")
"""textarena's ``agents.basic_agents.STANDARD_GAME_PROMPT`` (copied: importing textarena takes a second or more)"""


def move_messages(observation: str) -> list[Message]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": observation}]
