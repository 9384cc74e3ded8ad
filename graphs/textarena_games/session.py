"""One episode's textarena environment, driven through textarena's public API.

``ta.make(env_id)``, ``env.reset(num_players=2, seed=...)``, ``env.get_observation()`` (the
player to move and its observation: textarena's default wrappers render it as text),
``env.step(action)`` (``(done, info)``) and ``env.close()`` (``(rewards, game_info)``: each
player's final reward, and per player its ``reason`` and whether it lost by an invalid move).

textarena reports an invalid move by letting the player move again (its two-player state
counts the error in ``error_count``) until its allowance is spent; then the player loses and
its ``game_info`` says ``invalid_move``. ``step`` reads those two.

textarena's games draw from the global ``random`` module (``reset`` seeds it). Episodes that
run at once would draw from one another's stream, so every call into the environment runs
under the episode's own random state, and the process's state is put back after it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import textarena as ta

NUM_PLAYERS = 2


@dataclass(frozen=True)
class Step:
    done: bool
    valid: bool
    """False when textarena reported the move invalid"""


@dataclass(frozen=True)
class Ending:
    rewards: dict[int, float]
    """player id -> textarena's final reward"""
    reasons: dict[int, str]
    forfeited: dict[int, bool]
    """player id -> it lost by invalid moves"""


class EnvSession:
    """A textarena env of one episode (made and reset on creation)."""

    def __init__(self, env_id: str, seed: int) -> None:
        self.env_id = env_id
        self._random = random.Random(seed).getstate()
        with self._own_random():
            self._env = ta.make(env_id)
            self._env.reset(num_players=NUM_PLAYERS, seed=seed)

    def observe(self) -> tuple[int, str]:
        """The player to move and what it sees (textarena's rendering, the whole game so far)."""
        with self._own_random():
            player, observation = self._env.get_observation()
        return int(player), str(observation)

    def step(self, player: int, action: str) -> Step:
        with self._own_random():
            done, _info = self._env.step(action)
        state = self._env.state
        invalid = state.game_info[player]["invalid_move"] if done else state.error_count > 0
        return Step(done=bool(done), valid=not invalid)

    def close(self) -> Ending:
        with self._own_random():
            rewards, game_info = self._env.close()
        players = range(NUM_PLAYERS)
        return Ending(rewards={p: float(rewards[p]) for p in players},
                      reasons={p: str(game_info[p].get("reason", "")) for p in players},
                      forfeited={p: bool(game_info[p]["invalid_move"]) for p in players})

    @contextmanager
    def _own_random(self) -> Iterator[None]:
        outer = random.getstate()
        random.setstate(self._random)
        try:
            yield
        finally:
            self._random = random.getstate()
            random.setstate(outer)

    def __repr__(self) -> str:  # the graph state holds the session; keep its repr short in errors
        return f"EnvSession({self.env_id!r})"
