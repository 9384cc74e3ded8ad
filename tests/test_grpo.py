"""Online GRPO on a tiny random Llama: rollouts of the real math-reflection game, logged to a sink.

The random model never writes a right answer, so every reward would be 0 and GRPO would have
nothing to learn from (zero advantage, zero gradient). The tests therefore replace the answer
parser of the game's nodes with one that reads the parity of the answer's length (the task's
answer is "0"): sampled answers then differ in reward, and the adapter must move.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
from memory_sink import MemorySink
from safetensors.torch import load_file
from tiny_model import save_tiny_model

from graphs.math_reflection import nodes
from graphs.policies.adapter_folder import WEIGHTS_FILE
from graphs.policies.policy import Policy
from graphs.registry import scripted_bot
from graphs.tasks.base import Task
from storage.records import EpisodeStatus
from training.trainers import GRPOTrainingConfig, LoraSettings, TrainerError, read_metadata, train_grpo
from training.trainers.grpo import training_model_name

TASKS = [
    Task(id="t1", question="What is 2 + 3?", answer="0", source="test"),
    Task(id="t2", question="What is 7 - 4?", answer="0", source="test"),
]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-base"))


@pytest.fixture
def parity_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodes, "extract_answer", lambda text: str(len(text) % 2))


def digest(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def small(base_dir: Path, **overrides: object) -> GRPOTrainingConfig:
    settings: dict[str, object] = {
        "model": str(base_dir),
        "device": "cpu",
        "lora": LoraSettings(r=4),
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 6,
        "learning_rate": 1e-2,
        "beta": 0.04,
    }
    return GRPOTrainingConfig(**(settings | overrides))


def test_grpo_trains_the_actor_on_logged_game_rollouts(tmp_path: Path, base_dir: Path, parity_judge: None) -> None:
    before = digest(base_dir)
    sink = MemorySink()
    calls: list[tuple[int, int]] = []
    result = train_grpo(
        TASKS,
        small(base_dir),
        role="actor",
        other_policies={"critic": Policy(scripted_bot("always-correct"))},
        sink=sink,
        output_dir=tmp_path / "actor" / "v1",
        cache_dir=tmp_path / "cache",
        progress=lambda step, total: calls.append((step, total)),
    )
    # the adapter moved (a fresh one starts with lora_B = 0), the base model folder did not
    saved = load_file(result.adapter_dir / WEIGHTS_FILE)
    assert saved and all("lora_" in name for name in saved)
    assert any(t.abs().sum() > 0 for name, t in saved.items() if "lora_B" in name)
    assert digest(base_dir) == before
    metadata = read_metadata(result.adapter_dir)
    assert metadata is not None and metadata.trainer == "grpo" and metadata.role == "actor"
    assert metadata.config["num_generations"] == 4 and metadata.metrics == result.metrics
    assert all(math.isfinite(v) for v in result.metrics.values())
    assert result.metrics["steps"] == 2 and calls[-1] == (2, 2)
    assert any("rewards/game_reward/mean" in entry for entry in result.log_history)
    # 2 steps x 4 episodes (one task played num_generations times per step), all logged
    assert len(sink.started) == len(sink.finished) == 8
    assert all(end.status == EpisodeStatus.SUCCEEDED for end in sink.finished)
    assert {s.task_id for s in sink.started} <= {"t1", "t2"}
    actor_turns = [t for t in sink.turns if t.seat == "actor"]
    critic_turns = [t for t in sink.turns if t.seat == "critic"]
    assert len(actor_turns) == len(critic_turns) == 8  # the critic approves: one round each
    assert {t.served_by for t in actor_turns} == {training_model_name("actor")}
    assert {t.served_by for t in critic_turns} == {"scripted:always-correct"}
    assert all(1 <= len(t.completion_token_ids) <= 6 and t.sampling["temperature"] == 1.0 for t in actor_turns)
    rewards = [r.value for r in sink.rewards if r.name == "correct"]
    assert len(rewards) == 8 and set(rewards) <= {0.0, 1.0}


def test_grpo_rejects_a_policy_for_the_trained_role(tmp_path: Path, base_dir: Path) -> None:
    bot = Policy(scripted_bot("always-correct"))
    with pytest.raises(TrainerError, match="role being trained"):
        train_grpo(
            TASKS, small(base_dir), role="actor", other_policies={"actor": bot, "critic": bot},
            sink=MemorySink(), output_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
        )  # fmt: skip
    with pytest.raises(TrainerError, match="critic"):
        train_grpo(
            TASKS, small(base_dir), role="actor", other_policies={},
            sink=MemorySink(), output_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
        )  # fmt: skip
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"num_generations": 1}, "num_generations"),
        ({"per_device_train_batch_size": 6}, "multiple of num_generations"),
        ({"temperature": 0.0}, "temperature"),
        ({"reward": "final"}, "reward"),
    ],
)
def test_grpo_config_rejects_unworkable_values(tmp_path: Path, overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        small(tmp_path, **overrides)


def test_grpo_config_has_help_for_every_field() -> None:
    import dataclasses

    assert all(f.metadata.get("help") for f in dataclasses.fields(GRPOTrainingConfig))
    assert "max_length" not in GRPOTrainingConfig().trl_arguments(output_dir="x", bf16=False, use_cpu=True)

