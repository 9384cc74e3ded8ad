"""The story game: a writer and a co-writer extend a story under constraints; rules judge
consistency, a model (or a labelled proxy) creativity. Its shipped prompts and rules, bad task
files, episodes played through the runner and the CLI with scripted policies on real stores,
the dataset kinds its writer trains on, its metrics, its gate and a retrain round on a tiny model."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from cli_calls import unwrapped
from model_logs import as_model_turns
from sqlalchemy import select
from tiny_model import save_tiny_model
from typer.testing import CliRunner
from unconstrained import UnconstrainedBackend

from app.cli import app
from evaluation.evaluator import Evaluator
from graphs.episodes import play
from graphs.metrics.stats import wilson
from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.scripted import ScriptedBackend
from graphs.registry import get_game, scripted_bot
from graphs.story import bots, prompts
from graphs.story.constraints import Constraints
from graphs.story.rules import check_passage, negation_pattern, new_words
from graphs.story.tasks import read_file
from graphs.tasks.base import TaskSourceError
from storage.engine import open_store
from storage.models import Judgment, Reward, Turn
from storage.recorder import Recorder
from storage.records import RunRecord
from training.datasets import build_snapshot, load_snapshot
from training.deploy import LivePolicies, gate_and_deploy
from training.registry import get_version, publish

runner = CliRunner()
STORY = get_game("story")
TWIST = "to everyone's surprise"


def constraints(task) -> Constraints:
    return Constraints.from_dict(task.meta["constraints"])


def ask(bot, task, passages=(), *, seat="co_writer", last=False, seed=0) -> str:
    messages = prompts.passage_messages(constraints(task), list(passages), seat, last=last)
    return bot(messages, GenerationRequest(messages, SamplingParams(seed=seed)))


# --- shipped prompts and rules -------------------------------------------------------------


def test_thirty_six_prompts_ship_in_two_disjoint_splits_and_the_bots_test_the_judge():
    train = STORY.tasks.load("story", n=None, seed=0, split="train")
    heldout = STORY.tasks.load("story", n=None, seed=0, split="heldout")
    assert (len(train), len(heldout)) == (24, 12) and not {t.id for t in train} & {t.id for t in heldout}
    assert STORY.tasks.load("story", n=None, seed=0)[0].split == "train"  # the default split
    for task in train + heldout:
        c = constraints(task)
        for seed in range(3):  # the template keeps every constraint, the ending and cast included
            middle = ask(bots.story_template, task, seed=seed)
            assert check_passage(middle, c, story_before=[], last=False).consistent, (task.id, middle)
        ending = ask(bots.story_template, task, [middle], seat="writer", last=True)
        assert check_passage(ending, c, story_before=[middle], last=True).score == 1.0, (task.id, ending)
        twist = ask(bots.story_contradiction, task)
        check = check_passage(twist, c, story_before=[], last=False)
        assert TWIST in twist and [v for v in check.violations if v.startswith("contradicts: ")], (task.id, twist)


def test_the_rules_check_facts_phrases_length_ending_and_cast():
    task = next(t for t in STORY.tasks.load("story", n=None, seed=0) if t.id == "story:lighthouse-storm")
    c = constraints(task)
    assert c.characters == ("Mara", "Old Tom") and c.ending.sentence == "The red light burned until morning."
    for broken in ("Mara isn't afraid of the water any more.", "Mara was no longer afraid of water.",
                   "The lighthouse was not red.", "Mara dived into the waves.", "They saw the white lighthouse."):
        assert check_passage(broken, c, story_before=[], last=False).violations[0].startswith("contradicts: "), broken
    for fine in ("Mara was afraid of the dark water.", "Mara is not afraid of Tom.", "Tom painted the red door."):
        assert check_passage(fine, c, story_before=[], last=False).consistent, fine
    dream = check_passage("And then it was all a DREAM.", c, story_before=[], last=False)
    assert dream.violations == ("forbidden phrase: it was all a dream",) and dream.score == 3 / 4
    assert check_passage("word " * 61, c, story_before=[], last=False).violations == (
        "too long: 61 words (at most 60)",)
    assert check_passage("   ", c, story_before=[], last=False).violations == ("empty passage",)

    ending = check_passage("Tom waved. the red light, burned until morning", c, story_before=["Mara slept."],
                           last=True)
    assert ending.consistent and ending.ending and ending.checks == 4 + 1 + 2
    missing = check_passage("The storm passed.", c, story_before=["Mara slept."], last=True)
    assert missing.ending is False and missing.violations == (
        'ending not reached: the story ends with the sentence "The red light burned until morning."',
        "character never named: Old Tom")
    assert negation_pattern("Bao cannot swim") is None  # another form: the task ships its contradictions
    assert new_words("A storm of silver gulls", "the storm came") == 2  # silver, gulls ("of" is too short)


def test_an_event_ending_needs_every_mention():
    task = next(t for t in STORY.tasks.load("story", n=None, seed=0) if t.id == "story:robot-garden")
    c = constraints(task)
    before = ["Unit Seven and Dr. Osei watered the beds."]
    assert check_passage("At dawn the first blossom opened.", c, story_before=before, last=True).ending
    assert not check_passage("At dawn the first flower wilted.", c, story_before=before, last=True).ending


BAD_ROWS = [
    ("{not json", "not valid JSON"),
    ('["a list"]', "expected a JSON object, got list"),
    ({"id": "x", "premise": "p", "characters": ["A"], "facts": [], "ending": {"sentence": "End."}, "charaters": []},
     "unknown key(s) 'charaters'"),
    ({"id": "x", "premise": "p", "characters": ["A"], "facts": []}, "missing key(s) 'ending'"),
    ({"id": "x", "premise": "p", "characters": [], "facts": [], "ending": {"sentence": "End."}},
     "'characters' must list at least one entry"),
    ({"id": "x", "premise": "p", "characters": ["A"], "facts": [{"text": "Ann is tall", "contradictions": ["Ann (is"]}],
      "ending": {"sentence": "End."}}, "is not a valid regular expression"),
    ({"id": "x", "premise": "p", "characters": ["A"], "facts": [{"text": "Ann is tall", "contradictions": ["tall"]}],
      "ending": {"sentence": "End."}}, "matches the fact itself"),
    ({"id": "x", "premise": "p", "characters": ["A"], "facts": ["Ann is tall"],
      "ending": {"sentence": "Ann is not tall."}},
     "the ending contradicts the fact 'Ann is tall'"),
    ({"id": "x", "premise": "p", "characters": ["A"], "facts": [], "forbidden": ["magic"],
      "ending": {"sentence": "It was magic."}}, "the ending contains the forbidden phrase 'magic'"),
    ({"id": "x", "premise": "p", "characters": ["A"], "facts": [],
      "ending": {"event": "Ann wins", "mentions": ["lose"]}},
     "does not contain all of its own mentions"),
    ({"id": "x", "premise": "p", "characters": ["A"], "facts": [], "ending": "End."}, "'ending' must be an object"),
    ({"id": "x", "premise": "p", "characters": ["A"], "facts": [], "ending": {"sentence": "End."}, "max_words": 2},
     "'max_words' must be a whole number of at least 5"),
]


@pytest.mark.parametrize(("row", "expected"), BAD_ROWS)
def test_a_task_file_of_the_wrong_shape_names_the_file_line_and_fix(tmp_path, row, expected):
    good = {"id": "good", "premise": "p", "characters": ["A"], "facts": [], "ending": {"sentence": "End."}}
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(good) + "\n\n" + (row if isinstance(row, str) else json.dumps(row)) + "\n")
    with pytest.raises(TaskSourceError) as caught:
        STORY.tasks.load(str(path), n=None, seed=0)
    assert str(caught.value).startswith(f"{path}:3: ") and expected in str(caught.value)


def test_task_files_and_specs(tmp_path):
    path = tmp_path / "mine.jsonl"
    row = {"id": "a", "premise": "A fox.", "characters": ["Fox"], "facts": ["The fox is red"],
           "ending": {"sentence": "The end."}}
    path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(TaskSourceError, match=r"mine.jsonl:2: id 'a' is also the id of line 1"):
        read_file(path, source="mine.jsonl", split="eval")
    path.write_text(json.dumps(row) + "\n")
    [task] = STORY.tasks.load(str(path), n=None, seed=0)
    assert (task.id, task.split, task.answer, constraints(task).max_words) == ("mine.jsonl:a", "eval", None, 60)
    with pytest.raises(TaskSourceError, match="the shipped story prompts have the splits train, heldout"):
        STORY.tasks.load("story", n=None, seed=0, split="eval")
    with pytest.raises(TaskSourceError, match="unknown task source 'arithmetic' for story"):
        STORY.tasks.load("arithmetic", n=None, seed=0)


# --- episodes ------------------------------------------------------------------------------


def first_consistent_then_twisted(messages, request) -> str:
    """A writer whose first candidate of each state keeps the constraints and whose second breaks
    a fact: a consistency preference (a DPO pair) every turn."""
    calls = first_consistent_then_twisted.calls
    calls[messages[0]["content"]] += 1
    bot = bots.story_template if calls[messages[0]["content"]] == 1 else bots.story_contradiction
    return bot(messages, request)


def plain_then_stormy(messages, request) -> str:
    """A writer whose two candidates both keep the constraints; the second adds a storm."""
    calls = plain_then_stormy.calls
    calls[messages[0]["content"]] += 1
    text = bots.story_template(messages, request)
    return text if calls[messages[0]["content"]] == 1 else f"{text} A storm of silver gulls rose over the cliffs."


def storm_lover(messages, request) -> str:
    """A judge model that prefers whichever side mentions the storm."""
    text = messages[-1]["content"]
    a, b = text.rsplit("[B]\n", 1)
    stormy = "storm" in b and "storm" not in a.rsplit("[A]\n", 1)[1]
    return "The second one has a storm.\nBetter: B" if stormy else "Better: A"


def _play(engine, tasks, policies, *, options=None, run=None):
    with Recorder(engine) as recorder:
        if run is not None:
            recorder.start_run(run)
        return asyncio.run(play(STORY, tasks, policies, recorder, concurrency=4, seed=0,
                                run_id=run.id if run else None, options=STORY.make_options(options or {})))


def test_consistency_pairs_make_every_dataset_kind_for_the_writer(store_url, tmp_path):
    engine = open_store(store_url)
    tasks = STORY.tasks.load("story", n=4, seed=0, split="train")
    first_consistent_then_twisted.calls = Counter()
    policies = {"writer": Policy(ScriptedBackend.from_function(first_consistent_then_twisted)),
                "co_writer": Policy(scripted_bot("story-template"))}
    report = _play(engine, tasks, policies)
    assert [e.status for e in report.episodes] == ["succeeded"] * 4
    assert all(e.reward == 1.0 and e.outcome["chosen_by"] == ["consistency"] * 3 for e in report.episodes)
    with engine.connect() as conn:
        pairs = conn.execute(select(Judgment.rubric, Judgment.judge_policy, Judgment.rationale)
                             .where(Judgment.winner_seat == "writer", Judgment.loser_seat == "writer")).all()
    assert len(pairs) == 12 and {(r, p) for r, p, _ in pairs} == {("consistency", "rules")}
    assert all("breaks fewer constraints" in rationale and "contradicts" in rationale for _, _, rationale in pairs)

    as_model_turns(store_url, "writer")
    rows = {}
    for kind in ("sft", "dpo", "kto", "ppo"):
        built = build_snapshot(engine, kind, "writer", game="story", base_model="bundled", out_dir=tmp_path / kind)
        rows[kind] = list(load_snapshot(engine, built.id, role="writer", base_model="bundled", kind=kind))
    dpo = rows["dpo"]
    # each state's pair comes twice: from the judgment, and as the group's best vs worst credit
    assert Counter(r["pair_kind"] for r in dpo) == {"judge": 12, "group": 12}
    assert len({(r["chosen_turn_id"], r["rejected_turn_id"]) for r in dpo}) == 12
    assert all(TWIST in r["rejected"][0]["content"] and TWIST not in r["chosen"][0]["content"] for r in dpo)
    assert len(rows["sft"]) == 12 and all(TWIST not in r["completion"][0]["content"] for r in rows["sft"])
    assert Counter(r["label"] for r in rows["kto"]) == {True: 12, False: 12}
    assert len(rows["ppo"]) == 24 and {r["group_size"] for r in rows["ppo"]} == {2}
    assert all(r["prompt"][0]["content"].startswith("You are the writer") for kind in rows for r in rows[kind])
    engine.dispose()


def test_a_judge_model_compares_candidates_and_authors_for_creativity(store_url):
    engine = open_store(store_url)
    tasks = STORY.tasks.load("story", n=4, seed=0, split="heldout")
    plain_then_stormy.calls = Counter()
    run = RunRecord.new("story", {}, 0)
    judge = Policy(ScriptedBackend.from_function(storm_lover, name="storm-lover"), SamplingParams(temperature=0))
    policies = {"writer": Policy(ScriptedBackend.from_function(plain_then_stormy)),
                "co_writer": Policy(scripted_bot("story-template")), "judge": judge}
    report = _play(engine, tasks, policies, options={"rounds": 2}, run=run)
    assert [e.status for e in report.episodes] == ["succeeded"] * 4
    assert all(e.outcome["chosen_by"] == ["creativity"] * 2 and e.outcome["creativity_winner"] == "writer"
               for e in report.episodes)
    with engine.connect() as conn:
        judged = conn.execute(select(Judgment.rubric, Judgment.judge_policy, Judgment.winner_seat,
                                     Judgment.loser_seat, Judgment.preferred_turn_id, Judgment.judge_turn_id)
                              .where(Judgment.rubric == "creativity")).all()
        stormy = set(conn.execute(select(Turn.id).join(Reward, Reward.turn_id == Turn.id)
                                  .where(Reward.name == "creativity", Reward.value == 1.0)).scalars())
    pairs = [j for j in judged if j.loser_seat == "writer"]
    authors = [j for j in judged if j.loser_seat == "co_writer"]
    assert len(pairs) == 8 and len(authors) == 4 and all(j.judge_turn_id for j in judged)
    assert {j.judge_policy for j in judged} == {"scripted:storm-lover"}
    assert {j.preferred_turn_id for j in pairs} == stormy  # the preferred candidate is rewarded
    metrics = STORY.metrics(engine, run.id).metrics
    assert metrics["creativity_win_rate"] == wilson(4, 4)
    assert metrics["consistency_rate"] == wilson(16, 16) and metrics["ending_reached_rate"] == wilson(4, 4)
    assert metrics["creativity_proxy_win_rate"].n == 4
    engine.dispose()


def test_a_judge_answering_nonsense_fails_its_episode_and_the_batch_goes_on(store_url):
    engine = open_store(store_url)
    tasks = STORY.tasks.load("story", n=3, seed=0, split="train")
    muddled = tasks[1].question

    def judge(messages, request) -> str:
        return "banana" if muddled in messages[-1]["content"] else "Better: A"

    plain_then_stormy.calls = Counter()
    policies = {"writer": Policy(ScriptedBackend.from_function(plain_then_stormy)),
                "co_writer": Policy(scripted_bot("story-template")),
                "judge": Policy(UnconstrainedBackend(judge, bot_name="muddled"), SamplingParams(temperature=0))}
    report = _play(engine, tasks, policies, options={"rounds": 1})
    assert [e.status for e in report.episodes] == ["succeeded", "failed", "succeeded"]
    failed = report.episodes[1]
    assert failed.error.startswith("JudgeError: judge 'judge' named no 'Better: A|B' for creativity")
    assert failed.error_stage.startswith("judge turn")
    engine.dispose()


def test_the_writer_is_gated_on_its_consistency_rate(store_url, tmp_path, adapter_template):
    engine = open_store(store_url)
    base, trained = adapter_template
    candidate = publish(engine, role="writer", trained_dir=trained, adapters_root=tmp_path / "adapters",
                        base_model=base, trainer="sft", config={}, parent=None, dataset_snapshot_id=None,
                        metrics={"loss": 1.0})

    def better_under_the_adapter(messages, request) -> str:
        bot = bots.story_template if request.adapter == candidate.name else bots.story_contradiction
        return bot(messages, request)

    backend = ScriptedBackend.from_function(better_under_the_adapter)
    live = LivePolicies({"writer": Policy(backend), "co_writer": Policy(scripted_bot("story-template"))})
    tasks = STORY.tasks.load("story", n=4, seed=0, split="heldout")
    evaluate = Evaluator(engine, STORY, tasks, seed=0, options=STORY.make_options({"rounds": 2}))
    result = asyncio.run(gate_and_deploy(engine, candidate, backend, live, evaluate))
    assert (result.metric, result.candidate_value, result.baseline_value) == ("consistency_rate", 1.0, 0.0)
    assert result.promoted and get_version(engine, candidate.name).status == "active"
    assert result.candidate_eval.metrics["violations_per_episode"].value == 0.0
    assert result.baseline_eval.metrics["violations_per_episode"].value == 2.0  # one twist in each of 2 passages
    engine.dispose()


# --- the CLI -------------------------------------------------------------------------------


@pytest.fixture
def env(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'story.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPARRING_SEATS", "{}")
    return url


def cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_play_build_and_eval_through_the_cli(env, tmp_path):
    summary = json.loads(cli("play", "story", "-n", "8", "--seat", "writer=scripted:story-template",
                             "--seat", "co_writer=scripted:story-contradiction", "--format", "json")
                         .strip().splitlines()[-1])[0]
    assert summary["succeeded"] == 8 and summary["consistency_rate"] == 1.0
    assert summary["co_writer_consistency_rate"] == 0.0  # the judge catches every planted contradiction
    as_model_turns(env, "writer")
    built = {kind: json.loads(cli("datasets", "build", kind, "--role", "writer", "--game", "story", "--since", "all",
                                  "--format", "json"))[0] for kind in ("dpo", "sft", "ppo")}
    assert built["dpo"]["rows"] > 0 and built["sft"]["rows"] > 0 and built["ppo"]["rows"] == 8 * 3 * 2
    engine = open_store(env)
    with engine.connect() as conn:
        proxies = conn.execute(select(Judgment.judge_policy, Judgment.rationale)
                               .where(Judgment.rubric == "creativity-proxy")).all()
    assert proxies and all(p == "rules:new-words" and r.startswith("proxy, not a quality judgment") for p, r in proxies)
    engine.dispose()

    evaluated = json.loads(cli("eval", "--game", "story", "-n", "4", "--seat", "writer=scripted:story-contradiction",
                               "--seat", "co_writer=scripted:story-template", "--rounds", "2",
                               "--max-new-tokens", "400", "--format", "json"))
    metrics = {row["metric"]: row for row in evaluated}
    assert (metrics["consistency_rate"]["value"], metrics["consistency_rate"]["n"]) == (0.0, 8)  # greedy: 1 a turn
    assert metrics["ending_reached_rate"]["value"] == 1.0 and metrics["violations_per_episode"]["value"] == 2.0
    assert metrics["creativity_win_rate"]["n"] == 0  # no judge model played
    assert all(row["low"] is not None for name, row in metrics.items() if name != "creativity_win_rate")


@pytest.mark.parametrize(("args", "expected"), [
    (["--turns", "2"], "--turns: not an option of story"),
    (["--candidates", "3"], "candidates must be 1 or 2"),
    (["--rounds", "0"], "rounds must be >= 1"),
    (["--seat", "co_writer=scripted:no-such-bot"], "unknown scripted bot"),
    (["--tasks", "missing.jsonl"], "missing.jsonl: no such file"),
])
def test_bad_input_is_refused_before_anything_is_played(env, args, expected):
    result = runner.invoke(app, ["play", "story", "-n", "2", "--seat", "writer=scripted:story-template", *args])
    assert result.exit_code != 0 and expected in " ".join(result.output.split()), result.output


def test_a_bad_task_file_through_the_cli_names_its_line(env, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "x", "premise": "p", "characters": "Mara", "facts": [],
                                "ending": {"sentence": "End."}}) + "\n")
    result = runner.invoke(app, ["play", "story", "--tasks", str(path), "--seat", "writer=scripted:story-template"])
    assert result.exit_code != 0
    assert unwrapped(f"{path}:1: 'characters' must be a JSON list, got str") in unwrapped(result.output), result.output


def test_a_retrain_round_trains_and_gates_the_writer_on_a_tiny_model(env, tmp_path, monkeypatch):
    """`sparring retrain --game story` with a tiny random model as the writer and a scripted
    co-writer: practice, play, build SFT rows (its consistent passages), train, gate on the held-out
    consistency rate and report."""
    monkeypatch.setenv("SPARRING_MODEL", str(save_tiny_model(tmp_path / "tiny")))
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    out = cli("retrain", "--game", "story", "--roles", "writer", "--seat", "co_writer=scripted:story-template",
              "--once", "--practice", "2", "--every-episodes", "2", "--samples", "1", "--eval-tasks", "2",
              "--min-rows", "1", "--game-rounds", "2", "--max-new-tokens", "8", "--max-steps", "1", "--format", "json")
    rounds, report = (json.loads(line) for line in out.strip().splitlines()[-2:])
    [writer] = rounds
    assert (writer["role"], writer["candidate"]) == ("writer", "writer@v1") and writer["rows"] > 0, writer
    assert writer["status"] in ("promoted", "rejected") and writer["episodes"] == 4  # 2 practice, 2 full
    assert [m["metric"] for m in report] == list(STORY.report_metrics)
    assert report[0]["before"]["n"] == 4  # the consistency rate: 2 held-out prompts x 2 passages, greedy: 1 each


@pytest.mark.slow
def test_play_story_on_the_bundled_model_with_a_model_judge(env, tmp_path):
    """The real bundled model writes and judges (its preference line constrained) beside a
    scripted co-writer; the writer's pairs build as DPO rows."""
    summary = json.loads(cli("play", "story", "-n", "2", "-c", "2", "--rounds", "2", "--split", "train",
                             "--seat", "co_writer=scripted:story-template", "--seat", "judge=model",
                             "--max-new-tokens", "24", "--temperature", "0.7", "--format", "json")
                         .strip().splitlines()[-1])[0]
    # the template's passage, cut at 24 bytes as a model's would be, still breaks nothing
    assert summary["succeeded"] == 2 and summary["co_writer_consistency_rate"] == 1.0
    engine = open_store(env)
    with engine.connect() as conn:
        turns = conn.execute(select(Turn.seat, Turn.served_by, Turn.backend)).all()
        judged = conn.execute(select(Judgment.rubric, Judgment.judge_policy, Judgment.winner_seat, Judgment.loser_seat)
                              .where(Judgment.preferred_turn_id.is_not(None))).all()
    assert Counter(seat for seat, _, _ in turns)["writer"] == 2 * 2 * 2  # episodes x rounds x candidates
    assert {(served, backend) for seat, served, backend in turns if seat != "co_writer"} == {("bundled", "inprocess")}
    authors = [j for j in judged if j.rubric == "creativity" and "co_writer" in (j.winner_seat, j.loser_seat)]
    assert len(authors) == 2 and {j.judge_policy for j in authors} == {"bundled"}
    pairs = [j for j in judged if j.winner_seat == j.loser_seat == "writer"]
    engine.dispose()
    built = json.loads(cli("datasets", "build", "dpo", "--role", "writer", "--game", "story", "--format", "json"))[0]
    assert built["rows"] >= len(pairs) > 0  # the judge's pairs (and the same states' group pairs)
