"""The steps of a story: the writer's turn (candidates checked, one kept), the co-writer's turn,
and the judge's verdict on the whole story.

Every passage is checked by the judge's rules (``graphs/story/rules.py``) and gets a
``consistency`` reward (the share of checks passed, with the violations in its info) and a
per-turn judgment (rubric ``consistency``, its score, the seat scored). Of the writer's two
candidates the one that breaks fewer rules is kept (a ``consistency`` preference); when they
tie, the creativity judge decides: the judge seat's model when it has one (``judge_preference``,
rubric ``creativity``), else the rule proxy (more new words, rubric ``creativity-proxy``). Either
preference names the preferred and rejected turns, which share one prompt: a DPO pair. The
judged candidates get a ``creativity`` reward (1 preferred, 0 rejected).

At the end the judge logs the episode's consistency (mean score of the writer's kept passages)
and compares the writer's passages with the co-writer's for creativity: by the proxy always
(rubric ``creativity-proxy``, score of the writer 1 / 0.5 / 0), and by the model when the
judge seat has one (rubric ``creativity``; the two sides in an order fixed by the episode seed,
against position bias).
"""

from __future__ import annotations

import asyncio
from statistics import fmean
from typing import Literal

from langgraph.runtime import Runtime

from graphs.context import EpisodeContext, Reply
from graphs.judging import Side, judge_preference
from graphs.seats import RULES
from graphs.seeds import derive_seed
from graphs.story import prompts
from graphs.story.constraints import Constraints
from graphs.story.credit import CONSISTENCY
from graphs.story.credit import CREATIVITY as CREATIVITY_REWARD
from graphs.story.rules import PassageCheck, check_passage, new_words
from graphs.story.state import CO_WRITER, WRITER, Choice, Passage, State, Verdict

JUDGE = "judge"
PROXY = "rules:new-words"
"""judge_policy of the creativity proxy's judgments"""


def constraints_of(ctx: EpisodeContext) -> Constraints:
    return Constraints.from_dict(ctx.task.meta["constraints"])


async def writer(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    ctx = runtime.context
    c, texts = constraints_of(ctx), [p["text"] for p in state["passages"]]
    round_ = sum(p["seat"] == WRITER for p in state["passages"])
    last = round_ == ctx.options.rounds - 1
    messages = prompts.passage_messages(c, texts, WRITER, last=last)
    turns = await asyncio.gather(*(ctx.generate(WRITER, messages, round=round_) for _ in range(_candidates(ctx))))
    shown = messages[0]["content"]
    drafts = [_passage(turn, round_, check_passage(turn.text.strip(), c, story_before=texts, last=last), shown)
              for turn in turns]
    kept, by = await _choose(ctx, c, texts, list(turns), drafts, round_)
    for i, (turn, draft) in enumerate(zip(turns, drafts, strict=True)):
        _log_consistency(ctx, turn, draft, kept=i == kept)
    return {"passages": [drafts[kept]], "choices": [Choice(round=round_, by=by)]}


def _candidates(ctx: EpisodeContext) -> int:
    """The option's candidates, but one for a greedy writer: a second would be the same text."""
    return 1 if ctx.policies[WRITER].sampling.temperature == 0 else ctx.options.candidates


async def co_writer(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    ctx = runtime.context
    c, texts = constraints_of(ctx), [p["text"] for p in state["passages"]]
    round_ = sum(p["seat"] == CO_WRITER for p in state["passages"])
    messages = prompts.passage_messages(c, texts, CO_WRITER, last=False)
    turn = await ctx.generate(CO_WRITER, messages, round=round_)
    passage = _passage(turn, round_, check_passage(turn.text.strip(), c, story_before=texts, last=False),
                       messages[0]["content"])
    _log_consistency(ctx, turn, passage, kept=True)
    return {"passages": [passage]}


def after_writer(state: State, runtime: Runtime[EpisodeContext]) -> Literal["co_writer", "judge"]:
    written = sum(p["seat"] == WRITER for p in state["passages"])
    return "judge" if written >= runtime.context.options.rounds else "co_writer"


async def judge(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """The episode's consistency judgment, and the creativity of the writer against the co-writer."""
    ctx = runtime.context
    ctx.stage = "judge"
    c, passages = constraints_of(ctx), state["passages"]
    own = [p for p in passages if p["seat"] == WRITER]
    other = [p for p in passages if p["seat"] == CO_WRITER]
    score, violations = fmean(p["score"] for p in own), sum(len(p["violations"]) for p in own)
    ending = bool(own[-1]["ending"])
    ctx.judgment(judge_seat=JUDGE, winner_seat=None, loser_seat=None, preferred_turn_id=None,
                 rejected_turn_id=None, judge_policy=RULES, rubric=CONSISTENCY, score=score, scored_seat=WRITER,
                 rationale=f"the writer's {len(own)} passage(s): {violations} violation(s), ending "
                           f"{'reached' if ending else 'not reached'}")
    verdict = Verdict(writer_score=score, writer_violations=violations, ending_reached=ending,
                      creativity_winner=None, proxy_winner=None)
    if other:
        verdict["proxy_winner"] = _proxy_authors(ctx, own, other)
        if JUDGE in ctx.policies:
            verdict["creativity_winner"] = await _model_authors(ctx, c, passages, own, other)
    return {"verdict": verdict}


async def _choose(ctx: EpisodeContext, c: Constraints, texts: list[str], turns: list[Reply],
                  drafts: list[Passage], round_: int) -> tuple[int, str]:
    """The index of the kept candidate and how it was chosen (``Choice.by``)."""
    if len(turns) == 1:
        return 0, "single"
    a, b = drafts
    if a["score"] != b["score"]:
        win = 0 if a["score"] > b["score"] else 1
        _prefer(ctx, turns, win, rubric=CONSISTENCY, policy=RULES,
                rationale=f"candidate {'AB'[win]} breaks fewer constraints "
                          f"(scores {a['score']:.2f} vs {b['score']:.2f}): "
                          f"{'; '.join(drafts[1 - win]['violations'])}")
        return win, "consistency"
    if a["text"] == b["text"]:
        return 0, "identical"
    if JUDGE in ctx.policies:
        side_a, side_b = Side(WRITER, turns[0].id, a["text"]), Side(WRITER, turns[1].id, b["text"])
        winner = await judge_preference(ctx, JUDGE, prompts.CREATIVITY, prompts.judge_context(c, texts),
                                        side_a, side_b, round=round_)
        win, by = (0 if winner is side_a else 1), "creativity"
    else:
        if a["new_words"] == b["new_words"]:
            return 0, "tie"
        win, by = (0 if a["new_words"] > b["new_words"] else 1), prompts.CREATIVITY_PROXY
        _prefer(ctx, turns, win, rubric=prompts.CREATIVITY_PROXY, policy=PROXY,
                rationale=f"proxy, not a quality judgment: candidate {'AB'[win]} adds more new words "
                          f"({a['new_words']} vs {b['new_words']})")
    ctx.reward(WRITER, CREATIVITY_REWARD, 1.0, turn_id=turns[win].id, judged_by=by)
    ctx.reward(WRITER, CREATIVITY_REWARD, 0.0, turn_id=turns[1 - win].id, judged_by=by)
    return win, by


def _prefer(ctx: EpisodeContext, turns: list[Reply], win: int, *, rubric: str, policy: str, rationale: str) -> None:
    ctx.judgment(judge_seat=JUDGE, winner_seat=WRITER, loser_seat=WRITER, preferred_turn_id=turns[win].id,
                 rejected_turn_id=turns[1 - win].id, rationale=rationale, judge_policy=policy, rubric=rubric)


def _passage(turn: Reply, round_: int, check: PassageCheck, shown: str) -> Passage:
    text = turn.text.strip()
    return Passage(seat=turn.seat, turn_id=turn.id, round=round_, text=text, score=check.score,
                   violations=list(check.violations), ending=check.ending, new_words=new_words(text, shown))


def _log_consistency(ctx: EpisodeContext, turn: Reply, passage: Passage, *, kept: bool) -> None:
    violations = passage["violations"]
    ctx.reward(turn.seat, CONSISTENCY, passage["score"], turn_id=turn.id, violations=violations, kept=kept,
               ending=passage["ending"])
    ctx.judgment(judge_seat=JUDGE, winner_seat=None, loser_seat=None, preferred_turn_id=None,
                 rejected_turn_id=None, judge_policy=RULES, rubric=CONSISTENCY, score=passage["score"],
                 scored_seat=turn.seat,
                 rationale=f"{turn.seat} turn {turn.index}: " + ("; ".join(violations) or "keeps every constraint"))


def _proxy_authors(ctx: EpisodeContext, own: list[Passage], other: list[Passage]) -> str | None:
    """The proxy's comparison of the two authors: mean new words per passage (None: a tie)."""
    mine, theirs = fmean(p["new_words"] for p in own), fmean(p["new_words"] for p in other)
    winner = None if mine == theirs else WRITER if mine > theirs else CO_WRITER
    last = {WRITER: own[-1]["turn_id"], CO_WRITER: other[-1]["turn_id"]}
    loser = None if winner is None else CO_WRITER if winner == WRITER else WRITER
    ctx.judgment(judge_seat=JUDGE, winner_seat=winner, loser_seat=loser,
                 preferred_turn_id=last[winner] if winner else None, rejected_turn_id=last[loser] if loser else None,
                 judge_policy=PROXY, rubric=prompts.CREATIVITY_PROXY, scored_seat=WRITER,
                 score=1.0 if winner == WRITER else 0.5 if winner is None else 0.0,
                 rationale=f"proxy, not a quality judgment: new words per passage, writer {mine:.1f}, "
                           f"co-writer {theirs:.1f}")
    return winner


async def _model_authors(ctx: EpisodeContext, c: Constraints, passages: list[Passage], own: list[Passage],
                         other: list[Passage]) -> str:
    sides = [Side(seat, ps[-1]["turn_id"], "\n\n".join(p["text"] for p in ps))
             for seat, ps in ((WRITER, own), (CO_WRITER, other))]
    if derive_seed(ctx.seed, ctx.task.id, "authors") % 2:
        sides.reverse()
    winner = await judge_preference(ctx, JUDGE, prompts.CREATIVITY, prompts.authors_context(c, [p["text"] for p in
                                                                                              passages]),
                                    *sides, round=ctx.options.rounds)
    return winner.seat
