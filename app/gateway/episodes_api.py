"""Episodes of the external game: open one, attach rewards and judgments, end it.

``POST /v1/episodes`` opens an episode and answers its id, which the calls then send as
``X-Sparring-Episode``. Rewards and judgments are append-only events, accepted while the episode
is open and after it ended; a turn they name must be a turn of that episode. Ending twice, or
ending an episode that does not exist, is refused.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.gateway.errors import GatewayError
from app.gateway.schemas import EpisodeEndIn, EpisodeIn, JudgmentIn, RewardIn
from app.gateway.service import Gateway
from storage.records import EpisodeStatus, JudgmentRecord, RewardRecord

router = APIRouter(prefix="/v1/episodes", tags=["episodes"])


def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


@router.post("", status_code=201, summary="Open an episode")
async def open_episode(body: EpisodeIn, request: Request) -> dict[str, Any]:
    book = gateway_of(request).book
    seats = body.seats if isinstance(body.seats, dict) else dict.fromkeys(body.seats, "external")
    episode = await book.open(game=body.game, task=body.task, seats=seats, split=body.split,
                              difficulty=body.difficulty, seed=body.seed)
    return {"id": episode.id, "game": body.game or book.game, "seats": list(seats)}


@router.post("/{episode_id}/rewards", status_code=201, summary="Attach a reward to the episode or one of its turns")
async def add_reward(episode_id: str, body: RewardIn, request: Request) -> dict[str, Any]:
    book = gateway_of(request).book
    await book.exists(episode_id)
    seat = body.seat
    if body.turn_id is not None:
        turn_seat = await book.seat_of_turn(episode_id, body.turn_id, "turn_id")
        seat = seat or turn_seat
    if seat is None:
        raise GatewayError(400, "seat: name the seat the reward is for (or the turn_id it rewards)", "invalid_request",
                           "seat")
    await book.reward(RewardRecord(episode_id, seat, body.name, body.value, turn_id=body.turn_id, info=body.info))
    return {"episode_id": episode_id, "seat": seat, "name": body.name, "value": body.value, "turn_id": body.turn_id}


@router.post("/{episode_id}/judgments", status_code=201, summary="Attach a judgment (preference and/or score)")
async def add_judgment(episode_id: str, body: JudgmentIn, request: Request) -> dict[str, Any]:
    book = gateway_of(request).book
    await book.exists(episode_id)
    for name in ("preferred_turn_id", "rejected_turn_id", "judge_turn_id"):
        if (turn_id := getattr(body, name)) is not None:
            await book.seat_of_turn(episode_id, turn_id, name)
    await book.judgment(JudgmentRecord(episode_id=episode_id, **body.model_dump()))
    return {"episode_id": episode_id, **body.model_dump()}


@router.post("/{episode_id}/end", summary="End an episode: it takes no more calls")
async def end_episode(episode_id: str, body: EpisodeEndIn, request: Request) -> dict[str, Any]:
    turns = await gateway_of(request).book.end(episode_id, EpisodeStatus(body.status), reward=body.reward,
                                               outcome=body.outcome, error=body.error)
    return {"id": episode_id, "status": body.status, "num_turns": turns, "reward": body.reward}
