"""`sparring deploy` on an external game: the user's evaluation script, run through a gateway the
gate starts, plays the candidate and the active version (or base); the two runs are compared
paired by task with the gate's own rule. Scripts here are plain `openai` clients (real
subprocesses) whose rewards the test chooses; the model is a tiny random one."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from cli_calls import cli, refused
from gateway_lab import Lab, make_lab

from app.gateway.scripts import run_script
from app.wiring import PolicyFactory
from graphs.policies.base import SamplingParams
from training.registry import get_version

HEADER = '''
import os
from openai import OpenAI

client = OpenAI(base_url=os.environ["SPARRING_GATEWAY_URL"], api_key="none", max_retries=0)
MODEL, ROLE, SPLIT = (os.environ[f"SPARRING_GATEWAY_{name}"] for name in ("MODEL", "ROLE", "SPLIT"))


def play(task, reward=None, model=MODEL, seat=ROLE, split=None):
    opened = {"task": {"id": task}, **({"split": split} if split else {})}
    episode = client.post("/episodes", body=opened, cast_to=object)["id"]
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": task}], max_tokens=2,
                                   temperature=0, extra_headers={"X-Sparring-Episode": episode,
                                                                 "X-Sparring-Seat": seat})
    client.post(f"/episodes/{episode}/end", body={} if reward is None else {"reward": reward}, cast_to=object)
    return episode
'''


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return make_lab(tmp_path_factory.mktemp("gateway-gate"))


def use_lab(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's settings: ``lab``'s store, tiny model and folders."""
    settings = lab.settings
    for name, value in (("DATABASE_URL", settings.database_url), ("MODEL", settings.model), ("DEVICE", "cpu"),
                        ("DATA_DIR", str(settings.data_dir)), ("CACHE_DIR", str(settings.cache_dir))):
        monkeypatch.setenv(f"SPARRING_{name}", value)


@pytest.fixture
def env(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> None:
    use_lab(lab, monkeypatch)


def script(folder: Path, body: str) -> str:
    """The command line of a script: HEADER (a client of the gateway, ``play``) then ``body``."""
    path = folder / "evaluate.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return f"{sys.executable} {path}"


def deploy(role: str, *args: str) -> dict:
    [row] = json.loads(cli("deploy", role, "--game", "agents", *args, "--format", "json"))
    return row


def scored(candidate: str, values: dict[str, tuple[float, float]]) -> str:
    """A script body: each task played once, rewarded the first value for ``candidate``, else the second."""
    return f"""
        for task, (mine, theirs) in {values!r}.items():
            play(task, mine if MODEL == {candidate!r} else theirs)
    """


def test_a_candidate_its_evaluation_scores_better_than_the_base_model_is_promoted(lab, env, tmp_path):
    candidate = lab.publish("promoted", active=False)
    values = {"t1": (1.0, 0.0), "t2": (1.0, 1.0), "t3": (0.0, 0.0), "t4": (1.0, 0.0)}
    row = deploy("promoted", "--eval-script", script(tmp_path, scored(candidate, values)))
    assert (row["candidate"], row["baseline"], row["metric"], row["decision"]) == (candidate, "base", "reward",
                                                                                   "promoted")
    assert (row["candidate_value"], row["baseline_value"]) == (0.75, 0.25)
    assert row["reason"].startswith(f"promoted {candidate} against base: reward +50.0 pts")
    assert get_version(lab.engine, candidate).status == "active"
    [kept] = lab.rows("SELECT e.split, e.n_tasks, e.metrics FROM evaluations e JOIN adapter_versions v "
                      "ON v.id = e.adapter_version_id WHERE v.name = :n", n=candidate)
    figures = json.loads(kept["metrics"]) if isinstance(kept["metrics"], str) else kept["metrics"]
    assert (kept["split"], kept["n_tasks"], figures["comparison"]["better"]) == ("eval", 4, 2)
    runs = (figures["candidate_run"], figures["baseline_run"])
    for run, served in zip(runs, (candidate, lab.settings.model), strict=True):
        episodes = lab.rows("SELECT game, split, status FROM episodes WHERE run_id = :r", r=run)
        assert episodes == [{"game": "agents", "split": "eval", "status": "succeeded"}] * 4
        assert lab.rows("SELECT DISTINCT t.served_by FROM turns t JOIN episodes e ON e.id = t.episode_id "
                        "WHERE e.run_id = :r", r=run) == [{"served_by": served}]
        [purpose] = lab.rows("SELECT config FROM runs WHERE id = :r", r=run)
        assert purpose["config"]["purpose"].startswith(f"gate {candidate}: evaluate")


def test_a_candidate_worse_than_the_active_version_on_a_named_reward_is_rejected(lab, env, tmp_path):
    active = lab.publish("rejected", seed=2)
    candidate = lab.publish("rejected", active=False, seed=3)
    body = f"""
        for task in ("a", "b", "c"):
            episode = play(task, 1.0)  # the headline says nothing; the named reward decides
            value = 0.0 if MODEL == {candidate!r} else 1.0
            client.post(f"/episodes/{{episode}}/rewards", body={{"seat": ROLE, "name": "score", "value": value}},
                        cast_to=object)
    """
    row = deploy("rejected", "--eval-script", script(tmp_path, body), "--metric", "score")
    assert (row["baseline"], row["decision"], row["candidate_value"], row["baseline_value"]) == (
        active, "rejected", 0.0, 1.0)
    assert row["reason"].startswith(f"rejected {candidate} against {active}: score -100.0 pts")
    assert "worse by more than the margin (0 pts)" in row["reason"]
    assert get_version(lab.engine, candidate).status == "rejected"
    assert get_version(lab.engine, active).status == "active"


@pytest.mark.parametrize(("body", "says"), [
    ("import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)\n",
     ["exited with status 3", "the end of its stderr: boom"]),
    ("pass\n", ["logged no episode", "SPARRING_GATEWAY_URL"]),
    ("play('t1')\n", ["1 of its 1 succeeded episodes have no reward", 'POST /v1/episodes/ID/end {"reward": ...}']),
    ("play('t1', 1.0)\nplay('t2' if '@' in MODEL else 't3', 1.0)\n",
     ["played different tasks", "played 1: t2", "only base played 1: t3"]),
    ("play('t1', 1.0, model='base', seat='helper')\n", ["logged no turn of the seat 'broken'", "X-Sparring-Seat"]),
    ("play('t1', 1.0, split='train')\n", ["episodes are of split 'train', not eval"]),
], ids=["fails", "no-episode", "unrewarded", "other-tasks", "no-turn-of-the-role", "train-split"])
def test_an_evaluation_that_cannot_be_compared_leaves_the_candidate_a_candidate(lab, env, tmp_path, body, says):
    candidate = lab.publish("broken", active=False)
    before = lab.rows("SELECT count(*) AS n FROM evaluations")
    message = refused("deploy", "broken", "--game", "agents", "--eval-script", script(tmp_path, body))
    assert f"cannot gate {candidate}, which stays a candidate" in message
    for said in says:
        assert said in message
    assert get_version(lab.engine, candidate).status == "candidate"
    assert lab.rows("SELECT count(*) AS n FROM evaluations") == before


def test_the_split_of_an_episode_its_client_names_is_kept(lab, env, tmp_path):
    """The `split` an episode is opened with wins over the gate's (the check above refuses it)."""
    body = "play('t1', 1.0)\nclient.post('/episodes', body={'split': 'heldout'}, cast_to=object)\n"
    factory = PolicyFactory(lab.settings, SamplingParams(), lab.engine)
    played = run_script(lab.engine, factory, script(tmp_path, body), game="agents", role="solver", model="base",
                        split="eval", purpose="a test")
    splits = lab.rows("SELECT split FROM episodes WHERE run_id = :r ORDER BY started_at", r=played.run_id)
    assert (played.episodes, splits) == (2, [{"split": "eval"}, {"split": "heldout"}])


def test_runs_already_logged_are_gated_without_playing_again(lab, env, tmp_path):
    candidate = lab.publish("logged", active=False)
    factory = PolicyFactory(lab.settings, SamplingParams(), lab.engine)
    command = script(tmp_path, scored(candidate, {"x": (0.5, 0.5), "y": (1.0, 0.5)}))
    runs = [run_script(lab.engine, factory, command, game="agents", role="logged", model=model, split="eval",
                       purpose=f"evaluate {model}").run_id for model in (candidate, "base")]
    swapped = refused("deploy", "logged", "--game", "agents", "--candidate-run", runs[1], "--baseline-run", runs[0])
    assert f"the seat 'logged' must be played by {candidate} alone" in swapped
    row = deploy("logged", "--candidate-run", runs[0], "--baseline-run", runs[1])
    assert (row["decision"], row["candidate_value"], row["baseline_value"]) == ("promoted", 0.75, 0.5)


def test_an_external_game_without_an_evaluation_and_a_registered_one_with_a_script_are_refused(lab, env):
    lab.publish("lonely", active=False)
    missing = refused("deploy", "lonely", "--game", "agents")
    assert "game 'agents' is not registered" in missing and "Give --eval-script" in missing
    both = refused("deploy", "lonely", "--game", "agents", "--eval-script", "true", "--candidate-run", "r")
    assert "give one or the other" in both
    registered = refused("deploy", "actor", "--eval-script", "python evaluate.py")
    assert "'math-reflection' is registered: its gate plays its held-out tasks" in registered
    tasks = refused("deploy", "lonely", "--game", "agents", "--tasks", "sums.jsonl", "--eval-script", "true")
    assert "--tasks: game 'agents' is external" in tasks


@pytest.mark.postgres
def test_the_gate_on_postgresql(postgres_url, tmp_path, monkeypatch):
    lab = make_lab(tmp_path, postgres_url)
    use_lab(lab, monkeypatch)
    candidate = lab.publish("solver", active=False)
    row = deploy("solver", "--eval-script", script(tmp_path, scored(candidate, {"t1": (0.0, 1.0), "t2": (1.0, 1.0)})))
    assert (row["decision"], row["candidate_value"], row["baseline_value"]) == ("rejected", 0.5, 1.0)
    assert get_version(lab.engine, candidate).status == "rejected"
