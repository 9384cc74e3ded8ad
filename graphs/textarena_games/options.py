"""The options of textarena."""

from __future__ import annotations

from dataclasses import dataclass

from graphs.options import GameOptions
from graphs.textarena_games.envs import DEFAULT_ENV, check_env


@dataclass(frozen=True)
class TextArenaOptions(GameOptions):
    env: str = DEFAULT_ENV
    """the textarena environment played: TicTacToe-v0, WildTicTacToe-v0, SimpleTak-v0, Othello-v0-tiny,
    KuhnPoker-v0, PigDice-v0-short, GameOfPureStrategy-v0 or IteratedRockPaperScissors-v0"""

    def __post_init__(self) -> None:
        check_env(self.env)
