"""The steps of a negotiation: the two negotiators' moves, in turn, and the judge.

The rules judge every move as it is made (``valid``, ``coherent``) and, at the end, the
deal's fairness and each negotiator's coherence, logged as judgments with rubric and score
(judge policy "rules"). When the judge seat has a model, it also scores the proposer's
coherence on the transcript (``graphs.judges.rubric``); a judge model that names no score
fails the episode with the cause.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Literal

from langgraph.runtime import Runtime

from graphs.context import EpisodeContext
from graphs.judges.rubric import Rubric
from graphs.judging import judge_score
from graphs.negotiation import credit, prompts
from graphs.negotiation.options import NegotiationOptions
from graphs.negotiation.pool import NEGOTIATORS, DealScores, Pool, parse_move, score_deal
from graphs.negotiation.rules import check_move, standing_offer
from graphs.negotiation.state import Decision, MoveRecord, State
from graphs.seats import RULES

COHERENCE_RUBRIC = Rubric(
    "coherence",
    "Judge Agent A only. Are its proposals possible with the pool, and consistent with what it said and proposed "
    "before: does it never ask for more after conceding, and accept only an offer the other agent made?",
    scale=5,
)


def pool_of(ctx: EpisodeContext) -> Pool:
    return Pool.from_meta(ctx.task.meta)


async def proposer(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    return await _move("proposer", state, runtime.context)


async def counterpart(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    return await _move("counterpart", state, runtime.context)


async def _move(seat: str, state: State, ctx: EpisodeContext) -> dict:
    """One move: the seat's turn, checked by the rules; ``valid`` and ``coherent`` on the turn."""
    options: NegotiationOptions = ctx.options  # type: ignore[assignment]
    pool, before = pool_of(ctx), state["moves"]
    can_accept = standing_offer(before, seat) is not None
    turn = await ctx.generate(
        seat,
        prompts.negotiator_messages(pool, seat, before, options.max_turns),
        round=len(before) // 2,
        parse=lambda text: None if (move := parse_move(text, pool)) is None else move.line(pool),
        final=prompts.move_line(pool, can_accept=can_accept) if options.constrain_moves else None,
    )
    move = None if turn.parsed is None else parse_move(turn.parsed, pool)
    check = check_move(pool, seat, move, before)
    why = {"problem": check.problem} if check.problem else {}
    ctx.reward(seat, credit.VALID, float(check.valid), turn_id=turn.id, **why)
    ctx.reward(seat, credit.COHERENT, float(check.coherent), turn_id=turn.id, **why)
    record = MoveRecord(seat=seat, turn_id=turn.id, text=turn.text, line=turn.parsed,
                        take=None if move is None or move.take is None else list(move.take),
                        accept=move is not None and move.accept, valid=check.valid, coherent=check.coherent,
                        problem=check.problem)
    return {"moves": [record]}


def after_move(state: State, runtime: Runtime[EpisodeContext]) -> Literal["proposer", "counterpart", "judge"]:
    last = state["moves"][-1]
    options: NegotiationOptions = runtime.context.options  # type: ignore[assignment]
    if (last["accept"] and last["valid"]) or len(state["moves"]) >= options.max_turns:
        return "judge"
    return "counterpart" if last["seat"] == "proposer" else "proposer"


def agreed_split(pool: Pool, moves: list[MoveRecord]) -> tuple[int, ...] | None:
    """The proposer's take in the deal: the offer the last move accepted (None: no deal)."""
    last = moves[-1]
    if not (last["accept"] and last["valid"]):
        return None
    offer = standing_offer(moves[:-1], last["seat"])
    assert offer is not None and offer["take"] is not None  # a valid Accept answers a standing offer
    take = tuple(offer["take"])
    return take if offer["seat"] == "proposer" else pool.rest(take)


async def judge(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    ctx = runtime.context
    ctx.stage = "judge"
    pool, moves = pool_of(ctx), state["moves"]
    scores = score_deal(pool, agreed_split(pool, moves))
    ctx.judgment(judge_seat="judge", winner_seat=None, loser_seat=None, preferred_turn_id=None,
                 rejected_turn_id=None, rationale=_fairness_rationale(pool, scores), judge_policy=RULES,
                 rubric=credit.FAIRNESS, score=scores.nash_ratio)
    coherence = {}
    for seat in NEGOTIATORS:
        own = [m for m in moves if m["seat"] == seat]
        coherence[seat] = sum(m["coherent"] for m in own) / len(own)
        problems = "; ".join(f"move {moves.index(m) + 1} {m['problem']}" for m in own if m["problem"])
        ctx.judgment(judge_seat="judge", winner_seat=None, loser_seat=None, preferred_turn_id=None,
                     rejected_turn_id=None, judge_policy=RULES, rubric=credit.COHERENCE, score=coherence[seat],
                     scored_seat=seat,
                     rationale=f"{sum(m['coherent'] for m in own)} of {len(own)} moves coherent"
                               + (f": {problems}." if problems else "."))
    judge_coherence = None
    if "judge" in ctx.policies:
        outcome = ("no deal" if scores.proposer_take is None
                   else f"Agent A takes {pool.describe(scores.proposer_take)}, Agent B the rest")
        scored = await judge_score(ctx, "judge", COHERENCE_RUBRIC, prompts.judge_material(pool, moves, outcome),
                                   scored_seat="proposer", round=len(moves) // 2)
        judge_coherence = scored.score
    _reward_outcome(ctx, moves, scores, coherence, judge_coherence)
    decision = Decision(proposer_take=None if scores.proposer_take is None else list(scores.proposer_take),
                        scores=asdict(scores), coherence=coherence, judge_coherence=judge_coherence)
    return {"decision": decision}


def _reward_outcome(ctx: EpisodeContext, moves: list[MoveRecord], scores: DealScores, coherence: dict[str, float],
                    judge_coherence: float | None) -> None:
    for seat in NEGOTIATORS:
        last = [m for m in moves if m["seat"] == seat][-1]["turn_id"]
        ctx.reward(seat, credit.VALUE_SHARE, scores.share[seat], turn_id=last, worth=scores.worth[seat])
        ctx.reward(seat, credit.AGREEMENT, float(scores.proposer_take is not None), turn_id=last)
        ctx.reward(seat, credit.FAIRNESS, scores.nash_ratio, turn_id=last)
        ctx.reward(seat, credit.PARETO_SHARE, scores.pareto_share, turn_id=last)
        ctx.reward(seat, credit.COHERENCE, coherence[seat], turn_id=last)
        if seat == "proposer" and judge_coherence is not None:
            ctx.reward(seat, credit.JUDGE_COHERENCE, judge_coherence, turn_id=last)


def _fairness_rationale(pool: Pool, scores: DealScores) -> str:
    if scores.proposer_take is None:
        return (f"No deal: 0 to both. The best Nash product was {pool.best_nash}, the best joint value "
                f"{pool.best_joint}.")
    bundles = {"proposer": scores.proposer_take, "counterpart": pool.rest(scores.proposer_take)}
    sides = "; ".join(f"{seat} gets {pool.describe(bundles[seat])}, worth {scores.worth[seat]} of "
                      f"{pool.total(seat)} to it" for seat in NEGOTIATORS)
    product = scores.worth["proposer"] * scores.worth["counterpart"]
    joint = scores.worth["proposer"] + scores.worth["counterpart"]
    return (f"{sides}. Nash product {product} of the best {pool.best_nash} ({scores.nash_ratio:.2f}); joint value "
            f"{joint} of the best {pool.best_joint} ({scores.pareto_share:.2f}); "
            + ("Pareto-optimal." if scores.pareto_optimal else "not Pareto-optimal."))
