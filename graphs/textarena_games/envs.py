"""The textarena environments sparring plays: two-player games checked to run offline (no
network, no judge model) on the pinned textarena, whose observation lists the legal moves
(so the scripted bots can play them) and whose final rewards are +1 win, 0 draw, -1 loss.

Left out, with the reason found on textarena 0.7.4 and Python 3.11: ConnectFour-v0 and Nim-v0
(no legal moves listed), Chess-v0, Checkers-v0, ReverseTicTacToe-v0 and IteratedStagHunt-v0
(their modules do not compile before Python 3.12), Debate-v0 and ScenarioPlanning-v0 (an
OpenRouter jury: an API key and the network), word games such as WordChains-v0 (NLTK
downloads its word list on import), and conversational games (SimpleNegotiation-v0,
IteratedPrisonersDilemma-v0) whose free-text turns no listed move stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_ENV = "TicTacToe-v0"


@dataclass(frozen=True)
class Env:
    description: str
    """what it is, with the shape of a move"""
    opening: int = 0
    """random legal moves played for the players before the seats take over (``--openings``): an env
    without chance (no cards, no dice) plays the same game from every seed, so a greedy learner against
    a bot would replay one game per side for every task; its opening is drawn from the task's seed"""


ENVS: dict[str, Env] = {
    "TicTacToe-v0": Env("tic-tac-toe on 3x3; a move names a cell: '[4]'", opening=2),
    "WildTicTacToe-v0": Env("tic-tac-toe where either player places X or O: '[X 4]'", opening=2),
    "SimpleTak-v0": Env("join two opposite edges of a 4x4 board with your stones: '[12]'", opening=2),
    "Othello-v0-tiny": Env("Othello on 4x4: '[row, col]'", opening=2),
    "KuhnPoker-v0": Env("three rounds of 3-card poker: '[check]', '[bet]', '[call]', '[fold]'"),
    "PigDice-v0-short": Env("a dice race to 50 points: '[roll]' or '[hold]'"),
    "GameOfPureStrategy-v0": Env("13 rounds bidding cards A-K for prize cards in a random order: '[Q]'"),
    "IteratedRockPaperScissors-v0": Env("9 rounds of rock-paper-scissors: '[rock]'", opening=2),
}


class UnknownEnvError(ValueError):
    pass


def check_env(env_id: str) -> str:
    if env_id not in ENVS:
        raise UnknownEnvError(f"unknown textarena env {env_id!r}; sparring plays: {', '.join(ENVS)} (two-player "
                              "games checked to run offline with their legal moves listed)")
    return env_id
