"""A trained verifier: TRL's RewardTrainer on a tiny random Llama, published under a role of its
own, filling the judge seat of debate and ensemble, and measured against the rules judge.

One verifier is trained for the module (a few optimiser steps on hand-made rows); the tests
publish it into real stores, play scripted debaters and solvers against it, and check its
verdicts against its own scores of the same answers, not against any accuracy it could not
have after three steps.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
from model_logs import as_model_turns
from safetensors.torch import load_file
from sqlalchemy import Engine
from tiny_model import save_random_lora, save_tiny_model, tiny_model, tiny_tokenizer

from app.settings import Settings
from app.wiring import PolicyFactory, SeatSpecError, parse_seat_specs
from evaluation.verifier_report import NoAnswersError, verifier_report
from graphs.debate import prompts as debate_prompts
from graphs.ensemble import prompts as ensemble_prompts
from graphs.ensemble.variants import VARIANTS
from graphs.episodes import play
from graphs.judges.reward_verifier import JudgePromptError, read_judge_prompt
from graphs.metrics.stats import mean_of_proportions, wilson
from graphs.policies.adapter_folder import CONFIG_FILE, WEIGHTS_FILE
from graphs.policies.base import GenerationRequest, SamplingParams
from graphs.policies.policy import Policy
from graphs.policies.reward_model import RewardModel, load_reward_base
from graphs.policies.scripted import BOTS, ScriptedBackend
from graphs.policies.verifier import VerifierBackend
from graphs.registry import get_game, judge_prompt_readers
from graphs.tasks.base import Task
from storage.engine import open_store
from storage.recorder import Recorder
from storage.records import RunRecord
from training.adapter_folders import read_metadata
from training.jobs import run_training_job
from training.registry import RegistryError, publish
from training.trainers import AdapterMismatchError, DatasetColumnsError, LoraSettings, TRLTrainingConfig
from training.trainers.kinds import kind_names, trainer_kind
from training.trainers.reward import reward_pairs, train_reward
from training.trainers.reward_config import RewardTrainingConfig

READERS = judge_prompt_readers()

SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=16)
DEBATE, ENSEMBLE, MATH = get_game("debate"), get_game("ensemble"), get_game("math-reflection")


def labelled(question: str, answer: str, correct: bool, difficulty: str | None) -> dict[str, object]:
    return {"prompt": [{"role": "user", "content": question}],
            "completion": [{"role": "assistant", "content": answer}], "label": correct, "difficulty": difficulty}


ROWS = [
    labelled("What is 2 + 3?", "Answer: 5", True, "L1"),
    labelled("What is 2 + 3?", "Answer: 6", False, "L1"),
    labelled("What is 4 + 4?", "Answer: 8", True, "L1"),
    labelled("What is 12 * 3?", "Answer: 36", True, "L2"),
    labelled("What is 12 * 3?", "Answer: 35", False, "L2"),
    labelled("What is 7 * 9?", "Answer: 63", True, "L2"),
    labelled("What is 7 * 9?", "Answer: 62", False, "L2"),
]


def small(base: Path, **overrides: object) -> RewardTrainingConfig:
    settings: dict[str, object] = {"model": str(base), "device": "cpu", "lora": LoraSettings(r=4), "max_steps": 2,
                                   "per_device_train_batch_size": 2, "learning_rate": 1e-2, "max_length": 96}
    return RewardTrainingConfig(**(settings | overrides))


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-base"))


@pytest.fixture(scope="module")
def base_digest(base_dir: Path) -> str:
    """The base model's weights file before any training."""
    return hashlib.sha256((base_dir / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def trained(base_dir: Path, base_digest: str, tmp_path_factory: pytest.TempPathFactory):
    """A fresh verifier trained on ROWS (role "verifier"), after ``base_digest`` was taken."""
    work = tmp_path_factory.mktemp("verifier")
    return train_reward(ROWS, small(base_dir), role="verifier", output_dir=work / "out", cache_dir=work / "cache",
                        dataset_snapshot_id=None)


def settings_for(base_dir: Path, store_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=store_url, model=str(base_dir), device="cpu", dtype="float32",
                    cache_dir=tmp_path / "cache", data_dir=tmp_path / "data", seats={})


def publish_verifier(engine: Engine, trained, base_dir: Path, root: Path, role: str = "verifier"):
    return publish(engine, role=role, trained_dir=trained.adapter_dir, adapters_root=root, base_model=str(base_dir),
                   trainer="reward", config={}, parent=None, dataset_snapshot_id=None, metrics=trained.metrics)


# --- rows -----------------------------------------------------------------------------------------


def test_labelled_rows_are_paired_within_their_difficulty() -> None:
    pairs = reward_pairs(ROWS)
    assert [(p["chosen"][-1]["content"], p["rejected"][-1]["content"]) for p in pairs.dataset] == [
        ("Answer: 5", "Answer: 6"), ("Answer: 36", "Answer: 35"), ("Answer: 63", "Answer: 62")]
    assert pairs.unpaired == 1  # L1 has one correct answer more than incorrect ones
    assert [correct for _, correct in pairs.answers] == [True, False] * 3
    assert pairs.answers[0][0] == [{"role": "user", "content": "What is 2 + 3?"},
                                   {"role": "assistant", "content": "Answer: 5"}]
    # answers to different questions pair within a level, never across levels
    mixed = reward_pairs([ROWS[0], ROWS[4], labelled("What is 1 + 1?", "Answer: 3", False, "L1")])
    assert [(p["chosen"][0]["content"], p["rejected"][0]["content"]) for p in mixed.dataset] == [
        ("What is 2 + 3?", "What is 1 + 1?")]
    assert mixed.unpaired == 1
    paired = reward_pairs([{"prompt": ROWS[0]["prompt"], "chosen": ROWS[0]["completion"],
                            "rejected": ROWS[1]["completion"], "difficulty": "L1"}])
    assert len(paired.dataset) == 1 and [c for _, c in paired.answers] == [True, False]
    assert paired.answers[1][0][-1] == {"role": "assistant", "content": "Answer: 6"}


@pytest.mark.parametrize(("rows", "message"), [
    ([r for r in ROWS if r["label"]], "all 4 reward rows are correct answers"),
    ([r for r in ROWS if not r["label"]], "all 3 reward rows are incorrect answers"),
    ([ROWS[0], ROWS[4]], "no difficulty level has both a correct and an incorrect answer (L1: 1 correct, 0 "
                         "incorrect, L2: 0 correct, 1 incorrect)"),
    ([{**ROWS[0], "label": None}], "label must be true (a correct answer) or false, got None"),
])
def test_rows_of_one_class_are_refused_before_a_model_loads(tmp_path: Path, rows, message) -> None:
    with pytest.raises(DatasetColumnsError) as caught:
        train_reward(rows, small(tmp_path / "no-model-here"), role="verifier", output_dir=tmp_path / "out",
                     cache_dir=tmp_path / "cache")
    assert message in str(caught.value)
    if "all" in message:
        assert "Play tasks that the answering role gets sometimes right and sometimes wrong" in str(caught.value)
    assert not (tmp_path / "out").exists()


# --- the trainer ------------------------------------------------------------------------------------


def test_the_trainer_changes_the_adapter_and_head_and_never_the_base(trained, base_dir: Path, base_digest: str) -> None:
    assert hashlib.sha256((base_dir / "model.safetensors").read_bytes()).hexdigest() == base_digest
    saved = load_file(trained.adapter_dir / WEIGHTS_FILE)
    heads = [name for name in saved if "lora_" not in name]
    assert heads == ["base_model.model.score.weight"], heads
    assert any(t.abs().sum() > 0 for name, t in saved.items() if "lora_B" in name)  # a fresh lora_B starts at 0
    torch.manual_seed(0)  # the trainer's seed: the head the base starts with
    initial, _ = load_reward_base(str(base_dir), cache_dir=base_dir, device="cpu")
    assert not torch.equal(saved[heads[0]], initial.score.weight.detach())

    verifier = RewardModel.load("verifier@v0", trained.adapter_dir, base_model=str(base_dir), threshold=0.0,
                                cache_dir=base_dir, device="cpu")
    fresh = {name: p for name, p in initial.named_parameters() if name != "score.weight"}
    loaded = {name.removeprefix("base_model.model.").replace(".base_layer", ""): p
              for name, p in verifier.model.named_parameters()
              if "lora_" not in name and "score" not in name}
    assert loaded.keys() == fresh.keys() and all(torch.equal(loaded[n], fresh[n]) for n in fresh)

    config = json.loads((trained.adapter_dir / CONFIG_FILE).read_text())
    assert config["task_type"] == "SEQ_CLS" and "score" in config["modules_to_save"]
    assert config["base_model_name_or_path"] == str(base_dir)
    metadata = read_metadata(trained.adapter_dir)
    assert metadata is not None and (metadata.trainer, metadata.role) == ("reward", "verifier")
    metrics = trained.metrics
    assert metrics["pairs"] == 3 and metrics["unpaired"] == 1 and metrics["steps"] == 2
    assert "accuracy" in metrics and "margin" in metrics and all(math.isfinite(v) for v in metrics.values())
    # the threshold is the median of the training answers' scores: half of the six lie above it
    scores = verifier.score([messages for messages, _ in reward_pairs(ROWS).answers])
    assert sum(score > metrics["threshold"] for score in scores) == 3
    assert metrics["threshold_accuracy"] == sum(
        (score > metrics["threshold"]) == correct
        for score, (_, correct) in zip(scores, reward_pairs(ROWS).answers, strict=True)) / 6


def test_a_policy_adapter_is_no_parent_of_a_verifier(tmp_path: Path, base_dir: Path) -> None:
    parent = save_random_lora(tiny_model(tiny_tokenizer()), tmp_path / "actor", seed=1)
    with pytest.raises(AdapterMismatchError, match=r"is not a verifier \(its adapter_config.json has task_type None, "
                                                   r"not 'SEQ_CLS'\): a verifier continues only a verifier"):
        train_reward(ROWS, small(base_dir), role="verifier", output_dir=tmp_path / "out", cache_dir=tmp_path / "c",
                     parent_adapter=parent)
    assert not (tmp_path / "out").exists()


def test_the_kinds_table_has_a_verifier_row(tmp_path: Path) -> None:
    kind = trainer_kind("reward")
    assert kind.verifier and kind.reads_snapshot and kind.config_type is RewardTrainingConfig
    assert "reward" not in kind_names() and "reward" not in kind_names(reads_snapshot=True)
    assert kind_names(verifier=True) == ["reward"] and kind_names(verifier=None)[-1] == "reward"
    config = RewardTrainingConfig()
    assert isinstance(config, TRLTrainingConfig)
    arguments = config.trl_arguments(output_dir=str(tmp_path), bf16=False, use_cpu=True)
    assert RewardTrainingConfig.trl_config_class()(**arguments).learning_rate == 1e-4
    with pytest.raises(ValueError, match="trl.center_reward is not an argument of TRL's RewardConfig; did you mean "
                                         "'center_rewards_coefficient'"):
        RewardTrainingConfig(trl={"center_reward": 0.01})


# --- registry and seats -----------------------------------------------------------------------------


def test_a_role_holds_policies_or_verifiers_never_both(store: Engine, trained, base_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "adapters"
    policy = save_random_lora(tiny_model(tiny_tokenizer()), tmp_path / "sft", seed=1)
    config = json.loads((policy / CONFIG_FILE).read_text())
    (policy / CONFIG_FILE).write_text(json.dumps({**config, "base_model_name_or_path": str(base_dir)}))
    publish(store, role="actor", trained_dir=policy, adapters_root=root, base_model=str(base_dir), trainer="sft",
            config={}, parent=None, dataset_snapshot_id=None, metrics={})
    with pytest.raises(RegistryError, match=r"role 'actor' holds policies \(actor@v1, trained by sft\), and a "
                                            r"verifier is published under a role of its own"):
        publish_verifier(store, trained, base_dir, root, role="actor")
    record = publish_verifier(store, trained, base_dir, root)
    assert record.name == "verifier@v1" and record.is_verifier and record.eval["training"] == trained.metrics
    with pytest.raises(RegistryError, match="role 'verifier' holds verifiers .*a sft adapter is a policy"):
        publish(store, role="verifier", trained_dir=policy, adapters_root=root, base_model=str(base_dir),
                trainer="sft", config={}, parent=None, dataset_snapshot_id=None, metrics={})


@pytest.mark.parametrize(("game", "seat", "message"), [
    (DEBATE, "debater_a", "verifier:verifier@v1 is a trained verifier, which fills judge seats only; debater_a is "
                          "a learner seat of debate"),
    (MATH, "judge", "the judge seat of math-reflection picks no answer among several, so a trained verifier "
                    "cannot fill it; it fills the judge seat of debate and ensemble"),
    (get_game("story"), "judge", "the judge seat of story picks no answer among several"),
])
def test_a_verifier_fills_only_judge_seats_that_pick_an_answer(game, seat: str, message: str) -> None:
    with pytest.raises(SeatSpecError) as caught:
        parse_seat_specs(game, [f"{seat}=verifier:verifier@v1"], defaults={})
    assert message in str(caught.value)
    with pytest.raises(SeatSpecError, match="name the verifier, e.g. verifier:verifier@v1"):
        parse_seat_specs(DEBATE, ["judge=verifier:"], defaults={})
    assert parse_seat_specs(DEBATE, ["judge=verifier:verifier@v1"], defaults={})["judge"] == "verifier:verifier@v1"


def test_unknown_or_misplaced_versions_are_refused_before_play(
    store: Engine, store_url: str, trained, base_dir: Path, tmp_path: Path
) -> None:
    publish_verifier(store, trained, base_dir, tmp_path / "adapters")
    factory = PolicyFactory(settings_for(base_dir, store_url, tmp_path), SAMPLING, store)

    async def policy(seat: str, spec: str):
        try:
            return await factory.policy(seat, spec)
        finally:
            await factory.aclose()

    cases = {
        ("judge", "verifier:verifier@v7"): "seat judge (verifier:verifier@v7): no adapter version is named "
                                           "'verifier@v7' ('verifier' has 1 version(s); the newest: verifier@v1 "
                                           "candidate); `sparring adapters list` lists the versions",
        ("judge", "verifier:verifier"): "role 'verifier' has no active version: name one (verifier:verifier@vN), or "
                                        "promote one with `sparring adapters promote verifier@vN`",
        ("debater_a", "model:verifier@v1"): "seat debater_a: verifier@v1 is a verifier (a reward model), not a "
                                            "policy; it fills a judge seat of debate or ensemble as "
                                            "verifier:verifier@v1",
    }
    for (seat, spec), message in cases.items():
        with pytest.raises(SeatSpecError) as caught:
            asyncio.run(policy(seat, spec))
        assert message in str(caught.value), (spec, str(caught.value))


# --- a verifier in a judge seat --------------------------------------------------------------------


def test_judge_prompts_are_read_back_as_their_games_write_them() -> None:
    arguments = [{"seat": "debater_a", "turn_id": "1", "round": 0, "text": "It is 5.\n\nAnswer: 5", "answer": "5"},
                 {"seat": "debater_b", "turn_id": "2", "round": 0, "text": "No, 6.\nAnswer: 6", "answer": "6"},
                 {"seat": "debater_a", "turn_id": "3", "round": 1, "text": "Still 5.\nAnswer: 5", "answer": "5"},
                 {"seat": "debater_b", "turn_id": "4", "round": 1, "text": "Fine: 5.\nAnswer: 5", "answer": "5"}]
    debate = read_judge_prompt(debate_prompts.judge_messages("What is 2 +\n3?", arguments), READERS)
    assert debate.question == "What is 2 +\n3?" and debate.answers == ("Still 5.\nAnswer: 5", "Fine: 5.\nAnswer: 5")
    assert [debate.verdict(i) for i in (0, 1)] == ["Winner: A", "Winner: B"]
    ensemble = read_judge_prompt(ensemble_prompts.judge_messages(
        "What is 2 + 3?", [("5", "2 + 3 = 5\n\nAnswer: 5"), ("6", "Answer: 6"), ("0", "Answer: 0")]), READERS)
    assert ensemble.question == "What is 2 + 3?" and ensemble.labels == ("Answer 1", "Answer 2", "Answer 3")
    assert ensemble.answers == ("2 + 3 = 5\n\nAnswer: 5", "Answer: 6", "Answer: 0")
    assert ensemble_prompts.parse_pick(ensemble.verdict(2), 3) == 2
    assert ensemble.scored()[1] == [{"role": "user", "content": "What is 2 + 3?"},
                                    {"role": "assistant", "content": "Answer: 6"}]
    with pytest.raises(JudgePromptError, match="not the judge prompt of debate or ensemble"):
        read_judge_prompt([{"role": "user", "content": "Is this critique right?"}], READERS)


def _debater_b(messages, request) -> str:
    return "I think it is zero.\nAnswer: 0"


def _variant(messages) -> str:
    instruction = messages[0]["content"].split("\n", 1)[1]
    return next(name for name, text in VARIANTS.items() if instruction == text)


def _two_answers(messages, request) -> str:
    variant = _variant(messages)
    return BOTS["calculator"](messages, request) if variant == "plain" else "Answer: 0"


def test_a_published_verifier_judges_debates_and_ensembles(
    store: Engine, store_url: str, trained, base_dir: Path, tmp_path: Path, sums: Path
) -> None:
    from memory_sink import MemorySink

    from graphs.tasks import load_tasks

    publish_verifier(store, trained, base_dir, tmp_path / "adapters")
    factory = PolicyFactory(settings_for(base_dir, store_url, tmp_path), SAMPLING, store)
    tasks = load_tasks(str(sums), n=3, seed=0, split="heldout")
    sink = MemorySink()

    async def main():
        try:
            judge = await factory.policy("judge", "verifier:verifier@v1")
            debaters = {"debater_a": Policy(ScriptedBackend.from_function(BOTS["calculator"]), SAMPLING),
                        "debater_b": Policy(ScriptedBackend.from_function(_debater_b), SAMPLING)}
            solver = Policy(ScriptedBackend.from_function(_two_answers), SAMPLING)
            debates = await play(DEBATE, tasks, {**debaters, "judge": judge}, sink, concurrency=2, seed=0,
                                 options=DEBATE.make_options({"rounds": 1}))
            ensembles = await play(ENSEMBLE, tasks, {"solver": solver, "judge": judge}, sink, concurrency=2, seed=0,
                                   options=ENSEMBLE.make_options({"agents": 2}))
            return judge, debates, ensembles
        finally:
            await factory.aclose()

    judge, debates, ensembles = asyncio.run(main())
    assert judge.label == f"{base_dir}+verifier@v1"
    assert [e.status for e in debates.episodes + ensembles.episodes] == ["succeeded"] * 6
    verifier = RewardModel.load("verifier@v1", trained.adapter_dir, base_model=str(base_dir),
                                threshold=trained.metrics["threshold"], cache_dir=base_dir, device="cpu")
    judged = [t for t in sink.turns if t.seat == "judge"]
    assert len(judged) == 6 and {(t.backend, t.served_by, t.policy) for t in judged} == {
        ("verifier", "verifier@v1", judge.label)}
    for turn in judged:  # each verdict names the answer the verifier itself scores highest
        prompt = read_judge_prompt(turn.messages, READERS)
        scores = verifier.score(prompt.scored())
        best = max(range(len(scores)), key=lambda i: (scores[i], -i))
        assert turn.response.endswith("\n" + prompt.verdict(best)), turn.response
        assert f"(threshold {trained.metrics['threshold']:.3f})" in turn.response
        assert all(f"{label} {score:.3f}" in turn.response for label, score in zip(prompt.labels, scores, strict=True))
    debate_judgments = [j for j in sink.judgments if j.rubric == "debate"]
    assert len(debate_judgments) == 3 and {j.judge_policy for j in debate_judgments} == {judge.label}
    assert all(j.winner_seat in ("debater_a", "debater_b") for j in debate_judgments)
    assert all(e.outcome["decided_by"] == "judge" for e in ensembles.episodes)
    picks = [t for t in judged if t.sampling.get("final_choice")]
    assert len(picks) == 3 and all(t.sampling["final_choice"]["constrained"] for t in picks)


def test_the_verifier_backend_refuses_what_it_cannot_judge(trained, base_dir: Path) -> None:
    verifier = RewardModel.load("verifier@v1", trained.adapter_dir, base_model=str(base_dir), threshold=0.0,
                                cache_dir=base_dir, device="cpu")
    backend = VerifierBackend(verifier, model_name=str(base_dir), readers=READERS)
    from graphs.policies.base import BackendError, UnknownAdapterError

    critique = GenerationRequest([{"role": "user", "content": "Check this critique."}], SAMPLING, "verifier@v1")
    with pytest.raises(BackendError, match="verifier verifier@v1: this is not the judge prompt of debate or ensemble"):
        asyncio.run(backend.generate(critique))
    with pytest.raises(UnknownAdapterError, match="serves verifier@v1, not 'critic@v2'"):
        asyncio.run(backend.generate(GenerationRequest(critique.messages, SAMPLING, "critic@v2")))


def test_training_job_publishes_a_verifier_that_continues_its_parent(
    tmp_path: Path, trained, base_dir: Path
) -> None:
    engine = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    parent = publish_verifier(engine, trained, base_dir, tmp_path / "adapters")
    result = run_training_job(engine, kind="reward", role="verifier", rows=ROWS, config=small(base_dir, max_steps=1),
                              adapters_root=tmp_path / "adapters", cache_dir=tmp_path / "cache", parent=parent)
    assert result.adapter.name == "verifier@v2" and result.adapter.is_verifier and result.adapter.parent_id == parent.id
    before, after = load_file(parent.path / WEIGHTS_FILE), load_file(result.adapter.path / WEIGHTS_FILE)
    assert before.keys() == after.keys() and any(not torch.equal(before[k], after[k]) for k in before)
    assert result.adapter.eval["training"]["threshold"] == result.metrics["threshold"]
    engine.dispose()


# --- the report against the rules judge -----------------------------------------------------------


class SaysAnswered:
    """A stand-in verifier: calls an answer correct when it states one."""

    name = "says-answered"
    threshold = 0.5

    def __init__(self) -> None:
        self.seen: list[list[dict[str, str]]] = []

    def score(self, conversations):
        self.seen += [list(c) for c in conversations]
        return [1.0 if "Answer:" in c[-1]["content"] else 0.0 for c in conversations]


def _by_variant(messages, request) -> str:
    """Right under step-by-step and check-your-work, 'Answer: 0' under plain, none under estimate-then-compute."""
    variant = _variant(messages)
    if variant in ("step-by-step", "check-your-work"):
        return BOTS["calculator"](messages, request)
    return "Answer: 0" if variant == "plain" else "It is hard to say."


def test_the_report_measures_agreement_per_difficulty_with_intervals(store_url: str) -> None:
    engine = open_store(store_url)
    tasks = [Task(f"t{i}", f"What is {i} + 7?", str(i + 7), "test", split, f"L{level}")
             for i, (level, split) in enumerate([(10, "heldout")] * 2 + [(2, "heldout")] * 3 + [(1, "train")] * 2)]
    run = RunRecord.new("ensemble", {}, 0)
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        asyncio.run(play(ENSEMBLE, tasks, {"solver": Policy(ScriptedBackend.from_function(_by_variant), SAMPLING)},
                         recorder, concurrency=2, seed=0, run_id=run.id, options=ENSEMBLE.make_options({})))
    as_model_turns(store_url, "solver")
    stand_in = SaysAnswered()
    report = verifier_report(engine, stand_in, game="ensemble", role="solver")
    assert [level.difficulty for level in report.levels] == ["L2", "L10", "all"]  # L1 is in the train split
    for level, tasks_played in zip(report.levels, (3, 2, 5), strict=True):
        # per task: two right answers (both accepted), "Answer: 0" (wrongly accepted), none (rightly rejected)
        k = tasks_played
        assert (level.n, level.correct, level.incorrect) == (4 * k, 2 * k, 2 * k)
        assert level.accuracy == wilson(3 * k, 4 * k)
        assert (level.accepted, level.rejected) == (wilson(2 * k, 2 * k), wilson(k, 2 * k))
        assert level.balanced_accuracy == mean_of_proportions(level.accepted, level.rejected)
        assert level.to_dict()["balanced_accuracy"]["value"] == pytest.approx(0.75)
    # each answer is scored after the prompt its turn saw, as the verifier's training rows were
    assert len(stand_in.seen) == 20 and stand_in.seen[0][0]["content"].startswith("What is ")
    assert stand_in.seen[0][-1]["role"] == "assistant"
    assert verifier_report(engine, stand_in, game="ensemble", role="solver", limit=6).levels[-1].n == 6
    with pytest.raises(NoAnswersError, match="no answer of 'judge' in succeeded ensemble episodes of split "
                                             "'heldout' was checked against a ground truth"):
        verifier_report(engine, stand_in, game="ensemble", role="judge")
    engine.dispose()


# --- the command line -----------------------------------------------------------------------------


def _play_solver_answers(store_url: str, levels: list[tuple[int, str]]) -> None:
    """Ensemble episodes whose solver answers two of four variants right, logged as model turns."""
    engine = open_store(store_url)
    tasks = [Task(f"t{i}", f"What is {i} + 7?", str(i + 7), "test", split, f"L{level}")
             for i, (level, split) in enumerate(levels)]
    run = RunRecord.new("ensemble", {}, 0)
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        asyncio.run(play(ENSEMBLE, tasks, {"solver": Policy(ScriptedBackend.from_function(_by_variant), SAMPLING)},
                         recorder, concurrency=2, seed=0, run_id=run.id, options=ENSEMBLE.make_options({})))
    engine.dispose()
    as_model_turns(store_url, "solver")


def test_the_cli_trains_measures_and_seats_a_verifier(
    url: str, base_dir: Path, tmp_path: Path, sums: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from app.cli import app

    monkeypatch.setenv("SPARRING_MODEL", str(base_dir))
    monkeypatch.setenv("SPARRING_DEVICE", "cpu")
    monkeypatch.setenv("SPARRING_CACHE_DIR", str(tmp_path / "cache"))
    _play_solver_answers(url, [(1, "train"), (2, "train"), (1, "heldout"), (2, "heldout"), (2, "heldout")])
    config = tmp_path / "reward.yaml"
    config.write_text("lora: {r: 4}\nmax_length: 96\nmax_steps: 1\nper_device_train_batch_size: 2\n")
    runner = CliRunner()

    trained_run = runner.invoke(app, ["train", "reward", "--role", "verifier", "--answers", "solver", "--game",
                                      "ensemble", "--config", str(config), "--format", "json"])
    assert trained_run.exit_code == 0, trained_run.output
    row = json.loads(trained_run.stdout)[0]
    assert row["adapter"] == "verifier@v1" and row["rows"] == 8 and row["pairs"] == 4  # 2 tasks x 2 + 2 each

    report = runner.invoke(app, ["eval-verifier", "verifier@v1", "--format", "json"])
    assert report.exit_code == 0, report.output
    levels = json.loads(report.stdout)
    assert [(r["difficulty"], r["n"], r["correct"], r["incorrect"]) for r in levels] == [
        ("L1", 4, 2, 2), ("L2", 8, 4, 4), ("all", 12, 6, 6)]
    assert {(r["game"], r["answers"], r["split"], r["verifier"]) for r in levels} == {
        ("ensemble", "solver", "heldout", "verifier@v1")}
    assert all(r["accuracy"]["n"] == r["n"] and r["accuracy"]["low"] <= r["accuracy"]["value"] for r in levels)
    table = runner.invoke(app, ["eval-verifier", "verifier"])  # the role names its active version: none yet
    assert table.exit_code == 2 and "role 'verifier' has no active version" in table.output
    deployed = runner.invoke(app, ["deploy", "verifier"])
    assert deployed.exit_code == 2 and "verifier@v1 is a verifier, which no game's gate measures" in " ".join(
        deployed.output.split())

    played = runner.invoke(app, ["play", "debate", "-n", "2", "--tasks", str(sums), "--rounds", "1", "--format",
                                 "json", "--seat", "judge=verifier:verifier@v1", "--seat",
                                 "debater_a=scripted:calculator", "--seat", "debater_b=scripted:stubborn"])
    assert played.exit_code == 0, played.output
    assert json.loads(played.stdout)[0]["succeeded"] == 2


@pytest.mark.parametrize(("args", "message"), [
    (["train", "sft", "--role", "actor", "--answers", "actor"],
     "--answers applies to `sparring train reward` only: the sft trainer learns from actor's own turns"),
    (["train", "reward", "--role", "actor"],
     "--role names the verifier's own role and --answers the role whose answers it judges; both are 'actor'"),
    (["play", "debate", "-n", "1", "--seat", "debater_b=verifier:verifier@v1"],
     "verifier:verifier@v1 is a trained verifier, which fills judge seats only"),
    (["eval-verifier", "verifier@v9"], "no adapter version is named 'verifier@v9'"),
])
def test_the_cli_refuses_bad_verifier_input(url: str, args: list[str], message: str) -> None:
    from typer.testing import CliRunner

    from app.cli import app

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
