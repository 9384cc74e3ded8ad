"""The seats and reward names of textarena, and the player's credit rule.

Each move gets ``valid`` (0 when textarena reported it invalid). When the game ends, each
seat gets, on its last move (or on no turn if it never moved): ``outcome``, textarena's final
reward for it (+1 win, 0 draw, -1 loss in the envs sparring plays), ``win`` (1/0: its reward
beats the other's) and ``forfeit`` (1/0: textarena says it lost by invalid moves).

The player's credit, for each of its moves: the episode's ``outcome`` minus 1 when textarena
reported that move invalid. Every move shares the result it led to, and an invalid move is
pushed down on its own. Without invalid moves, its mean over episodes is the gate metric
(``score``) rescaled: score = (outcome + 1) / 2 in the envs sparring plays.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphs.credit import CreditRule, CreditTurn

PLAYER, OPPONENT = "player", "opponent"
"""the learner seat (the task's textarena player) and the context seat (the other player)"""

VALID = "valid"
OUTCOME = "outcome"
WIN = "win"
FORFEIT = "forfeit"


def player_credits(turns: Sequence[CreditTurn], role: str) -> dict[str, float]:
    own = [t for t in turns if t.seat == role]
    outcome = next((t.rewards[OUTCOME] for t in reversed(own) if OUTCOME in t.rewards), None)
    if outcome is None:
        return {}
    return {t.turn_id: outcome - (1.0 - t.rewards[VALID]) for t in own if t.selected and VALID in t.rewards}


PLAYER_CREDIT = CreditRule(player_credits)
