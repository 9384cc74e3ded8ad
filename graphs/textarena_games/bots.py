"""Scripted players for any seat of textarena: they play a move textarena lists as legal.

A bot reads what a model in its seat reads: textarena's observation. The envs sparring plays
(``envs.ENVS``) name the legal moves on a line ("Available Moves: '[0]', '[4]'", "Valid moves:",
"Your available actions are:", "Your remaining hand:", "respond with one of:"); the bot takes
the latest such line. A line that lists nothing (Othello: "No valid moves - you may have to
skip") means any reply passes, and the bot says it passes.

- textarena-random: a listed move drawn with the request's seed; without one (greedy
  decoding, as `sparring eval` plays) with a hash of the observation, so the same state gets
  the same move: a fixed random policy (the env's openings, ``opening.py``, vary the games);
- textarena-first: the first listed move.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable

from graphs.policies.base import BackendError, GenerationRequest, Message
from graphs.policies.scripted import Bot

MOVES_LINE = re.compile(r"available moves|valid moves|available actions|possible actions|remaining hand|"
                        r"respond with one of", re.IGNORECASE)
MOVE = re.compile(r"\[[^\[\]\n]+\]")
PASS = "I have no legal move, so I pass."


def legal_moves(observation: str) -> list[str] | None:
    """The moves on the latest line of ``observation`` that names the legal moves (the text after
    its label, so a speaker tag like '[GAME]' is not one); None when no line names them."""
    for line in reversed(observation.splitlines()):
        label = MOVES_LINE.search(line)
        if label:
            return MOVE.findall(line[label.end():])
    return None


def _observation(messages: list[Message], bot: str) -> tuple[str, list[str]]:
    observation = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    moves = legal_moves(observation)
    if moves is None:
        raise BackendError(f"the textarena bot {bot!r} found no line listing the legal moves in its prompt: it plays "
                           "the textarena game's envs only (`sparring games` lists them)")
    return observation, moves


def listed_move_bot(name: str, pick: Callable[[list[str], str, GenerationRequest], str]) -> Bot:
    def bot(messages: list[Message], request: GenerationRequest) -> str:
        observation, moves = _observation(messages, name)
        return pick(moves, observation, request) if moves else PASS

    bot.__name__ = name
    return bot


def _random_move(moves: list[str], observation: str, request: GenerationRequest) -> str:
    seed = request.sampling.seed
    if seed is None:
        seed = int.from_bytes(hashlib.blake2b(observation.encode(), digest_size=8).digest(), "little")
    return random.Random(seed).choice(moves)


BOTS: dict[str, Bot] = {
    "textarena-random": listed_move_bot("textarena-random", _random_move),
    "textarena-first": listed_move_bot("textarena-first", lambda moves, observation, request: moves[0]),
}
