"""The retrieval game: the shipped encyclopedia and questions, full-text search over them as a
LangGraph tool, the researcher's text actions, near-miss distractors, the rule judge and a model
judge, episodes through the runner and the CLI with scripted policies on real stores, every
dataset kind of the researcher, its metrics and gate, bad input, a retrain round on a tiny
model, and one run of the bundled model."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from game_runs import play_one_run
from model_logs import as_model_turns
from sqlalchemy import func, select
from typer.testing import CliRunner
from unconstrained import UnconstrainedBackend

from app.cli import app
from evaluation.evaluator import Evaluator
from graphs.metrics.stats import wilson
from graphs.policies.base import SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.registry import get_game, scripted_bot
from graphs.retrieval import world
from graphs.retrieval.answers import matches, numbers, parse_action, read_reply, states
from graphs.retrieval.bots import keyword_lookup_bot, near_miss_bot
from graphs.retrieval.corpus import SHIPPED_CORPUS, CorpusError, Document, corpus_for, read_documents
from graphs.retrieval.distractors import parse_plan, plant, planter_messages, subject
from graphs.retrieval.index import SearchIndex, match_expression
from graphs.retrieval.nodes import answer_document
from graphs.retrieval.prompts import INTRO
from graphs.retrieval.tasks import SHIPPED_QUESTIONS, load_questions
from graphs.tasks.base import TaskSourceError
from storage.engine import open_store
from storage.models import Episode, EpisodePayload, Judgment, Reward, Turn
from training.datasets import build_snapshot, load_snapshot, turn_credits
from training.datasets.reading import ReadPlan, read_episodes
from training.deploy import LivePolicies, gate_and_deploy
from training.registry import get_version, publish

RETRIEVAL = get_game("retrieval")
CORPUS = corpus_for("")
runner = CliRunner()


def shipped(split: str, hops: int | None = None, n: int | None = None):
    tasks = load_questions("retrieval", n=None, seed=0, split=split)
    return [t for t in tasks if hops is None or len(t.meta["gold_docs"]) == hops][:n]


def scripted(bot, name: str | None = None) -> Policy:
    return Policy(ScriptedBackend.from_function(bot, name=name), SamplingParams(temperature=0))


def play_run(engine, tasks, policies, **options):
    report, run_id = play_one_run(engine, RETRIEVAL, tasks, policies, **options)
    return report, RETRIEVAL.metrics(engine, run_id).metrics


def gullible(messages, request) -> str:
    """keyword-lookup that only believes results the corpus does not hold (the planted ones)."""
    question = messages[0]["content"].split("\nQuestion: ")[1].split("\n")[0]
    planted = [line for line in messages[-1]["content"].splitlines()
               if line.startswith("[") and line[1:].split("]")[0] not in CORPUS]
    return keyword_lookup_bot([{"role": "user", "content": "\n".join([f"Question: {question}", *planted])}], request)


# --- the shipped data -------------------------------------------------------------------


def test_the_shipped_files_are_what_the_world_generator_makes():
    corpus, questions = world.rows()
    for path, rows in ((SHIPPED_CORPUS, corpus), (SHIPPED_QUESTIONS, questions)):
        assert path.read_text(encoding="utf-8").splitlines() == [json.dumps(r, ensure_ascii=False) for r in rows]
    assert 200 <= len(corpus) <= 400 and len({r["title"] for r in corpus}) == len(corpus)


def test_every_question_is_answered_by_its_gold_documents_and_only_they_state_its_facts():
    tasks = shipped("train") + shipped("heldout")
    assert len(tasks) >= 60 and len({t.id for t in tasks}) == len(tasks)
    assert Counter(t.split for t in tasks) == {"train": 100, "heldout": 50}
    assert Counter(t.difficulty for t in tasks) == {"1-hop": 90, "2-hop": 60}
    for task in tasks:
        gold = [CORPUS.documents[d] for d in task.meta["gold_docs"]]
        stating = answer_document(task, CORPUS)
        assert matches(stating.text, [task.answer]) and all(f["text"] in CORPUS.documents[f["doc"]].text
                                                            for f in task.meta["facts"]), task
        about = subject(stating.title)  # no other document says anything of that number about the subject
        assert not [d.id for d in CORPUS.documents.values()
                    if d not in gold and about in d.text and task.answer in numbers(d.text)], task
        if len(gold) == 2:  # the first document names the subject of the second: the bridge
            bridge = gold[1].title.removesuffix(" (river)")
            assert bridge in gold[0].text and bridge not in task.question, task


def test_splits_are_disjoint_and_a_smaller_n_is_a_prefix():
    train, heldout = shipped("train"), shipped("heldout")
    assert not {t.id for t in train} & {t.id for t in heldout}
    assert [t.id for t in load_questions("retrieval", n=5, seed=3)] == [
        t.id for t in load_questions("retrieval", n=20, seed=3)][:5]
    assert RETRIEVAL.tasks.default == "retrieval" and RETRIEVAL.tasks.default_split("retrieval") == "train"
    with pytest.raises(TaskSourceError, match="splits train, heldout"):
        load_questions("retrieval", n=2, seed=0, split="eval")


# --- search ---------------------------------------------------------------------------


def test_fts_operators_and_quotes_in_a_query_are_searched_as_text():
    index = CORPUS.index
    assert match_expression('Velmora" OR title:x NEAR(a b) -c* ^d') == (
        '"velmora" OR "or" OR "title" OR "x" OR "near" OR "a" OR "b" OR "c" OR "d"')
    assert match_expression('"" *** ()') is None and index.search('"" ***', 3) == []
    task = shipped("train", hops=1, n=1)[0]
    subject = CORPUS.documents[task.meta["gold_docs"][0]].title
    plain = [h.doc.id for h in index.search(f"{subject} founded", 3)]
    for noisy in (f'"{subject}" AND founded*', f'{subject} NOT "founded', f"{subject}) NEAR(founded",
                  f"title:{subject} ^founded"):
        assert [h.doc.id for h in index.search(noisy, 3)][0] == plain[0], noisy


def test_bm25_puts_the_gold_document_of_a_question_at_the_top():
    tasks = shipped("train") + shipped("heldout")
    first = [CORPUS.index.search(t.question, 3) for t in tasks]
    top1 = sum(hits[0].doc.id == t.meta["gold_docs"][0] for hits, t in zip(first, tasks, strict=True))
    top3 = sum(t.meta["gold_docs"][0] in [h.doc.id for h in hits] for hits, t in zip(first, tasks, strict=True))
    assert top3 / len(tasks) >= 0.95 and top1 / len(tasks) >= 0.9, (top1, top3, len(tasks))
    assert all(a.score >= b.score for hits in first for a, b in zip(hits, hits[1:]))


def test_planted_documents_are_seen_by_their_own_search_only():
    index = SearchIndex([Document("d1", "Velmora", "Velmora was founded in 1602."),
                         Document("d2", "Tarsk", "Tarsk was founded in 1340."),
                         Document("d3", "Ostra", "The Ostra is a river.")])
    fake = plant(Document("d1", "Velmora", "Velmora was founded in 1602."), "1602", "New Velmora", "1610", "d7")
    assert fake == Document("d7", "New Velmora", "New Velmora was founded in 1610.")
    with_fake = [h.doc.id for h in index.search("Velmora founded", 3, [fake])]
    assert with_fake[:2] == ["d1", "d7"]
    assert [h.doc.id for h in index.search("new velmora", 3)] == ["d1"]  # rolled back: nobody else sees it
    assert [h.doc.id for h in index.search("Velmora founded", 3)] == ["d1", "d2"]


# --- the researcher's actions and the judge's comparison -----------------------------


def test_actions_are_read_from_the_first_search_or_answer_line():
    assert parse_action("I will look.\n**Search:** Velmora founded\nAnswer: 1") == parse_action(
        "search: \"Velmora founded\"")
    answer = parse_action("Answer: It was 1,843. [d017, d020][d017] (from the text)")
    assert (answer.kind, answer.text, answer.cited) == ("answer", "It was 1,843. (from the text)", ("d017", "d020"))
    assert parse_action("The answer is 1843.") is None
    assert parse_action("Answer:") == parse_action("Answer: [ ]")  # answers nothing, cites nothing
    prose, formatted = read_reply("Maybe 1843 [d017].")
    assert (prose.kind, prose.text, prose.cited, formatted) == ("answer", "Maybe 1843 .", (), False)


@pytest.mark.parametrize(("answer", "right"), [
    ("1843", True), ("1,843.", True), ("It was finished in 1843 [d017]", True), ("The Year 1843!", True),
    ("18430", False), ("1842", False), ("", False), (None, False),
    ("The Lantern Atlas is an atlas made by the cartographer Paenis Peiven, completed in 1843. It is printed on "
     "154 sheets.", False),  # a document pasted back states every number in it
])
def test_answers_match_the_gold_one_after_normalisation(answer, right):
    assert states(answer, ["1843"]) is right


def test_the_near_miss_planter_renames_the_subject_and_moves_the_number():
    task = shipped("train", hops=2, n=1)[0]
    gold = answer_document(task, CORPUS)
    reply = near_miss_bot(planter_messages(gold, task.answer, 0, 1), None)
    name, wrong = parse_plan(reply)
    fake = plant(gold, task.answer, name, wrong, "d999")
    assert name != gold.title and gold.title in name and wrong != task.answer
    assert wrong in fake.text.replace(",", "") and task.answer not in fake.text.replace(",", "")
    assert near_miss_bot(planter_messages(gold, task.answer, 0, 1), None) == reply  # the same prompt, the same plan
    assert plant(gold, task.answer, gold.title, wrong, "d999") is None  # the same subject is no near miss
    assert parse_plan("Sure!") is None


# --- episodes through the runner -----------------------------------------------------


def test_episodes_are_judged_on_the_answer_the_citations_and_the_distractors(store_url):
    engine = open_store(store_url)
    one_hop, two_hop = shipped("train", hops=1, n=6), shipped("train", hops=2, n=4)
    planter = scripted(near_miss_bot, "near-miss")
    report, metrics = play_run(engine, one_hop + two_hop, {"researcher": scripted(keyword_lookup_bot),
                                                           "planter": planter})
    assert [e.status for e in report.episodes] == ["succeeded"] * 10
    outcomes = {e.task_id: e.outcome for e in report.episodes}
    assert all(len(o["planted"]) == 1 and o["planted"][0] not in CORPUS for o in outcomes.values())
    assert metrics["accuracy"] == wilson(sum(o["correct"] for o in outcomes.values()), 10)
    assert metrics["accuracy_2hop"] == wilson(0, 4)  # it never searches the second fact
    assert all(o["cited"][0] in t.meta["gold_docs"] for t in one_hop + two_hop
               if (o := outcomes[t.id])["correct"])
    assert all(o["queries"] == [t.question] for t in one_hop + two_hop if (o := outcomes[t.id]))  # the opening
    assert metrics["searched"] == wilson(0, 10) and metrics["search_budget_used"].value == 0.0
    with engine.connect() as conn:
        judgments = conn.execute(select(Judgment.rubric, Judgment.judge_policy, Judgment.scored_seat)).all()
        rewards = Counter(conn.execute(select(Reward.seat, Reward.name)).all())
        planter_turns = conn.execute(select(func.count()).select_from(Turn).where(Turn.seat == "planter")).scalar()
    assert Counter(judgments) == {("correctness", "rules", "researcher"): 10,
                                  ("relevance", "rules", "researcher"): 10}
    assert rewards == {("researcher", "correct"): 10, ("researcher", "relevance"): 10,
                       ("researcher", "cited_gold"): 10}
    assert planter_turns == 10

    _, fooled = play_run(engine, one_hop, {"researcher": scripted(gullible), "planter": planter})
    assert fooled["fooled_rate"] == fooled["distractor_seen"] == wilson(6, 6) and fooled["accuracy"] == wilson(0, 6)
    assert fooled["relevance"].value == 0.0 and fooled["citation_precision"] == wilson(0, 6)
    _, calm = play_run(engine, one_hop, {"researcher": scripted(keyword_lookup_bot)}, distractors=0)
    assert calm["fooled_rate"].n == calm["distractor_seen"].n == 0 and calm["answer_format"] == wilson(6, 6)
    engine.dispose()


def test_a_model_planter_names_its_near_miss_and_nonsense_plants_nothing(store_url):
    engine = open_store(store_url)
    tasks = shipped("train", hops=1, n=2)

    def planter(messages, request) -> str:  # as a model might: markdown, thousands separators, or nothing useful
        subject_line = messages[0]["content"].split("\nSubject: ")[1].split("\n")[0]
        if subject_line not in tasks[0].question:
            return "I would rather not."
        value = int(messages[0]["content"].split("\nValue to change: ")[1].split("\n")[0])
        return f"**Name:** The Greater {subject_line}\n**Value:** {value + 1000:,}"

    report, metrics = play_run(engine, tasks, {"researcher": scripted(gullible), "planter": scripted(planter)})
    planted = {e.task_id: e.outcome for e in report.episodes}
    assert len(planted[tasks[0].id]["planted"]) == 1 and planted[tasks[1].id]["planted"] == []
    assert planted[tasks[0].id]["fooled"] and metrics["fooled_rate"] == wilson(1, 1)
    named = subject(CORPUS.documents[tasks[0].meta["gold_docs"][0]].title)
    with engine.connect() as conn:
        parsed = conn.execute(select(Turn.parsed_value).where(Turn.seat == "planter")).scalars()
        assert sorted(parsed, key=str) == [f"Greater {named} / {int(tasks[0].answer) + 1000:,}", None]
    engine.dispose()


def test_a_two_hop_answer_citing_both_documents_and_a_hedge_with_the_distractor(store_url):
    engine = open_store(store_url)
    task = shipped("train", hops=2, n=1)[0]
    first, second = task.meta["gold_docs"]
    bridge = CORPUS.documents[second].title
    wrong = parse_plan(near_miss_bot(planter_messages(CORPUS.documents[second], task.answer, 0, 1), None))[1]
    planter = scripted(near_miss_bot, "near-miss")

    def researcher(*replies: str) -> Policy:
        return Policy(ScriptedBackend.replay(list(replies)), SamplingParams(temperature=0))

    report, metrics = play_run(engine, [task], {"planter": planter, "researcher": researcher(
        f"Search: {task.question}", f"Search: {bridge}", f"Answer: {task.answer} [{first}, {second}]")},
        first_search=False)
    (right,) = report.episodes
    assert (right.outcome["correct"], right.outcome["relevance"], right.outcome["cited_gold"]) == (True, 1.0, 1.0)
    assert right.outcome["queries"] == [task.question, bridge] and not right.outcome["fooled"]
    assert metrics["citation_precision"] == metrics["citation_recall"] == wilson(2, 2)
    report, metrics = play_run(engine, [task], {"planter": planter, "researcher": researcher(
        f"Search: {bridge}", f"Answer: {task.answer} or maybe {wrong} [{second}, d000]")}, first_search=False)
    (hedged,) = report.episodes
    assert (hedged.outcome["correct"], hedged.outcome["fooled"], hedged.outcome["relevance"]) == (False, True, 0.5)
    assert metrics["citation_precision"] == metrics["citation_recall"] == wilson(1, 2)

    plan = ReadPlan(game="retrieval", role="researcher")
    assert all(turn_credits(e, "researcher") == {} for e in read_episodes(engine, plan))  # scripted: never read
    as_model_turns(store_url, "researcher")  # as a model's turns, each is credited with its episode's score
    credits = {e.episode_id: sorted(turn_credits(e, "researcher").values()) for e in read_episodes(engine, plan)}
    assert credits == {right.episode_id: [1.4] * 3, hedged.episode_id: [0.2] * 2}  # 0.2 * (0.5 + 0.5)
    with engine.connect() as conn:
        parsed = conn.execute(select(Turn.parsed_value).where(Turn.episode_id == right.episode_id,
                                                              Turn.seat == "researcher").order_by(Turn.idx))
        assert list(parsed.scalars()) == [f"Search: {task.question}", f"Search: {bridge}",
                                          f"Answer: {task.answer} [{first}, {second}]"]
    engine.dispose()


def test_the_search_limit_the_opening_search_and_replies_in_prose(store_url):
    engine = open_store(store_url)
    tasks = shipped("train", hops=1, n=2)
    question, gold = tasks[0].question, tasks[0].meta["gold_docs"][0]
    seen: list[list[dict]] = []

    def always_search(messages, request) -> str:
        seen.append(messages)
        return "Search: " + question

    report, metrics = play_run(engine, tasks[:1], {"researcher": scripted(always_search)}, searches=2,
                               distractors=0, first_search=False)
    (episode,) = report.episodes
    assert episode.num_turns == 3 and episode.outcome["queries"] == [question] * 2
    assert episode.outcome["answer"] is None and not episode.outcome["correct"]
    assert len(seen[0]) == 1 and seen[0][0]["content"].startswith(INTRO)
    assert seen[0][0]["content"].endswith(f"Question: {question}\nYou may search 2 more times. Write one line: "
                                          "'Search: <keywords>' or 'Answer: <answer> [doc ids]'.")
    assert seen[1][-1]["content"].startswith(f"Results for {question!r}:\n[{gold}]")  # run by the ToolNode
    assert seen[2][-1]["content"].endswith("You have no searches left. Write one line: 'Answer: <answer> [doc ids]'.")
    assert metrics["answer_format"] == wilson(0, 1) and metrics["search_budget_used"].value == 1.0

    seen.clear()  # the opening search is free, its results come with the question
    report, metrics = play_run(engine, tasks[:1], {"researcher": scripted(always_search)}, searches=2,
                               distractors=0)
    assert report.episodes[0].num_turns == 3 and report.episodes[0].outcome["queries"] == [question] * 3
    first = seen[0][0]["content"]
    assert len(seen[0]) == 1 and first.index(f"Results for {question!r}:\n[{gold}] ") < first.index("Question: ")
    assert first.endswith("You may search 2 more times. Write one line: 'Search: <keywords>' or "
                          "'Answer: <answer> [doc ids]'.")
    assert metrics["search_budget_used"].value == 1.0 and metrics["searched"] == wilson(1, 1)

    def prose(messages, request) -> str:  # no action line: read as an answer in prose, logged unparsed
        return f"I think it is {tasks[1].answer}."

    report, metrics = play_run(engine, tasks[1:], {"researcher": scripted(prose)}, searches=0, distractors=0)
    assert report.episodes[0].num_turns == 1 and report.episodes[0].outcome["correct"]
    assert metrics["answer_format"] == wilson(0, 1) and metrics["citation_recall"] == wilson(0, 1)
    assert metrics["search_budget_used"].n == 0 and metrics["searched"] == wilson(0, 1)
    with engine.connect() as conn:
        parsed = conn.execute(select(Turn.parsed).where(Turn.episode_id == report.episodes[0].episode_id))
        assert list(parsed.scalars()) == [False]
    engine.dispose()


def test_a_model_judge_scores_relevance_and_one_that_answers_nonsense_fails_its_episode(store_url):
    engine = open_store(store_url)
    tasks = shipped("train", hops=1, n=4)
    materials: list[str] = []

    def judge(messages, request) -> str:
        materials.append(messages[-1]["content"])
        return "The cited entry states it.\nScore: 4"

    policies = {"researcher": scripted(keyword_lookup_bot), "judge": scripted(judge)}
    report, metrics = play_run(engine, tasks, policies, distractors=0)
    assert [e.status for e in report.episodes] == ["succeeded"] * 4
    assert metrics["judge_relevance"].value == 0.75 and metrics["judge_relevance"].n == 4
    assert all(m.startswith("Question: ") and "Documents cited:\n[" in m for m in materials)
    with engine.connect() as conn:
        scores = conn.execute(select(Judgment.judge_policy, Judgment.score).where(
            Judgment.rubric == "relevance", Judgment.judge_policy != "rules")).all()
        judged = conn.execute(select(Reward.value).where(Reward.name == "judge_relevance")).scalars().all()
    assert scores == [("scripted:judge", 0.75)] * 4 and judged == [0.75] * 4

    def sometimes_nonsense(messages, request) -> str:
        return "banana" if tasks[0].question in messages[-1]["content"] else "Fine.\nScore: 2"

    nonsense = Policy(UnconstrainedBackend(sometimes_nonsense, bot_name="nonsense"), SamplingParams(temperature=0))
    report, metrics = play_run(engine, tasks, {"researcher": scripted(keyword_lookup_bot), "judge": nonsense},
                               distractors=0)
    failed = [e for e in report.episodes if e.status != "succeeded"]
    assert len(failed) == 1 and "gave no 'Score: 1..5' for relevance" in failed[0].error
    assert metrics["accuracy"].n == 3 and metrics["judge_relevance"].value == 0.25
    engine.dispose()


# --- datasets, gate -------------------------------------------------------------------


def test_every_dataset_kind_of_the_researcher(store_url, tmp_path):
    """keyword-lookup and a researcher that answers 1000 play the same train questions: their
    first prompts (after the opening search) are shared states, so best-vs-worst pairs, group
    advantages and balanced reward rows all have siblings to compare."""
    engine = open_store(store_url)
    tasks = shipped("train", hops=1, n=8)
    play_run(engine, tasks, {"researcher": scripted(keyword_lookup_bot), "planter": scripted(near_miss_bot)})
    play_run(engine, tasks, {"researcher": scripted(lambda m, r: "Answer: 1000", "hasty"),
                             "planter": scripted(near_miss_bot)})
    as_model_turns(store_url, "researcher")
    rows = {}
    for kind in ("sft", "dpo", "kto", "ppo", "reward"):
        built = build_snapshot(engine, kind, "researcher", game="retrieval", base_model="bundled",
                               out_dir=tmp_path / kind)
        rows[kind] = list(load_snapshot(engine, built.id, role="researcher", base_model="bundled", kind=kind))
    assert all(rows.values()), {kind: len(r) for kind, r in rows.items()}
    assert all(r["completion"][0]["content"].startswith("Answer: ") and r["reward"] >= 1.0 for r in rows["sft"])
    assert all("\nResults for " in r["prompt"][0]["content"] for r in rows["sft"])  # of the opening search
    assert all(r["chosen"][0]["content"] != "Answer: 1000" and r["rejected"][0]["content"] == "Answer: 1000"
               and r["pair_kind"] == "group" for r in rows["dpo"])
    assert len(rows["ppo"]) == 8 * 2 and {r["reward"] for r in rows["ppo"]} >= {0.0, 1.4}
    labels = Counter(r["label"] for r in rows["reward"])
    assert labels[True] == labels[False] > 0
    engine.dispose()


def test_the_researcher_is_gated_on_accuracy(store_url, tmp_path, adapter_template):
    engine = open_store(store_url)
    base, trained = adapter_template
    candidate = publish(engine, role="researcher", trained_dir=trained, adapters_root=tmp_path / "adapters",
                        base_model=base, trainer="sft", config={}, parent=None, dataset_snapshot_id=None,
                        metrics={"loss": 1.0})

    def good_under_the_adapter(messages, request) -> str:
        return keyword_lookup_bot(messages, request) if request.adapter == candidate.name else "Answer: 0"

    backend = ScriptedBackend.from_function(good_under_the_adapter)
    live = LivePolicies({"researcher": Policy(backend), "planter": Policy(scripted_bot("near-miss"))})
    tasks = shipped("heldout", hops=1, n=6)
    evaluate = Evaluator(engine, RETRIEVAL, tasks, seed=0, options=RETRIEVAL.make_options({}))
    result = asyncio.run(gate_and_deploy(engine, candidate, backend, live, evaluate))
    assert result.metric == "accuracy" and result.baseline_value == 0.0 and result.candidate_value > 0.0
    assert result.promoted and get_version(engine, candidate.name).status == "active"
    engine.dispose()


# --- the CLI --------------------------------------------------------------------------


def cli_json(*args: str):
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_play_build_and_eval_through_the_cli(url):
    played = cli_json("play", "retrieval", "-n", "8", "--split", "train",
                      "--seat", "researcher=scripted:keyword-lookup", "--format", "json")[0]
    assert (played["succeeded"], played["failed"]) == (8, 0) and played["answer_format"] == 1.0
    cli_json("play", "retrieval", "-n", "8", "--split", "train", "--seat", "researcher=scripted:calculator",
             "--format", "json")
    as_model_turns(url, "researcher")
    for kind in ("sft", "dpo", "ppo"):
        built = cli_json("datasets", "build", kind, "--game", "retrieval", "--role", "researcher", "--since", "all",
                         "--format", "json")[0]
        assert built["rows"] > 0, built
    evaluated = {row["metric"]: row for row in cli_json(
        "eval", "--game", "retrieval", "-n", "6", "--seat", "researcher=scripted:keyword-lookup", "--format", "json")}
    assert evaluated["accuracy"]["n"] == 6 and evaluated["fooled_rate"]["n"] == 6
    assert evaluated["citation_recall"]["n"] >= 6 and evaluated["accuracy"]["low"] <= evaluated["accuracy"]["value"]


def test_a_user_corpus_and_question_file(url, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in [
        {"id": "k1", "title": "Quorn Tower", "text": "Quorn Tower, 41 metres tall, was raised in 1712."},
        {"id": "k2", "title": "Belt Mill", "text": "Belt Mill grinds 300 sacks a day."},
        {"id": "k3", "text": "A note without a title about nothing in particular."}]))
    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"question": "When was Quorn Tower raised?", "answer": 1712,
                                     "gold_docs": ["k1"]}) + "\n" + json.dumps(
        {"question": "How many sacks a day does Belt Mill grind?", "answer": "300", "gold_docs": ["k9"]}) + "\n")
    result = runner.invoke(app, ["play", "retrieval", "-n", "2", "--tasks", str(questions), "--corpus", str(corpus),
                                 "--seat", "researcher=scripted:keyword-lookup", "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])[0]
    assert (summary["succeeded"], summary["failed"]) == (1, 1) and summary["accuracy"] == 1.0
    engine = open_store(url)
    with engine.connect() as conn:
        (error,) = conn.execute(select(EpisodePayload.error).join(Episode, Episode.id == EpisodePayload.episode_id)
                                .where(Episode.status == "failed")).scalars()
    assert "questions.jsonl:2: gold document(s) k9 not in the corpus corpus.jsonl" in error and "--corpus" in error
    engine.dispose()


@pytest.mark.parametrize(("corpus_lines", "expected"), [
    (['{"id": "a", "text": "x"}', "{not json"], "corpus.jsonl:2: not valid JSON"),
    (['{"id": "a", "text": "x"}', '{"id": "a", "text": "y"}'], "corpus.jsonl:2: the id 'a' is already used at "
                                                               "corpus.jsonl:1"),
    (['{"id": "a", "body": "x"}'], "corpus.jsonl:1: missing 'text'"),
    (['{"id": "a b", "text": "x"}'], "corpus.jsonl:1: the id 'a b' must be one word"),
    ([""], "corpus.jsonl: the corpus has no documents"),
])
def test_a_corpus_that_does_not_parse_is_refused_naming_file_and_line(url, tmp_path, corpus_lines, expected):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(corpus_lines) + "\n")
    with pytest.raises(CorpusError, match="corpus.jsonl"):
        read_documents(corpus)
    result = runner.invoke(app, ["play", "retrieval", "-n", "1", "--corpus", str(corpus)])
    assert result.exit_code == 2 and expected in " ".join(result.output.split()), result.output


@pytest.mark.parametrize(("args", "expected"), [
    (["--searches", "-1"], "searches must be >= 0"),
    (["--results", "0"], "results must be >= 1"),
    (["--corpus", "no/such.jsonl"], "--corpus no/such.jsonl: no such file"),
    (["--turns", "2"], "--turns: not an option of retrieval"),
    (["--distractors", "0", "--seat", "planter=model"], "that seat does not play in retrieval"),
    (["--tasks", "SUMS"], "sums.jsonl:1: missing 'gold_docs' (a math task file?"),
])
def test_bad_input_is_refused_before_anything_is_played(url, sums, args, expected):
    args = [str(sums) if a == "SUMS" else a for a in args]
    result = runner.invoke(app, ["play", "retrieval", "-n", "1", "--seat", "researcher=scripted:keyword-lookup",
                                 *args])
    assert result.exit_code == 2 and expected in " ".join(result.output.split()), result.output
    engine = open_store(url)
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Episode)).scalar() == 0
    engine.dispose()


@pytest.mark.slow
def test_a_retrain_round_on_a_tiny_model(tmp_path, monkeypatch):
    """Logs as a capable researcher would have left them, then one round: the tiny model plays,
    the researcher trains on the rows, is gated on held-out accuracy and reported."""
    from tiny_model import save_tiny_model

    store = f"sqlite:///{tmp_path / 'loop.db'}"
    for name, value in (("SPARRING_DATABASE_URL", store), ("SPARRING_DATA_DIR", str(tmp_path / "data")),
                        ("SPARRING_CACHE_DIR", str(tmp_path / "cache")), ("SPARRING_SEATS", "{}"),
                        ("SPARRING_MODEL", str(save_tiny_model(tmp_path / "tiny")))):
        monkeypatch.setenv(name, value)
    cli_json("play", "retrieval", "-n", "16", "--split", "train", "--seat", "researcher=scripted:keyword-lookup",
             "--format", "json")
    as_model_turns(store, "researcher")
    result = runner.invoke(app, ["retrain", "--game", "retrieval", "--roles", "researcher", "--once", "--practice",
                                 "0", "--every-episodes", "2", "--min-rows", "1", "--eval-tasks", "2",
                                 "--max-new-tokens", "4",
                                 "--max-steps", "1", "--format", "json"])
    assert result.exit_code == 0, result.output
    rounds, report = (json.loads(line) for line in result.stdout.strip().splitlines()[-2:])
    assert [(r["role"], r["candidate"]) for r in rounds] == [("researcher", "researcher@v1")]
    assert rounds[0]["status"] in ("promoted", "rejected") and rounds[0]["rows"] > 0, rounds
    assert [m["metric"] for m in report] == list(RETRIEVAL.report_metrics)
    assert all(m["before"]["n"] == 2 for m in report if m["metric"] == "accuracy")


@pytest.mark.slow
def test_the_bundled_model_researches_a_few_questions(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'bundled.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_SEATS", "{}")
    summary = cli_json("play", "retrieval", "-n", "4", "-c", "4", "--max-new-tokens", "24", "--temperature", "0",
                       "--format", "json")[0]
    assert summary["succeeded"] == 4 and summary["generated_tokens"] > 0
    engine = open_store(url)
    with engine.connect() as conn:
        turns = conn.execute(select(Turn.seat, Turn.served_by, Turn.completion_tokens)).all()
        rewards = conn.execute(select(Reward.name, Reward.value).where(Reward.name == "correct")).all()
    researcher = [t for t in turns if t.seat == "researcher"]
    assert 4 <= len(researcher) <= 12 and all(t.served_by == "bundled" and 0 < t.completion_tokens <= 24
                                              for t in researcher)
    assert len(rewards) == 4 and all(value in (0.0, 1.0) for _, value in rewards)
    engine.dispose()
