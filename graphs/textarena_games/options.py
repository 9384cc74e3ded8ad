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
    openings: bool = True
    """start the games of envs without chance (tic-tac-toe, Tak, Othello, rock-paper-scissors) with two random
    legal moves drawn from the task's seed, so that their tasks differ; off: every task starts where textarena does"""

    def __post_init__(self) -> None:
        check_env(self.env)
