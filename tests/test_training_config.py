"""What `sparring train` passes to the trainers' configs: --report-to for every trainer kind,
and a --config YAML file of settings, checked key by key, which the flags override; and
`sparring retrain --config`: each round's settings and the trainer's under `train:`, the same way."""

from __future__ import annotations

import json

import pytest
from cli_calls import unwrapped
from typer.testing import CliRunner

from app.cli import app

runner = CliRunner()


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"SPARRING_DATABASE_URL": f"sqlite:///{tmp_path / 'store.db'}", "SPARRING_DATA_DIR": str(tmp_path / "data"),
            "SPARRING_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}


def words(result) -> str:
    return " ".join(result.output.split())


@pytest.mark.parametrize("kind", ["sft", "dpo", "kto", "ppo", "grpo"])
def test_report_to_reaches_every_trainer_kind(env, kind):
    """The tracker name reaches the kind's config, which checks it (before any data or model is read)."""
    result = runner.invoke(app, ["train", kind, "--role", "actor", "--report-to", "tensorboard,wandbb"], env=env)
    assert result.exit_code == 2, result.output
    assert "report_to ('tensorboard', 'wandbb') names no known tracker (wandbb)" in words(result)


# --- --config FILE ------------------------------------------------------------------------


def write(tmp_path, text: str):
    path = tmp_path / "train.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("sft", "learning_rate: 1e-4\nlearnig_rate: 3\n",
         "train.yaml, line 2: unknown key 'learnig_rate' for the sft trainer (did you mean 'learning_rate'?). "
         "Valid keys: device, gradient_accumulation_steps,"),
        ("sft", "beta: 0.1\n", "unknown key 'beta' for the sft trainer"),  # a DPO/KTO/GRPO setting
        ("dpo", "lora:\n  rank: 8\n", "line 2: unknown key 'lora.rank' for the dpo trainer. Valid keys of lora: "
         "alpha, dropout, peft, r, target_modules."),
        ("dpo", "trl:\n  warmup_stpes: 0.1\n",
         "line 2: unknown key 'trl.warmup_stpes': not an argument of TRL's DPOConfig (did you mean 'trl.warmup_steps'"),
        ("ppo", "trl: {warmup_steps: 0.1}\n", "unknown key 'trl' for the ppo trainer"),
        ("kto", "lora: {peft: {use_rslor: true}}\n", "not an argument of PEFT's LoraConfig (did you mean "
         "'lora.peft.use_rslora'"),
        ("sft", "max_steps: 2.5\n", "line 1: 'max_steps' must be an integer, got 2.5 (float)"),
        ("sft", "lora:\n  target_modules: 7\n", "'lora.target_modules' must be a string or a list of strings, got 7"),
        ("dpo", "gradient_checkpointing: yes please\n", "'gradient_checkpointing' must be true or false"),
        ("sft", "model: HuggingFaceTB/SmolLM2-360M\n", "'model' cannot be set here: the base model is the "
         "SPARRING_MODEL setting"),
        ("ppo", "precision: float16\n", "precision 'float16' is not one of auto, float32, bfloat16"),
        ("sft", "lora: [1, 2\n", "train.yaml, line 2: not valid YAML"),
        ("sft", "- learning_rate\n", "expected a mapping of setting: value, got a list"),
        ("dpo", "trl: {output_dir: /tmp/x}\n", "trl.output_dir: DPOConfig's 'output_dir' is not passed through "
         "(sparring sets it itself)"),
        ("dpo", "trl: {learning_rate: 0.1}\n", "set it as 'learning_rate' at the top level"),
        ("sft", "lora: {peft: {modules_to_save: [lm_head]}}\n", "would train weights outside the LoRA adapter"),
        ("grpo", "learning_rate: 5\n", "learning_rate 5.0 is above 0.01: LoRA training diverges within a few steps"),
        ("sft", "learning_rate: -1\n", "learning_rate must be a positive number, got -1.0; LoRA usually trains with "
         "1e-5 to 2e-4. (settings from"),
    ],
)
def test_a_bad_config_file_names_the_key_the_file_and_the_fix(env, tmp_path, kind, text, message):
    result = runner.invoke(app, ["train", kind, "--role", "actor", "--config", str(write(tmp_path, text))], env=env)
    assert result.exit_code == 2, result.output
    assert unwrapped(message) in unwrapped(result.output), result.output
    assert "Traceback" not in result.output


def test_flags_override_the_file(env, tmp_path):
    """The file's learning rate is invalid; the flag's replaces it, so the command gets past the
    config and stops only at the missing training data."""
    path = write(tmp_path, "learning_rate: -1\nlora: {r: 8}\n")
    result = runner.invoke(app, ["train", "sft", "--role", "actor", "--config", str(path), "--learning-rate", "1e-4"],
                           env=env)
    assert result.exit_code == 2 and "learning_rate" not in words(result)
    assert "no rows" in words(result) or "play" in words(result), result.output


def test_file_settings_reach_trl_and_peft(tmp_path):
    """LoRA rank, a PEFT-only and a TRL-only argument from the file all take effect in training."""
    from tiny_model import save_tiny_model

    from training.config_file import read_config_file
    from training.trainers import SFTTrainingConfig, train_sft

    path = write(tmp_path, "learning_rate: 1e-3\nmax_steps: 3\nper_device_train_batch_size: 1\nmax_length: 64\n"
                           "lora: {r: 2, alpha: 8, target_modules: [q_proj], peft: {use_rslora: true}}\n"
                           "trl: {lr_scheduler_type: constant}\n")
    values = read_config_file(path, SFTTrainingConfig, "sft")
    config = SFTTrainingConfig(model=str(save_tiny_model(tmp_path / "tiny")), device="cpu", **values)
    rows = [{"messages": [{"role": "user", "content": f"{a}+1?"}, {"role": "assistant", "content": str(a + 1)}]}
            for a in range(3)]
    result = train_sft(rows, config, role="actor", output_dir=tmp_path / "out", cache_dir=tmp_path / "cache")
    adapter = json.loads((result.adapter_dir / "adapter_config.json").read_text())
    assert (adapter["r"], adapter["lora_alpha"], adapter["target_modules"], adapter["use_rslora"]) == (
        2, 8, ["q_proj"], True)
    # TRL's default scheduler decays linearly; "constant" keeps the rate at 1e-3 for every step
    assert [entry["learning_rate"] for entry in result.log_history if "loss" in entry] == [1e-3] * 3


# --- retrain --config FILE ----------------------------------------------------------------


def retrain_file(tmp_path, text: str):
    path = tmp_path / "retrain.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        ("every_episode: 8\n", [], "retrain.yaml, line 1: unknown key 'every_episode' for `sparring retrain` (did you "
         "mean 'every_episodes' or 'every_minutes'?). Valid keys: answer_lines, concurrency, every_episodes, "
         "every_minutes, first_repairs, judge_max_rows, judge_rows, margin, min_rows, practice, practice_samples, "
         "practice_tasks, refinements, roles, samples, tasks, train, trainer."),
        ("rounds: 3\n", [], "unknown key 'rounds' for `sparring retrain`"),  # an option, not a round's setting
        ("samples: 2\nmin_rows: many\n", [], "line 2: 'min_rows' must be an integer, got 'many' (str)"),
        ("roles: critic\n", [], "'roles' must be a list of strings, got 'critic' (str)"),
        ("train: [1e-4]\n", [], "'train' must be a mapping, got ['1e-4'] (list)"),
        ("trainer: dpo\ntrain:\n  loss_typ: ipo\n", [], "line 3: unknown key 'train.loss_typ' for the dpo trainer (did "
         "you mean 'train.loss_type'?). Valid keys of train: beta,"),
        ("train: {beta: 0.1}\n", [], "unknown key 'train.beta' for the sft trainer"),  # sft: retrain's default
        ("trainer: dpo\ntrain: {beta: 0.1}\n", ["--trainer", "sft"],  # the command line's trainer decides
         "unknown key 'train.beta' for the sft trainer"),
        ("train:\n  device: cpu\n", [], "line 2: 'train.device' cannot be set here: retrain trains on the "
         "SPARRING_DEVICE setting"),
        ("train:\n  trl: {warmup_stpes: 0.1}\n", [], "line 2: unknown key 'train.trl.warmup_stpes': not an argument "
         "of TRL's SFTConfig (did you mean 'train.trl.warmup_steps'"),
        ("train: {learning_rate: -1}\n", [], "learning_rate must be a positive number, got -1.0; LoRA usually trains "
         "with 1e-5 to 2e-4. (settings from"),
        ("every_episodes: 1\n", [], "every_episodes (1) must be at least samples (2) (settings from"),
        ("trainer: grpo\n", [], "trainer 'grpo' is not one of sft, dpo, kto, ppo (settings from"),
        ("refinements: true\ntrainer: dpo\n", [], "refinements make sft rows, but the trainer is dpo"),
        ("trainer: kto\n", ["--refinements"], "refinements make sft rows, but the trainer is kto"),
        ("refinements: true\n", ["--game", "debate"], "'debate' declares no refinements"),
    ],
)
def test_a_bad_retrain_file_names_the_key_and_the_fix_and_runs_nothing(env, tmp_path, text, options, message):
    path = retrain_file(tmp_path, text)
    result = runner.invoke(app, ["retrain", *options, "--config", str(path)], env=env)
    assert result.exit_code == 2, result.output
    assert unwrapped(message) in unwrapped(result.output), result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "store.db").exists()  # refused before the store was opened


def test_options_given_override_the_retrain_file(env, tmp_path):
    """Each setting the file gets wrong is given right on the command line (and train's beta is
    checked against the command line's trainer), so the command gets past its settings and stops
    only at the seat it cannot fill."""
    path = retrain_file(tmp_path, "trainer: grpo\nevery_episodes: 1\ntrain: {learning_rate: -1, beta: 0.1}\n")
    result = runner.invoke(app, ["retrain", "--config", str(path), "--trainer", "dpo", "--every-episodes", "8",
                                 "--learning-rate", "1e-4", "--seat", "referee=scripted:echo"], env=env)
    assert result.exit_code == 2, result.output
    assert "has no seat 'referee'" in words(result) and "settings from" not in words(result)


def test_a_retrain_round_runs_with_the_file_and_the_options_given(env, tmp_path):
    """The round's recorded config: the file's settings, the options given over them, the
    options' defaults for the rest, and the trainer settings merged the same way (the file's
    epochs over the --epochs default, --max-steps given). The seats are scripted, so no row is
    trained on; the tiny model is the one the round serves its gates from."""
    from sqlalchemy import select
    from tiny_model import save_tiny_model

    from storage.engine import open_store
    from storage.models import Run

    env = {**env, "SPARRING_MODEL": str(save_tiny_model(tmp_path / "tiny"))}
    path = retrain_file(tmp_path, "trainer: dpo\nroles: [critic]\nevery_episodes: 4\nsamples: 1\npractice: 0\n"
                                  "min_rows: 100000\nconcurrency: 2\n"
                                  "train: {learning_rate: 5.0e-5, num_train_epochs: 3, lora: {r: 8}}\n")
    result = runner.invoke(app, ["retrain", "--config", str(path), "--min-rows", "50", "--max-steps", "2",
                                 "--no-report", "--eval-tasks", "2", "--seat", "actor=scripted:calculator",
                                 "--seat", "critic=scripted:always-correct", "--format", "json"], env=env)
    assert result.exit_code == 0, result.output
    [played] = json.loads(result.stdout.strip().splitlines()[-1])  # one round, one role
    assert (played["episodes"], played["role"], played["status"]) == (4, "critic", "skipped")  # no model turns
    engine = open_store(env["SPARRING_DATABASE_URL"])
    with engine.connect() as conn:
        [config] = [c["config"] for c in conn.scalars(select(Run.config)) if c["purpose"] == "retrain round 1"]
    engine.dispose()
    assert {k: config[k] for k in ("trainer", "roles", "every_episodes", "samples", "practice", "min_rows",
                                   "concurrency", "margin", "practice_samples", "refinements")} == {
        "trainer": "dpo", "roles": ["critic"], "every_episodes": 4, "samples": 1, "practice": 0, "min_rows": 50,
        "concurrency": 2, "margin": 0.0, "practice_samples": 2,
        "refinements": False}  # refinement rows are sft rows: the default turns them on for sft only
    assert config["train_options"] == {"learning_rate": 5e-5, "num_train_epochs": 3.0, "lora": {"r": 8},
                                       "max_steps": 2}
