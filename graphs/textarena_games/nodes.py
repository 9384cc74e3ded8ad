"""The steps of a textarena episode: the env starts (with its random opening moves, if it has
any and --openings is on), the seat of the player textarena names moves (its whole response
is the action, as textarena's own agents send it), textarena judges it, and at the end its
final rewards are logged for each seat and as the episode's judgment (judge policy
"textarena"; a draw is a judgment with no winner, as ratings count ties).
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime

from graphs.context import EpisodeContext
from graphs.textarena_games import credit
from graphs.textarena_games.credit import OPPONENT, PLAYER
from graphs.textarena_games.envs import ENVS
from graphs.textarena_games.opening import play_opening
from graphs.textarena_games.options import TextArenaOptions
from graphs.textarena_games.prompts import move_messages
from graphs.textarena_games.session import EnvSession
from graphs.textarena_games.state import MoveRecord, Result, State, ToMove

JUDGE = "judge"
JUDGE_POLICY = "textarena"
MAX_MOVES = 1000
"""moves after which an episode that textarena has not ended fails (every env sparring plays ends well before)"""


class UnendingGameError(RuntimeError):
    pass


def seat_of(player: int, ctx: EpisodeContext) -> str:
    return PLAYER if player == ctx.task.meta["player"] else OPPONENT


def player_of(seat: str, ctx: EpisodeContext) -> int:
    learner = int(ctx.task.meta["player"])
    return learner if seat == PLAYER else 1 - learner


def _to_move(session: EnvSession) -> ToMove:
    player, observation = session.observe()
    return ToMove(player=player, observation=observation)


async def start(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    ctx = runtime.context
    options: TextArenaOptions = ctx.options  # type: ignore[assignment]
    ctx.stage = f"{options.env} reset"
    seed = int(ctx.task.meta["seed"])
    session = EnvSession(options.env, seed=seed)
    opening = play_opening(session, ENVS[options.env].opening if options.openings else 0, seed)
    return {"session": session, "opening": opening, "to_move": _to_move(session)}


async def player(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    return await _move(PLAYER, state, runtime.context)


async def opponent(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    return await _move(OPPONENT, state, runtime.context)


async def _move(seat: str, state: State, ctx: EpisodeContext) -> dict:
    session: EnvSession = state["session"]
    to_move, moves = state["to_move"], state["moves"]
    assert to_move is not None
    if len(moves) >= MAX_MOVES:
        raise UnendingGameError(f"{session.env_id} did not end within {MAX_MOVES} moves")
    turn = await ctx.generate(seat, move_messages(to_move["observation"]),
                              round=sum(m["seat"] == seat for m in moves))
    ctx.stage = f"{session.env_id} step of {seat}"
    step = session.step(to_move["player"], turn.text)
    ctx.reward(seat, credit.VALID, float(step.valid), turn_id=turn.id)
    record = MoveRecord(seat=seat, player=to_move["player"], turn_id=turn.id, valid=step.valid)
    return {"moves": [record], "done": step.done, "to_move": None if step.done else _to_move(session)}


def after_move(state: State, runtime: Runtime[EpisodeContext]) -> Literal["player", "opponent", "finish"]:
    if state["done"]:
        return "finish"
    assert state["to_move"] is not None
    return "player" if seat_of(state["to_move"]["player"], runtime.context) == PLAYER else "opponent"


async def finish(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    ctx = runtime.context
    ctx.stage = "finish"
    session: EnvSession = state["session"]
    ending = session.close()
    players = {seat: player_of(seat, ctx) for seat in (PLAYER, OPPONENT)}
    rewards = {seat: ending.rewards[p] for seat, p in players.items()}
    winner = max(rewards, key=rewards.__getitem__) if rewards[PLAYER] != rewards[OPPONENT] else None
    forfeited = [seat for seat, p in players.items() if ending.forfeited[p]]
    reason = next((r for r in ending.reasons.values() if r), "")
    for seat, reward in rewards.items():
        last = next((m["turn_id"] for m in reversed(state["moves"]) if m["seat"] == seat), None)
        ctx.reward(seat, credit.OUTCOME, reward, turn_id=last, reason=reason)
        ctx.reward(seat, credit.WIN, float(seat == winner), turn_id=last)
        ctx.reward(seat, credit.FORFEIT, float(seat in forfeited), turn_id=last)
    loser = None if winner is None else (OPPONENT if winner == PLAYER else PLAYER)
    ctx.judgment(judge_seat=JUDGE, winner_seat=winner, loser_seat=loser, preferred_turn_id=None,
                 rejected_turn_id=None, rationale=reason or "textarena gave no reason", judge_policy=JUDGE_POLICY,
                 rubric=credit.OUTCOME)
    result = Result(players=players, rewards=rewards, winner=winner, reason=reason, forfeited=forfeited)
    return {"done": True, "result": result}
