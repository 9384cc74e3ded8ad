"""What a game package exports, and the registry of games by name."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graphs.context import GameOptions
from graphs.seats import Seat
from graphs.tasks.base import Task


class UnknownGameError(ValueError):
    pass


@dataclass(frozen=True)
class EpisodeOutcome:
    reward: float | None
    """headline reward of the episode (None when the task has no ground truth)"""
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GameSpec:
    name: str
    description: str
    seats: tuple[Seat, ...]
    build: Callable[[], Any]
    """Returns the compiled LangGraph graph (context_schema=EpisodeContext)."""
    initial_state: Callable[[Task, GameOptions], dict[str, Any]]
    outcome: Callable[[dict[str, Any]], EpisodeOutcome]
    """Reads the final state and returns the episode's headline reward and summary."""

    def seat(self, name: str) -> Seat:
        for seat in self.seats:
            if seat.name == name:
                return seat
        raise KeyError(f"game {self.name!r} has no seat {name!r}; its seats: {', '.join(s.name for s in self.seats)}")


def game_registry() -> dict[str, GameSpec]:
    from graphs.debate.graph import GAME as debate
    from graphs.math_reflection.graph import GAME as math_reflection

    return {g.name: g for g in (math_reflection, debate)}


def get_game(name: str) -> GameSpec:
    games = game_registry()
    if name not in games:
        raise UnknownGameError(f"unknown game {name!r}; available games: {', '.join(sorted(games))}")
    return games[name]
