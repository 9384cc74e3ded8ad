"""The steps of a retrieval episode: planter, researcher (with the search tool), judge."""

from __future__ import annotations

import random
from typing import Literal

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langgraph.runtime import Runtime

from graphs.context import EpisodeContext
from graphs.credit import CORRECT
from graphs.judges.rubric import Rubric
from graphs.judging import judge_score
from graphs.retrieval.answers import canonical_action, matches, mentions, read_reply, states
from graphs.retrieval.corpus import Corpus, Document, corpus_for
from graphs.retrieval.credit import CITED_GOLD, JUDGE_RELEVANCE, RELEVANCE
from graphs.retrieval.distractors import parse_plan, plant, planted_id, planter_messages, wrong_values
from graphs.retrieval.prompts import RELEVANCE_QUESTION, relevance_material, researcher_messages
from graphs.retrieval.state import Planted, State, Step, Verdict
from graphs.retrieval.tools import SEARCH_TOOL
from graphs.seats import RULES
from graphs.seeds import derive_seed
from graphs.tasks.base import Task

RELEVANCE_RUBRIC = Rubric("relevance", RELEVANCE_QUESTION)
OPENING = "opening"
"""the tool call id of the game's opening search"""


def start(state: State, runtime: Runtime[EpisodeContext]) -> Literal["planter", "opening", "researcher"]:
    ctx = runtime.context
    return "planter" if ctx.options.distractors and "planter" in ctx.policies else after_planter(state, runtime)


def after_planter(state: State, runtime: Runtime[EpisodeContext]) -> Literal["opening", "researcher"]:
    return "opening" if runtime.context.options.first_search else "researcher"


async def opening(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """The game's free first search (``--first-search``): the question itself, run by the search
    tool like the researcher's own, its results shown with the question (prompts.researcher_messages)."""
    question = runtime.context.task.question
    call = {"name": SEARCH_TOOL, "args": {"query": question}, "id": OPENING, "type": "tool_call"}
    step = Step(turn_id=None, kind="search", text=question, cited=[], formatted=True)
    return {"messages": [AIMessage(f"Search: {question}", tool_calls=[call], id=OPENING)], "steps": [step]}


async def planter(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """Ask the planter for ``distractors`` near-miss documents of the gold document that states
    the answer; a reply without a name and a value, or one that changes nothing, plants nothing."""
    ctx = runtime.context
    corpus = corpus_for(ctx.options.corpus)
    gold = answer_document(ctx.task, corpus)
    taken = set(corpus.documents)
    rng = random.Random(derive_seed(ctx.seed, ctx.task.id, "planted ids"))
    planted: list[Planted] = []
    count = ctx.options.distractors
    for index in range(count):
        turn = await ctx.generate("planter", planter_messages(gold, ctx.task.answer, index, count), round=index,
                                  parse=_plan_text)
        plan = parse_plan(turn.text)
        document = None if plan is None else plant(gold, ctx.task.answer, *plan, planted_id(gold.id, taken, rng))
        if document is None:
            continue
        taken.add(document.id)
        planted.append(Planted(id=document.id, title=document.title, text=document.text,
                               wrong_values=sorted(wrong_values(document, gold))))
    return {"planted": planted}


def answer_document(task: Task, corpus: Corpus) -> Document:
    """The gold document that states the answer (the last such one), else the last gold document."""
    gold = [corpus.documents[doc_id] for doc_id in task.meta["gold_docs"]]
    stating = [doc for doc in gold if matches(doc.text, [task.answer, *task.meta["aliases"]])]
    return (stating or gold)[-1]


async def researcher(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """One reply: a search (a tool call for the search node) while the researcher has searches
    of its own left, else the episode's answer (a search past the limit answers nothing)."""
    ctx = runtime.context
    limit, steps = ctx.options.searches, state["steps"]
    opened = bool(steps) and steps[0]["turn_id"] is None
    messages = researcher_messages(ctx.task.question, _exchanges(state["messages"]), limit, opened=opened)
    turn = await ctx.generate("researcher", messages, round=len(steps), parse=canonical_action)
    action, formatted = read_reply(turn.text)
    own = sum(step["kind"] == "search" and step["turn_id"] is not None for step in steps)
    if action is not None and action.kind == "search" and own < limit:
        call = {"name": SEARCH_TOOL, "args": {"query": action.text}, "id": turn.id, "type": "tool_call"}
        step = Step(turn_id=turn.id, kind="search", text=action.text, cited=[], formatted=formatted)
        return {"messages": [AIMessage(turn.text, tool_calls=[call], id=turn.id)], "steps": [step]}
    answer = action if action is not None and action.kind == "answer" else None
    step = Step(turn_id=turn.id, kind="answer", text=answer.text if answer else None,
                cited=list(answer.cited) if answer else [], formatted=formatted)
    return {"messages": [AIMessage(turn.text, id=turn.id)], "steps": [step]}


def after_researcher(state: State) -> Literal["search", "judge"]:
    return "search" if state["steps"][-1]["kind"] == "search" else "judge"


def _exchanges(messages: list[AnyMessage]) -> list[tuple[str, str]]:
    """(the researcher's search reply, the results it got) for each search so far."""
    results = {m.tool_call_id: str(m.content) for m in messages if isinstance(m, ToolMessage)}
    return [(str(m.content), results[m.tool_calls[0]["id"]]) for m in messages
            if isinstance(m, AIMessage) and m.tool_calls]


async def judge(state: State, runtime: Runtime[EpisodeContext]) -> dict:
    """Score the answer by rules: ``correct`` (a short answer that states the gold answer or an
    alias, normalised, and no number only a distractor it was shown states), ``relevance``
    (share of cited documents that are gold) and ``cited_gold`` (share of gold documents
    cited), all on the answer turn; with a model in the judge seat, also its rubric score of
    relevance (``judge_relevance``)."""
    ctx = runtime.context
    ctx.stage = "judge"
    task, final, planted = ctx.task, state["steps"][-1], state["planted"]
    accepted = [task.answer, *task.meta["aliases"]]
    gold, cited, answer = task.meta["gold_docs"], final["cited"], final["text"]
    seen = {doc_id for m in state["messages"] if isinstance(m, ToolMessage) for doc_id in m.artifact or []}
    shown = [p for p in planted if p["id"] in seen]
    wrong = {value for p in shown for value in p["wrong_values"] if not matches(value, accepted)}
    states_wrong = answer is not None and any(mentions(answer, value) for value in wrong)
    correct = states(answer, accepted) and not states_wrong
    relevance = sum(doc_id in gold for doc_id in cited) / len(cited) if cited else 0.0
    cited_gold = sum(doc_id in cited for doc_id in gold) / len(gold)
    fooled = states_wrong or any(p["id"] in cited for p in shown)
    info = {
        "answer": answer, "cited": cited, "gold": gold, "planted": [p["id"] for p in planted], "fooled": fooled,
        "distractor_seen": bool(shown), "answer_format": final["formatted"] and answer is not None,
        "searches": sum(s["kind"] == "search" and s["turn_id"] is not None for s in state["steps"]),
        "search_limit": ctx.options.searches, "hops": len(gold),
    }
    turn_id = final["turn_id"]
    ctx.reward("researcher", CORRECT, float(correct), turn_id=turn_id, **info)
    ctx.reward("researcher", RELEVANCE, relevance, turn_id=turn_id)
    ctx.reward("researcher", CITED_GOLD, cited_gold, turn_id=turn_id)
    said = "no answer" if answer is None else f"answer {answer!r}"
    ctx.judgment(judge_seat="judge", winner_seat=None, loser_seat=None, preferred_turn_id=None,
                 rejected_turn_id=None, judge_policy=RULES, rubric="correctness", score=float(correct),
                 scored_seat="researcher",
                 rationale=f"Gold {task.answer!r}: {said} is {'right' if correct else 'wrong'}"
                           + (", fooled by a distractor." if fooled else "."))
    ctx.judgment(judge_seat="judge", winner_seat=None, loser_seat=None, preferred_turn_id=None,
                 rejected_turn_id=None, judge_policy=RULES, rubric=RELEVANCE, score=relevance,
                 scored_seat="researcher",
                 rationale=f"Cited {', '.join(cited) or 'nothing'}; gold documents {', '.join(gold)}.")
    judged = None
    if "judge" in ctx.policies:
        known = {**corpus_for(ctx.options.corpus).documents,
                 **{p["id"]: Document(p["id"], p["title"], p["text"]) for p in shown}}
        documents = [known.get(doc_id, doc_id) for doc_id in cited]
        scored = await judge_score(ctx, "judge", RELEVANCE_RUBRIC, relevance_material(task.question, answer, documents),
                                   scored_seat="researcher", round=len(state["steps"]))
        judged = scored.score
        ctx.reward("researcher", JUDGE_RELEVANCE, judged, turn_id=turn_id)
    return {"verdict": Verdict(correct=correct, relevance=relevance, cited_gold=cited_gold, fooled=fooled,
                               judge_relevance=judged)}


def _plan_text(text: str) -> str | None:
    plan = parse_plan(text)
    return None if plan is None else f"{plan[0]} / {plan[1]}"
