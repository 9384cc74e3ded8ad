"""Random opening moves: for envs without chance, the task's seed picks the first moves.

Nothing in tic-tac-toe (or Tak, Othello, rock-paper-scissors) depends on textarena's seed, so
without an opening a greedy learner against a bot plays one game per side, whatever the task.
The opening's moves are drawn from the legal moves textarena lists, are no seat's turns, and
appear in the seats' observations as textarena reports them.
"""

from __future__ import annotations

import random

from graphs.textarena_games.bots import legal_moves
from graphs.textarena_games.session import EnvSession


class OpeningError(RuntimeError):
    pass


def play_opening(session: EnvSession, moves: int, seed: int) -> list[str]:
    """Play ``moves`` random legal moves for whoever is to move; the moves played."""
    rng = random.Random(f"textarena-opening:{seed}")
    played: list[str] = []
    for _ in range(moves):
        player, observation = session.observe()
        legal = legal_moves(observation)
        if not legal:
            raise OpeningError(f"{session.env_id} listed no legal move for opening move {len(played) + 1}; "
                               "play it with --no-openings")
        move = rng.choice(legal)
        step = session.step(player, move)
        if not step.valid or step.done:
            raise OpeningError(f"opening move {move} of {session.env_id} was "
                               f"{'refused' if not step.valid else 'the last'}; play it with --no-openings")
        played.append(move)
    return played
