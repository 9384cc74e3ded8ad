"""textarena as a game: seats, options, tasks, bots, outcome, rewards, credit, metrics and the gate.

The player is gated on ``score``: 1 for a win, 1/2 for a draw, 0 for a loss (in the envs
sparring plays, half of textarena's reward plus 1/2: the quantity its credit rule rewards). A
draw counts for more than a loss, so a learner that stops losing to a strong opponent is seen
to improve; ``win_rate`` and the rest are reported beside it.
"""

from __future__ import annotations

from typing import Any

from graphs.contract import EpisodeOutcome, GameSpec, GateMetric
from graphs.policies.base import Message
from graphs.seats import RULES, Seat, SeatKind
from graphs.tasks.base import Task
from graphs.textarena_games import credit
from graphs.textarena_games.bots import BOTS
from graphs.textarena_games.credit import OPPONENT, PLAYER
from graphs.textarena_games.metrics import textarena_metrics
from graphs.textarena_games.options import TextArenaOptions
from graphs.textarena_games.prompts import SYSTEM
from graphs.textarena_games.tasks import TEXTARENA_TASKS

SEATS = (
    Seat(PLAYER, SeatKind.LEARNER, "Plays the task's textarena player: reads textarena's observation, answers with "
         "a move in textarena's format."),
    Seat(OPPONENT, SeatKind.CONTEXT, "Plays the other player: a scripted bot (scripted:textarena-random, "
         "scripted:textarena-first) or a model.", "scripted:textarena-random"),
    Seat("judge", SeatKind.JUDGE, "textarena's own rules: each move's validity and the final rewards (no model call).",
         RULES, takes_policy=False),
)


def initial_state(task: Task, options: TextArenaOptions) -> dict[str, Any]:
    if task.meta.get("player") not in (0, 1) or not isinstance(task.meta.get("seed"), int):
        raise ValueError(f"task {task.id!r} is not a textarena task (it needs a seed and a player, 0 or 1, in its "
                         "meta); play the 'textarena' task source or a file of its shape")
    return {"session": None, "opening": [], "to_move": None, "moves": [], "done": False, "result": None}


def outcome(state: dict[str, Any]) -> EpisodeOutcome:
    """Headline reward: the player's textarena reward."""
    result, moves = state["result"], state["moves"]
    summary = {
        "opening": state["opening"],
        "players": result["players"],
        "rewards": result["rewards"],
        "winner": result["winner"],
        "reason": result["reason"],
        "forfeited": result["forfeited"],
        "moves": len(moves),
        "invalid_moves": {seat: sum(not m["valid"] for m in moves if m["seat"] == seat)
                          for seat in (PLAYER, OPPONENT)},
    }
    return EpisodeOutcome(reward=result["rewards"][PLAYER], summary=summary)


def first_prompt(task: Task) -> list[Message]:
    """What names a task in online training. The player's real first prompt is textarena's
    opening observation, which depends on --env and, for Player 1, on the opponent's first move;
    GRPO trains on the prompt each turn got and uses this one only to tell tasks apart."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.question}]


GAME = GameSpec(
    name="textarena",
    description="A two-player game of the TextArena library (--env: tic-tac-toe, Othello, Kuhn poker...), "
                "textarena's rules judging each move and the winner.",
    seats=SEATS,
    graph="graphs.textarena_games.graph",
    initial_state=initial_state,
    outcome=outcome,
    options=TextArenaOptions,
    rewards={
        credit.VALID: "each move: textarena accepted it (1/0; an invalid one is retried once, then loses the game)",
        credit.OUTCOME: "each seat's last move: textarena's final reward for its player (+1 win, 0 draw, -1 loss)",
        credit.WIN: "each seat's last move: its reward beats the other seat's (1/0)",
        credit.FORFEIT: "each seat's last move: it lost by invalid moves (1/0)",
    },
    credit={PLAYER: credit.PLAYER_CREDIT},
    metrics=textarena_metrics,
    gate_metrics={PLAYER: GateMetric("score")},
    first_prompt=first_prompt,
    report_metrics=("score", "win_rate", "draw_rate", "invalid_move_rate", "forfeit_rate"),
    tasks=TEXTARENA_TASKS,
    bots=BOTS,
)
