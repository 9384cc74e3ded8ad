"""The CLI end to end on scripted seats and a real SQLite file (no model is loaded)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pyarrow.parquet as pq
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from app.cli import app

runner = CliRunner()
SCRIPTED = ["--seat", "actor=scripted:echo", "--seat", "critic=scripted:always-incorrect"]


@pytest.fixture
def db(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("SPARRING_DATABASE_URL", url)
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    return url


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    return result


def words(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def _commands(group, prefix: tuple[str, ...] = ()):
    """Every leaf command (typer vendors its own click, so groups are told by their `commands`)."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _commands(command, prefix + (name,))
        else:
            yield prefix + (name,), command


def test_every_command_has_help_with_an_example():
    commands = list(_commands(get_command(app)))
    assert len(commands) >= 6
    for path, command in commands:
        assert command.help and "Example" in command.help, f"`sparring {' '.join(path)}` has no example in its help"
        result = invoke(*path, "--help")
        assert result.exit_code == 0, result.output


def test_unknown_game_lists_the_games(db):
    result = invoke("play", "chess")
    assert result.exit_code == 2
    assert "unknown game 'chess'" in result.output and "math-reflection" in result.output and "debate" in result.output


def test_malformed_task_file_names_file_and_line(db, tmp_path):
    bad = tmp_path / "tasks.jsonl"
    bad.write_text('{"question": "1+1?", "answer": "#### 2"}\n{not json\n')
    result = invoke("play", "math-reflection", "--tasks", str(bad), *SCRIPTED)
    assert result.exit_code == 2
    assert "tasks.jsonl:2" in result.output and "not valid JSON" in result.output


def test_bad_database_url_is_explained(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARRING_DATABASE_URL", "not-a-url")
    result = invoke("episodes", "list")
    assert result.exit_code == 2
    assert "SPARRING_DATABASE_URL" in result.output and "sqlite:///" in result.output


def test_unreachable_database_is_explained(monkeypatch):
    monkeypatch.setenv("SPARRING_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:1/test")
    result = invoke("episodes", "list")
    assert result.exit_code == 2
    assert "127.0.0.1" in result.output


def test_invalid_setting_names_the_variable(db, monkeypatch):
    monkeypatch.setenv("SPARRING_DEVICE", "gpu0")
    result = invoke("settings")
    assert result.exit_code == 2
    assert "SPARRING_DEVICE" in result.output and "cuda:N" in result.output


def test_bad_seat_spec(db):
    result = invoke("play", "math-reflection", "--seat", "referee=model")
    assert result.exit_code == 2 and "no seat 'referee'" in result.output and "actor" in result.output


def test_unknown_scripted_bot_lists_the_bots(db):
    result = invoke("play", "math-reflection", "--seat", "critic=scripted:oracle")
    assert result.exit_code == 2 and "oracle" in result.output and "always-correct" in result.output


def test_samples_split_the_episodes_between_tasks(db):
    result = invoke("play", "math-reflection", "-n", "5", "--samples", "2", "--turns", "1", "--format", "json",
                    *SCRIPTED)
    assert json.loads(result.stdout.strip().splitlines()[-1])[0]["episodes"] == 5
    rows = json.loads(invoke("episodes", "list", "--format", "json").stdout)
    assert sorted(Counter(r["task_id"] for r in rows).values()) == [1, 2, 2]


def test_play_list_show_export(db, tmp_path):
    result = invoke("play", "math-reflection", "-n", "6", "-c", "3", "--turns", "2", "--format", "json", *SCRIPTED)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])[0]
    assert summary["episodes"] == 6 and summary["succeeded"] == 6 and summary["failed"] == 0
    # the echo actor never states an answer: every answer is unparsed and scores 0
    assert summary["pass@turn-1"] == 0.0 and summary["pass@final-turn"] == 0.0

    listed = invoke("episodes", "list", "--format", "jsonl", "--limit", "4")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(rows) == 4 and all(r["status"] == "succeeded" and r["num_turns"] == 4 for r in rows)
    page2 = invoke("episodes", "list", "--format", "json", "--limit", "4", "--page", "2")
    assert len(json.loads(page2.stdout)) == 2
    keyset = invoke("episodes", "list", "--format", "json", "--limit", "4", "--after", rows[-1]["id"], "--no-count")
    assert [r["id"] for r in json.loads(keyset.stdout)] == [r["id"] for r in json.loads(page2.stdout)]
    assert "next: --after" in invoke("episodes", "list", "--limit", "4", "--no-count").stdout
    unknown = invoke("episodes", "list", "--after", "nope")
    assert unknown.exit_code == 2 and "no episode 'nope' to page after" in unknown.output

    shown = invoke("episodes", "show", rows[0]["id"][:10], "--format", "json")
    episode = json.loads(shown.stdout)  # one object, so `| jq .turns[0]` works
    assert [t["seat"] for t in episode["turns"]] == ["actor", "critic", "actor", "critic"]
    assert episode["turns"][0]["messages"][-1]["role"] == "user"  # the prompt the turn answered
    assert {r["name"] for r in episode["rewards"]} >= {"correct", "verdict_correct"}
    assert invoke("episodes", "show", rows[0]["id"][:10]).exit_code == 0
    assert invoke("episodes", "show", "zzzz").exit_code == 2

    out = tmp_path / "turns.parquet"
    assert invoke("export", str(out)).exit_code == 0
    assert pq.read_table(out).num_rows == 6 * 4
    out = tmp_path / "episodes.jsonl"
    assert invoke("export", str(out), "--level", "episodes").exit_code == 0
    assert len(out.read_text().splitlines()) == 6


def _splits(*play_args: str) -> set[str]:
    result = invoke("play", "math-reflection", "-n", "2", "--turns", "1", "--format", "json", *SCRIPTED, *play_args)
    assert result.exit_code == 0, result.output
    run_id = json.loads(result.stdout.strip().splitlines()[-1])[0]["run_id"]
    rows = json.loads(invoke("episodes", "list", "--run", run_id, "--format", "json").stdout)
    return {json.loads(invoke("episodes", "show", row["id"], "--format", "json").stdout)["split"] for row in rows}


def test_a_task_file_is_played_as_evaluation_data_unless_split_train(db, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"question": "1+1?", "answer": "#### 2"}\n{"question": "2+2?", "answer": "#### 4"}\n')
    assert _splits("--tasks", str(tasks)) == {"eval"}
    assert _splits("--tasks", str(tasks), "--split", "train") == {"train"}
    assert _splits() == {"train"}  # the arithmetic generator's train split


def test_datasets_build_refuses_evaluation_splits_unless_forced(db):
    refused = invoke("datasets", "build", "sft", "--role", "actor", "--split", "eval")
    assert refused.exit_code == 2
    assert "evaluation data" in refused.output and "--train-on-eval-data" in refused.output
    help_text = invoke("datasets", "build", "--help").output
    assert "--train-on-eval-data" in help_text and "worthless" in " ".join(help_text.split())


def test_datasets_build_never_trains_on_scripted_turns(db):
    assert invoke("play", "math-reflection", "-n", "2", "--turns", "1", *SCRIPTED).exit_code == 0
    built = invoke("datasets", "build", "kto", "--role", "actor", "--since", "all")
    assert built.exit_code == 2
    assert "0 model turns of actor read" in words(built) and "scripted bot's turns are never" in words(built)


def test_play_fails_when_no_episode_succeeded_and_says_why(db, monkeypatch):
    monkeypatch.setenv("SPARRING_REQUEST_RETRIES", "0")
    monkeypatch.setenv("SPARRING_OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # nothing listens: refused at once
    result = invoke("play", "math-reflection", "-n", "2", "--seat", "actor=scripted:calculator",
                    "--seat", "critic=openai:gpt-4o-mini")
    assert result.exit_code == 1
    text = words(result)
    assert "no episode succeeded (2 of 2 did not)" in text and "critic turn 1" in text and "could not connect" in text
    assert "SPARRING_OPENAI_API_KEY" in text and "SPARRING_OPENAI_BASE_URL (http://127.0.0.1:9/v1)" in text
    assert "`sparring vllm` serves only 'model' seats" in text


def test_episodes_list_checks_its_filters_and_takes_run_prefixes(db, tmp_path):
    played = invoke("play", "math-reflection", "-n", "2", "--turns", "1", "--format", "json", *SCRIPTED)
    run_id = json.loads(played.stdout.strip().splitlines()[-1])[0]["run_id"]
    misspelt = {
        ("--status", "succeded"): "statuses: running, succeeded, failed, timeout",
        ("--seat", "critc"): "seats: actor, critic, judge, debater_a, debater_b",
        ("--game", "chess"): "games: math-reflection, debate",
        ("--run", "0" * 32): "no run id is or starts with",
    }
    for args, valid in misspelt.items():
        for command in (("episodes", "list"), ("export", str(tmp_path / "x.jsonl"))):
            result = invoke(*command, *args)
            assert result.exit_code == 2 and valid in words(result), (command, args, result.output)
    game_seats = invoke("episodes", "list", "--game", "debate", "--seat", "critic")
    assert game_seats.exit_code == 2
    assert "no such seat in debate; seats: debater_a, debater_b, judge" in words(game_seats)
    by_prefix = json.loads(invoke("episodes", "list", "--run", run_id[:8], "--format", "json").stdout)
    assert len(by_prefix) == 2
    assert json.loads(invoke("episodes", "list", "--run", run_id, "--format", "json").stdout) == by_prefix


def test_episodes_list_policy_is_exact_and_base_means_no_adapter(db):
    from storage.engine import open_store
    from storage.recorder import Recorder
    from tests.factories import episode_start, record_episode, turn_record

    served = {"base": ("bundled", "bundled"), "actor@v1": ("bundled+actor@v1", "actor@v1"),
              "actor@v10": ("bundled+actor@v10", "actor@v10")}
    ids = {}
    with Recorder(open_store(db)) as recorder:
        for name, (label, served_by) in served.items():
            start = episode_start()
            recorder.episode_started(start)
            turn = turn_record(start.id, 0, seat="actor", policy=label, served_by=served_by, backend="inprocess")
            recorder.turn(turn)
            ids[name] = start.id
        record_episode(recorder, policy="scripted:echo")  # no adapter, but no model either: not 'base'
    for name, episode_id in ids.items():
        listed = json.loads(invoke("episodes", "list", "--policy", name, "--format", "json").stdout)
        assert [row["id"] for row in listed] == [episode_id], name
    assert len(json.loads(invoke("episodes", "list", "--policy", "scripted:echo", "--format", "json").stdout)) == 1
    assert json.loads(invoke("episodes", "list", "--policy", "actor@", "--format", "json").stdout) == []


def test_episodes_show_tokens_decoded_beside_their_logprobs(db, tmp_path, monkeypatch):
    from storage.engine import open_store
    from storage.recorder import Recorder
    from tests.factories import episode_start, turn_record
    from tests.tiny_model import save_tiny_model, tiny_tokenizer

    monkeypatch.setenv("SPARRING_MODEL", str(save_tiny_model(tmp_path / "tiny")))
    ids = tiny_tokenizer().encode("Answer: 42", add_special_tokens=False)
    start = episode_start()
    with Recorder(open_store(db)) as recorder:
        recorder.episode_started(start)
        recorder.turn(turn_record(start.id, 0, seat="actor", backend="inprocess", response="Answer: 42",
                                  completion_token_ids=ids, logprobs=[-0.5 * (i + 1) for i in range(len(ids))]))
        recorder.turn(turn_record(start.id, 1, seat="critic", backend="scripted", response="ok",
                                  completion_token_ids=list(b"ok"), logprobs=[0.0, 0.0]))
    shown = json.loads(invoke("episodes", "show", start.id[:8], "--tokens", "--format", "json").stdout)
    model_turn, bot_turn = shown["turns"]
    assert "".join(t["text"] for t in model_turn["tokens"]) == "Answer: 42"
    assert [t["logprob"] for t in model_turn["tokens"]] == [-0.5 * (i + 1) for i in range(len(ids))]
    assert bot_turn["tokens"] == [{"id": 111, "text": "o", "logprob": 0.0}, {"id": 107, "text": "k", "logprob": 0.0}]
    table = invoke("episodes", "show", start.id[:8], "--tokens", "--prompts")
    assert table.exit_code == 0, table.output
    assert '"o"' in table.output and "-0.500" in table.output and "logprob" in table.output


def test_play_help_keeps_seat_short():
    result = runner.invoke(app, ["play", "--help"], env={"COLUMNS": "80", "TERMINAL_WIDTH": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if "--seat" in line)
    end = next(i for i in range(start + 1, len(lines)) if "--temperature" in lines[i])
    assert end - start <= 10, "\n".join(lines[start:end])
    assert all(len(line) <= 80 for line in lines)


def test_adapters_show_of_a_version_that_does_not_exist(db):
    for name in ("actor@v0", "actor@v3"):
        result = invoke("adapters", "show", name)
        assert result.exit_code == 2 and f"no adapter version is named '{name}'" in words(result), result.output
    assert "not an adapter version name" in words(invoke("adapters", "show", "actor-v3"))


def test_train_points_at_deploy_not_at_promote():
    help_text = " ".join(invoke("train", "--help").output.split())
    assert "sparring deploy ROLE" in help_text and "adapters promote" not in help_text


def test_train_parent_names_the_version_to_continue(db):
    """--parent reaches `api.train`: a version the registry lacks, or given with --fresh, is
    refused before a job is recorded (no model is loaded)."""
    for given, says in ((["--parent", "actor@v9"], "parent actor@v9"),
                        (["--parent", "actor@v1", "--fresh"], "fresh starts a new adapter and parent continues "
                                                               "actor@v1")):
        result = invoke("train", "sft", "--role", "actor", *given)
        assert result.exit_code == 2 and says in words(result), result.output
    assert json.loads(invoke("jobs", "list", "--format", "json").stdout) == []
    assert "--parent ROLE@vN" in invoke("train", "--help").output


@pytest.mark.parametrize("timeout", ["-5", "0", "nan"])
def test_play_refuses_a_timeout_that_is_not_positive(db, timeout):
    result = invoke("play", "math-reflection", "-n", "1", "--timeout", timeout, *SCRIPTED)
    assert result.exit_code == 2
    assert "--timeout must be a positive number of seconds" in words(result)
    assert json.loads(invoke("episodes", "list", "--format", "json").stdout) == []  # nothing was played


def test_a_rules_judge_refuses_a_policy(db, monkeypatch):
    result = invoke("play", "math-reflection", "-n", "1", "--seat", "judge=scripted:echo", *SCRIPTED)
    assert result.exit_code == 2
    assert ("the judge seat of math-reflection is a rules judge (it checks the ground truth and makes no model "
            "call), so it cannot take a policy") in words(result)
    for spec in ("judge=rules", "judge=verifier"):  # verifier: the old name of rules
        assert invoke("play", "math-reflection", "-n", "1", "--turns", "1", "--seat", spec,
                      *SCRIPTED).exit_code == 0
    # SPARRING_SEATS serves every game: debate's judge takes its policy, math-reflection's keeps its rules
    monkeypatch.setenv("SPARRING_SEATS", '{"judge": "scripted:always-correct"}')
    played = invoke("play", "math-reflection", "-n", "1", "--turns", "1", "--format", "json", *SCRIPTED)
    assert played.exit_code == 0, played.output
    run_id = json.loads(played.stdout.strip().splitlines()[-1])[0]["run_id"]
    [row] = json.loads(invoke("episodes", "list", "--run", run_id, "--format", "json").stdout)
    assert json.loads(invoke("episodes", "show", row["id"], "--format", "json").stdout)["seats"]["judge"] == "rules"


def test_a_task_file_shorter_than_n_says_so_and_plays_what_it_has(db, tmp_path):
    tasks = tmp_path / "three.jsonl"
    tasks.write_text("".join(json.dumps({"question": f"{a}+1?", "answer": f"#### {a + 1}"}) + "\n" for a in range(3)))
    result = invoke("play", "math-reflection", "-n", "10", "--turns", "1", "--format", "json", "--tasks",
                    str(tasks), *SCRIPTED)
    assert result.exit_code == 0, result.output
    assert "has only 3 task(s): playing 3 episode(s), not the 10 asked for" in words(result)
    assert json.loads(result.stdout.strip().splitlines()[-1])[0]["episodes"] == 3
    sampled = invoke("play", "math-reflection", "-n", "10", "--samples", "2", "--turns", "1", "--tasks", str(tasks),
                     *SCRIPTED)
    assert "has only 3 task(s): playing 6 episode(s) (2 per task), not the 10 asked for" in words(sampled)
    enough = invoke("play", "math-reflection", "-n", "3", "--turns", "1", "--tasks", str(tasks), *SCRIPTED)
    assert enough.exit_code == 0 and "has only" not in enough.output


def test_the_cli_and_its_stale_work_clean_up_import_no_model_library():
    """Every work command cleans up first; importing the trainers there cost a scripted play 5 s
    of its 9 (TRL, PEFT, torch): only commands that load a model may import them."""
    heavy = ("torch", "transformers", "trl", "peft")
    probe = ("import sys, app.cli; from app.commands.common import clean_up_stale_work; "
             "from storage.orphans import mark_orphans; from training.jobs import fail_stale_jobs; "
             f"print([m for m in {heavy!r} if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
