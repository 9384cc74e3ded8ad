"""LoRA trainers on a tiny random Llama: each trains only its own role's adapter.

Every training test runs 1-3 optimiser steps on a handful of hand-made rows and checks that
the trained adapter moved, the base model folder and another role's adapter folder stayed
byte-identical, the parent folder was only read, and the metrics are finite and recorded in
``sparring.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from tiny_model import save_random_lora, save_tiny_model, tiny_model, tiny_tokenizer

from graphs.policies.adapter_folder import CONFIG_FILE, METADATA_FILE, WEIGHTS_FILE
from graphs.policies.base_models import load_model
from training.trainers import (
    AdapterError,
    AdapterMismatchError,
    DatasetColumnsError,
    DPOTrainingConfig,
    EmptyTrainingDataError,
    KTOTrainingConfig,
    LoraSettings,
    OutputExistsError,
    PPOTrainingConfig,
    SFTTrainingConfig,
    TrainResult,
    check_parent_adapter,
    completion_logprobs,
    read_metadata,
    train_dpo,
    train_kto,
    train_ppo,
    train_sft,
)
from training.trainers.base_config import REPORT_TARGETS
from training.trainers.data import longest_row_tokens
from training.trainers.dpo_config import DPO_LOSS_TYPES
from training.trainers.grpo_config import GRPOTrainingConfig
from training.trainers.kto_config import KTO_LOSS_TYPES
from training.trainers.ppo import policy_terms

ADAPTED = "lora_"
PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]
OTHER_PROMPT = [{"role": "user", "content": "Name a colour."}]


def answer(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


SFT_ROWS = [
    {"messages": PROMPT + answer("5"), "seat": "actor", "reward": 1.0},
    {"messages": OTHER_PROMPT + answer("Blue."), "seat": "actor", "reward": 1.0},
]
DPO_ROWS = [
    {"prompt": PROMPT, "chosen": answer("5"), "rejected": answer("6"), "seat": "actor"},
    {"prompt": OTHER_PROMPT, "chosen": answer("Blue."), "rejected": answer("Seven."), "seat": "actor"},
]
KTO_ROWS = [
    {"prompt": PROMPT, "completion": answer("5"), "label": True, "reward": 1.0},
    {"prompt": PROMPT, "completion": answer("6"), "label": False, "reward": 0.0},
    {"prompt": OTHER_PROMPT, "completion": answer("Blue."), "label": True, "reward": 1.0},
    {"prompt": OTHER_PROMPT, "completion": answer("Seven."), "label": False, "reward": 0.0},
]


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama saved as a model folder (what ``load_model`` gets as the model)."""
    return save_tiny_model(tmp_path_factory.mktemp("tiny-base"))


@pytest.fixture
def adapters(tmp_path: Path, base_dir: Path) -> Path:
    """An adapters root holding a "critic" adapter (another role) and an "actor" parent adapter."""
    root = tmp_path / "adapters"
    twin = tiny_model(tiny_tokenizer())
    save_random_lora(twin, root / "critic" / "v1", seed=1)
    save_random_lora(twin, root / "actor" / "v1", seed=2)
    return root


def small(config_type: type, base_dir: Path, **overrides: object) -> object:
    settings: dict[str, object] = {
        "model": str(base_dir),
        "device": "cpu",
        "lora": LoraSettings(r=4),
        "max_steps": 2,
        "per_device_train_batch_size": 2,
        "learning_rate": 1e-2,
        "max_length": 64,
    }
    return config_type(**(settings | overrides))


def folder_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def assert_trained_alone(
    result: TrainResult,
    *,
    before: dict[Path, dict[str, str]],
    initial: dict[str, torch.Tensor] | None,
    kind: str,
) -> None:
    """The adapter moved; base, other roles' and parent folders did not; metrics are recorded."""
    saved = load_file(result.adapter_dir / WEIGHTS_FILE)
    assert saved and all(ADAPTED in name for name in saved), "only LoRA weights are saved"
    assert not any(".ref." in name for name in saved), "TRL's frozen reference copy is not saved"
    if initial is None:  # a fresh adapter starts with lora_B = 0
        assert any(t.abs().sum() > 0 for name, t in saved.items() if "lora_B" in name)
    else:
        assert saved.keys() == initial.keys()
        assert any(not torch.equal(saved[name], initial[name]) for name in saved)
    for folder, digest in before.items():
        assert folder_digest(folder) == digest, f"{folder} changed"
    metadata = read_metadata(result.adapter_dir)
    assert metadata is not None and metadata.trainer == kind and metadata.role == "actor"
    assert metadata.metrics == result.metrics
    assert all(math.isfinite(value) for value in result.metrics.values())
    assert result.metrics["steps"] >= 1 and "loss" in result.metrics and "runtime_s" in result.metrics
    assert result.log_history and all(math.isfinite(v) for entry in result.log_history for v in entry.values())


def snapshot(*folders: Path) -> dict[Path, dict[str, str]]:
    return {folder: folder_digest(folder) for folder in folders}


@pytest.mark.parametrize("from_parent", [False, True], ids=["fresh", "parent"])
def test_sft_trains_only_its_adapter_and_reports_progress(
    tmp_path: Path, base_dir: Path, adapters: Path, from_parent: bool
) -> None:
    parent = adapters / "actor" / "v1" if from_parent else None
    initial = load_file(parent / WEIGHTS_FILE) if parent else None
    before = snapshot(base_dir, adapters / "critic", adapters / "actor" / "v1")
    calls: list[tuple[int, int]] = []
    result = train_sft(
        SFT_ROWS,
        small(SFTTrainingConfig, base_dir),
        role="actor",
        output_dir=adapters / "actor" / "v2",
        cache_dir=tmp_path / "cache",
        parent_adapter=parent,
        dataset_snapshot_id=7,
        progress=lambda step, total: calls.append((step, total)),
    )
    assert_trained_alone(result, before=before, initial=initial, kind="sft")
    assert calls[0] == (0, 2) and calls[-1] == (2, 2)
    metadata = read_metadata(result.adapter_dir)
    assert metadata is not None
    assert metadata.dataset_snapshot_id == 7
    assert metadata.parent_adapter == (str(parent.resolve()) if parent else None)
    assert metadata.base_model == str(base_dir) and metadata.config["lora"]["r"] == 4
    adapter_config = json.loads((result.adapter_dir / CONFIG_FILE).read_text())
    assert adapter_config["base_model_name_or_path"] == str(base_dir)  # the configured name, for the registry
    assert sorted(p.name for p in result.adapter_dir.iterdir() if not p.name.startswith("README")) == [
        CONFIG_FILE,
        WEIGHTS_FILE,
        METADATA_FILE,
    ]
    assert [p.name for p in (adapters / "actor").iterdir() if p.name.startswith(".")] == []  # no staging left


def test_a_bfloat16_base_trains_a_float32_adapter(tmp_path: Path, base_dir: Path, adapters: Path) -> None:
    """``precision: bfloat16`` loads the frozen base in bfloat16; the adapter still trains and is saved in float32."""
    before = snapshot(base_dir)
    config = small(SFTTrainingConfig, base_dir, precision="bfloat16")
    result = train_sft(SFT_ROWS, config, role="actor", output_dir=adapters / "actor" / "v9",
                       cache_dir=tmp_path / "cache")
    assert_trained_alone(result, before=before, initial=None, kind="sft")
    assert {t.dtype for t in load_file(result.adapter_dir / WEIGHTS_FILE).values()} == {torch.float32}
    metadata = read_metadata(result.adapter_dir)
    assert metadata is not None and metadata.config["precision"] == "bfloat16"


def test_a_batch_over_max_batch_tokens_trains_in_smaller_passes_of_the_same_effective_batch(
    tmp_path: Path, base_dir: Path, adapters: Path
) -> None:
    before = snapshot(base_dir, adapters / "critic", adapters / "actor" / "v1")
    result = train_sft(
        SFT_ROWS,
        small(SFTTrainingConfig, base_dir, max_batch_tokens=8),  # a row of these is ~20 tokens
        role="actor",
        output_dir=adapters / "actor" / "v3",
        cache_dir=tmp_path / "cache",
        parent_adapter=None,
        dataset_snapshot_id=None,
        progress=None,
    )
    assert_trained_alone(result, before=before, initial=None, kind="sft")
    assert result.metrics["steps"] == 2
    metadata = read_metadata(result.adapter_dir)
    assert metadata is not None  # what the run used is what it records
    assert (metadata.config["per_device_train_batch_size"], metadata.config["gradient_accumulation_steps"]) == (1, 2)


def test_longest_row_counts_the_prompt_and_the_longest_answer() -> None:
    tokenizer = tiny_tokenizer()
    long_answer = answer("one two three four five six seven eight nine ten")
    rows = Dataset.from_list([{"prompt": PROMPT, "chosen": answer("5"), "rejected": long_answer},
                              {"prompt": OTHER_PROMPT, "chosen": answer("Blue."), "rejected": answer("6")}])
    count = longest_row_tokens(rows, tokenizer)
    expected = (len(tokenizer(PROMPT[0]["content"], add_special_tokens=False)["input_ids"])
                + len(tokenizer(long_answer[0]["content"], add_special_tokens=False)["input_ids"]) + 16)
    assert count == expected
    assert longest_row_tokens(Dataset.from_list(SFT_ROWS), tokenizer) > 0


@pytest.mark.parametrize(
    ("config_type", "batch", "accumulation", "longest", "budget", "expected"),
    [
        (SFTTrainingConfig, 4, 1, 200, 1024, (4, 1)),  # fits: unchanged
        (SFTTrainingConfig, 4, 1, 400, 1024, (2, 2)),
        (SFTTrainingConfig, 4, 2, 1000, 1024, (1, 8)),
        (SFTTrainingConfig, 4, 1, 5000, 1024, (1, 4)),  # nothing fits: one row a pass
        (DPOTrainingConfig, 4, 1, 300, 1024, (1, 4)),  # a row is two sequences
        (KTOTrainingConfig, 4, 1, 1000, 1024, (2, 2)),  # KTO's batch stays >= 2
        (SFTTrainingConfig, 6, 1, 300, 1024, (3, 2)),  # a divisor, so the effective batch is kept
        (SFTTrainingConfig, 4, 1, 5000, None, (4, 1)),  # never split
    ],
)
def test_split_keeps_the_effective_batch_under_the_token_budget(
    config_type: type, batch: int, accumulation: int, longest: int, budget: int | None, expected: tuple[int, int]
) -> None:
    config = config_type(model="bundled", per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
                         max_batch_tokens=budget, max_length=4096)
    assert config.may_split == (budget is not None)
    split = config.split_for(longest)
    assert (split.per_device_train_batch_size, split.gradient_accumulation_steps) == expected
    assert split.per_device_train_batch_size * split.gradient_accumulation_steps == batch * accumulation


def test_a_batch_that_cannot_split_is_not_measured() -> None:
    assert not GRPOTrainingConfig(model="bundled").may_split  # its batches are its generations
    assert not KTOTrainingConfig(model="bundled", per_device_train_batch_size=2).may_split  # KTO's least batch


def test_max_length_caps_the_rows_the_split_sees() -> None:
    config = SFTTrainingConfig(model="bundled", max_length=256)
    assert config.split_for(100_000).per_device_train_batch_size == 4  # truncated to 256: 4 x 256 fits


@pytest.mark.parametrize(("rpo_alpha", "from_parent"), [(None, False), (1.0, True)], ids=["dpo-fresh", "rpo-parent"])
def test_dpo_trains_only_its_adapter(
    tmp_path: Path, base_dir: Path, adapters: Path, rpo_alpha: float | None, from_parent: bool
) -> None:
    parent = adapters / "actor" / "v1" if from_parent else None
    initial = load_file(parent / WEIGHTS_FILE) if parent else None
    before = snapshot(base_dir, adapters / "critic", adapters / "actor" / "v1")
    result = train_dpo(
        DPO_ROWS,
        small(DPOTrainingConfig, base_dir, rpo_alpha=rpo_alpha),
        role="actor",
        output_dir=adapters / "actor" / "v2",
        cache_dir=tmp_path / "cache",
        parent_adapter=parent,
    )
    assert_trained_alone(result, before=before, initial=initial, kind="dpo")
    assert "rewards/accuracies" in result.metrics and "rewards/margins" in result.metrics
    # the reference is the starting policy (the parent, or the base for a fresh adapter): no margin at step 1
    assert result.log_history[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-4)
    metadata = read_metadata(result.adapter_dir)
    assert metadata is not None and metadata.config["rpo_alpha"] == rpo_alpha


def test_kto_trains_from_parent(tmp_path: Path, base_dir: Path, adapters: Path) -> None:
    parent = adapters / "actor" / "v1"
    initial = load_file(parent / WEIGHTS_FILE)
    before = snapshot(base_dir, adapters / "critic", parent)
    result = train_kto(
        KTO_ROWS,
        small(KTOTrainingConfig, base_dir, max_steps=1, per_device_train_batch_size=4),
        role="actor",
        output_dir=adapters / "actor" / "v2",
        cache_dir=tmp_path / "cache",
        parent_adapter=parent,
    )
    assert_trained_alone(result, before=before, initial=initial, kind="kto")
    assert "kl" in result.metrics


def ppo_rows(model_dir: Path, parent: Path, advantages: list[float]) -> list[dict[str, object]]:
    """One logged sample per advantage (at most three) whose behaviour logprobs are the parent policy's own."""
    tokenizer = tiny_tokenizer()
    policy = parent_policy(model_dir, parent)
    rows = []
    samples = [("What is 2 + 3?", " 5, I think"), ("Name a colour.", " Blue"), ("Say hello.", " Hello there")]
    for (prompt, completion), advantage in zip(samples[: len(advantages)], advantages, strict=True):
        prompt_ids = tokenizer(prompt)["input_ids"]
        completion_ids = tokenizer(completion)["input_ids"]
        rows.append(
            {
                "prompt": [{"role": "user", "content": prompt}],
                "completion": answer(completion),
                "prompt_token_ids": prompt_ids,
                "completion_token_ids": completion_ids,
                "behaviour_logprobs": completion_logprobs(policy, prompt_ids, completion_ids),
                "reward": advantage,
                "advantage": advantage,
                "turn_id": f"t{len(rows)}",
            }
        )
    return rows


def parent_policy(model_dir: Path, adapter: Path) -> torch.nn.Module:
    from peft import PeftModel

    model, _ = load_model(str(model_dir), cache_dir=model_dir, device="cpu")
    return PeftModel.from_pretrained(model, str(adapter)).eval()


def test_ppo_positive_advantage_raises_the_completion_logprob(tmp_path: Path, base_dir: Path, adapters: Path) -> None:
    parent = adapters / "actor" / "v1"
    initial = load_file(parent / WEIGHTS_FILE)
    rows = ppo_rows(base_dir, parent, advantages=[1.0, 0.0])
    before = snapshot(base_dir, adapters / "critic", parent)
    result = train_ppo(
        rows,
        small(PPOTrainingConfig, base_dir, max_steps=3, learning_rate=1e-3, skip_zero_advantage=False),
        role="actor",
        output_dir=adapters / "actor" / "v2",
        cache_dir=tmp_path / "cache",
        parent_adapter=parent,
    )
    assert_trained_alone(result, before=before, initial=initial, kind="ppo")
    assert {"ratio_mean", "clip_fraction", "kl", "pg_loss", "entropy"} <= result.metrics.keys()
    first = result.log_history[0]
    assert first["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # behaviour = the parent policy
    # what tells a user whether it can learn: rewards 1 and 0, one row of two without advantage
    assert first["reward"] == pytest.approx(0.5) and first["reward_std"] == pytest.approx(0.5)
    assert first["frac_zero_advantage"] == pytest.approx(0.5)
    assert 0 < first["entropy"] <= math.log(len(tiny_tokenizer())) + 1e-3  # nats, at most a uniform choice
    trained = parent_policy(base_dir, result.adapter_dir)
    row = rows[0]
    after = sum(completion_logprobs(trained, row["prompt_token_ids"], row["completion_token_ids"]))
    assert after > sum(row["behaviour_logprobs"]) + 0.1


@pytest.mark.parametrize("kind", ["sft", "ppo"])
def test_time_budget_stops_after_the_step_that_spends_it(tmp_path: Path, base_dir: Path, adapters: Path,
                                                         kind: str) -> None:
    parent = adapters / "actor" / "v1"
    if kind == "sft":
        train, rows, config = train_sft, SFT_ROWS, small(SFTTrainingConfig, base_dir, max_steps=50, max_seconds=1e-6)
    else:
        rows = ppo_rows(base_dir, parent, advantages=[1.0, 0.0])
        train, config = train_ppo, small(PPOTrainingConfig, base_dir, max_steps=50, max_seconds=1e-6)
    result = train(rows, config, role="actor", output_dir=adapters / "actor" / "v2", cache_dir=tmp_path / "cache",
                   parent_adapter=parent)
    assert result.metrics["steps"] == 1.0  # 50 planned; the budget ran out during the first
    assert load_file(result.adapter_dir / WEIGHTS_FILE).keys() == load_file(parent / WEIGHTS_FILE).keys()


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """The scalars of the TensorBoard event files in ``folder``: tag -> [(step, value)].

    An event file is a sequence of TFRecords (length, its CRC, an ``Event`` protobuf, its CRC)."""
    import struct

    from tensorboardX.proto import event_pb2

    scalars: dict[str, list[tuple[int, float]]] = {}
    for file in folder.glob("events.out.tfevents.*"):
        data, at = file.read_bytes(), 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at : at + 8])
            event = event_pb2.Event.FromString(data[at + 12 : at + 12 + length])
            at += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


@pytest.mark.parametrize("kind", ["sft", "dpo", "kto", "ppo"])
def test_report_to_tensorboard_reaches_every_trainer(tmp_path: Path, base_dir: Path, adapters: Path, kind: str) -> None:
    pytest.importorskip("tensorboardX", reason="the TensorBoard test needs tensorboardX (pip install tensorboardX)")
    parent = adapters / "actor" / "v1"
    train, rows, config_type = {
        "sft": (train_sft, SFT_ROWS, SFTTrainingConfig),
        "dpo": (train_dpo, DPO_ROWS, DPOTrainingConfig),
        "kto": (train_kto, KTO_ROWS, KTOTrainingConfig),
        "ppo": (train_ppo, ppo_rows(base_dir, parent, advantages=[1.0, 0.0]) if kind == "ppo" else [],
                PPOTrainingConfig),
    }[kind]
    config = small(config_type, base_dir, report_to="tensorboard", logging_dir=str(tmp_path / "runs"))
    result = train(rows, config, role="actor", output_dir=tmp_path / "out", cache_dir=tmp_path / "cache",
                   parent_adapter=parent)
    [run] = list((tmp_path / "runs").iterdir())
    assert run.name.startswith(f"{kind}-actor-")
    scalars = tensorboard_scalars(run)
    assert [step for step, _ in scalars["train/loss"]] == [1, 2]
    assert scalars["train/loss"][-1][1] == pytest.approx(result.log_history[1]["loss"], rel=1e-5)
    assert "train/learning_rate" in scalars
    assert not [p for p in result.adapter_dir.iterdir() if p.is_dir()]  # no event files in the adapter


@pytest.mark.parametrize("kind", ["sft", "ppo"])
def test_a_run_that_fails_midway_leaves_no_folder_behind(tmp_path: Path, base_dir: Path, adapters: Path,
                                                          kind: str) -> None:
    """The staging folder is removed the registry's way (``adapter_folders.discard``); nothing is published."""
    parent = adapters / "actor" / "v1"
    train, rows, config_type = (train_sft, SFT_ROWS, SFTTrainingConfig) if kind == "sft" else (
        train_ppo, ppo_rows(base_dir, parent, advantages=[1.0, 0.0]), PPOTrainingConfig)

    def fail_at_step_1(step: int, total: int) -> None:
        if step == 1:
            raise RuntimeError("power cut")

    with pytest.raises(RuntimeError, match="power cut"):
        train(rows, small(config_type, base_dir), role="actor", output_dir=tmp_path / "runs" / "v2",
              cache_dir=tmp_path / "cache", parent_adapter=parent, progress=fail_at_step_1)
    assert list((tmp_path / "runs").iterdir()) == []


def test_ppo_zero_advantage_without_kl_leaves_weights_unchanged(tmp_path: Path, base_dir: Path, adapters: Path) -> None:
    parent = adapters / "actor" / "v1"
    rows = ppo_rows(base_dir, parent, advantages=[0.0, 0.0])  # every row without advantage: all are kept
    result = train_ppo(
        rows,
        small(
            PPOTrainingConfig,
            base_dir,
            kl_coef=0.0,
            max_steps=2,
            gradient_accumulation_steps=2,
            per_device_train_batch_size=1,
        ),
        role="actor",
        output_dir=tmp_path / "out",
        cache_dir=tmp_path / "cache",
        parent_adapter=parent,
    )
    saved, initial = load_file(result.adapter_dir / WEIGHTS_FILE), load_file(parent / WEIGHTS_FILE)
    assert saved.keys() == initial.keys()
    assert all(torch.equal(saved[name], initial[name]) for name in saved)
    assert result.metrics["loss"] == 0.0 and result.metrics["grad_norm"] == 0.0
    assert result.metrics["frac_zero_advantage"] == 1.0  # nothing to learn, and the log says so
    assert result.metrics["zero_advantage_rows"] == 2.0


@pytest.mark.parametrize("objective", ["clipped", "reinforce"])
def test_ppo_trains_only_rows_with_advantage_and_moves_them_their_way(
    tmp_path: Path, base_dir: Path, adapters: Path, objective: str
) -> None:
    """A row without advantage is left out (counted); the positive row's completion gains
    log-probability and the negative row's loses it, under either objective."""
    parent = adapters / "actor" / "v1"
    rows = ppo_rows(base_dir, parent, advantages=[1.0, -1.0, 0.0])
    result = train_ppo(
        rows,
        small(PPOTrainingConfig, base_dir, max_steps=3, learning_rate=1e-3, kl_coef=0.0, objective=objective,
              per_device_train_batch_size=2, gradient_accumulation_steps=1),
        role="actor", output_dir=tmp_path / "out", cache_dir=tmp_path / "cache", parent_adapter=parent,
    )
    assert result.metrics["zero_advantage_rows"] == 1.0
    assert result.log_history[0]["frac_zero_advantage"] == 0.0  # the step saw the two rows with advantage
    trained = parent_policy(base_dir, result.adapter_dir)
    moved = [sum(completion_logprobs(trained, row["prompt_token_ids"], row["completion_token_ids"]))
             - sum(row["behaviour_logprobs"]) for row in rows[:2]]
    assert moved[0] > 0.1 and moved[1] < -0.1


def test_reinforce_keeps_pushing_where_the_clip_stops() -> None:
    """Past the clip range the clipped surrogate has no gradient for a positive advantage;
    REINFORCE's term still has one."""
    new = torch.tensor([[math.log(2.0)]], requires_grad=True)
    behaviour = torch.zeros((1, 1))
    for objective, expected in (("clipped", 0.0), ("reinforce", -1.0)):
        pg, _, _ = policy_terms(new, behaviour, base=behaviour, advantages=torch.tensor([1.0]), clip_eps=0.2,
                                objective=objective)
        (gradient,) = torch.autograd.grad(pg.sum(), new)
        assert gradient.item() == pytest.approx(expected)


def test_policy_terms_clip_the_ratio_and_k3_vanishes_at_the_base() -> None:
    new = torch.tensor([[0.0, math.log(2.0)]])
    behaviour = torch.zeros((1, 2))
    pg, kl, ratio = policy_terms(new, behaviour, base=new.clone(), advantages=torch.tensor([1.0]), clip_eps=0.2)
    assert ratio[0].tolist() == pytest.approx([1.0, 2.0])
    assert pg[0].tolist() == pytest.approx([-1.0, -1.2])  # the clipped term wins for a large ratio
    assert kl[0].tolist() == pytest.approx([0.0, 0.0])
    pg, kl, _ = policy_terms(new, behaviour, base=behaviour, advantages=torch.tensor([-1.0]), clip_eps=0.2)
    assert pg[0].tolist() == pytest.approx([1.0, 2.0])  # negative advantage: the unclipped, larger loss
    assert kl[0, 1].item() == pytest.approx(0.5 - math.log(0.5) - 1)


def test_ppo_rejects_logprobs_of_another_length_before_loading(tmp_path: Path) -> None:
    row = {
        "prompt_token_ids": [1, 2],
        "completion_token_ids": [3, 4, 5],
        "behaviour_logprobs": [-1.0, -1.0],
        "advantage": 1.0,
        "turn_id": "t9",
    }
    config = PPOTrainingConfig(model=str(tmp_path / "no-such-model"))
    with pytest.raises(DatasetColumnsError, match=r"row 0 \(turn t9\) has 2 behaviour logprobs for 3 completion"):
        train_ppo([row], config, role="actor", output_dir=tmp_path / "out", cache_dir=tmp_path)
    assert not (tmp_path / "out").exists()


TRAINERS: list[tuple[Callable[..., TrainResult], type]] = [
    (train_sft, SFTTrainingConfig),
    (train_dpo, DPOTrainingConfig),
    (train_kto, KTOTrainingConfig),
    (train_ppo, PPOTrainingConfig),
]


@pytest.mark.parametrize(("train", "config_type"), TRAINERS, ids=["sft", "dpo", "kto", "ppo"])
def test_empty_dataset_is_refused_before_the_model_loads(
    tmp_path: Path, train: Callable[..., TrainResult], config_type: type
) -> None:
    config = config_type(model=str(tmp_path / "no-such-model"))  # loading it would raise ModelLoadError
    with pytest.raises(EmptyTrainingDataError, match="no rows"):
        train([], config, role="actor", output_dir=tmp_path / "out", cache_dir=tmp_path)


def test_missing_columns_are_named(tmp_path: Path) -> None:
    with pytest.raises(
        DatasetColumnsError, match=r"needs the columns \{prompt, chosen, rejected\}.*with the dpo builder"
    ):
        train_dpo(SFT_ROWS, role="actor", output_dir=tmp_path / "out", cache_dir=tmp_path)


def test_output_folder_is_never_overwritten(tmp_path: Path, base_dir: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(OutputExistsError, match="never overwritten"):
        train_sft(
            SFT_ROWS, small(SFTTrainingConfig, base_dir), role="actor", output_dir=tmp_path / "out", cache_dir=tmp_path
        )


@pytest.mark.parametrize(
    ("damage", "error", "message"),
    [
        (lambda d: (d / CONFIG_FILE).unlink(), AdapterError, "has no adapter_config.json"),
        (lambda d: (d / CONFIG_FILE).write_text("{not json"), AdapterError, "not valid JSON"),
        (
            lambda d: (d / WEIGHTS_FILE).write_bytes((d / WEIGHTS_FILE).read_bytes()[:200]),
            AdapterError,
            "not a readable safetensors file .*truncated",
        ),
        (lambda d: (d / WEIGHTS_FILE).unlink(), AdapterError, "has no adapter_model.safetensors"),
        (lambda d: _set_base(d, "someone/other-model"), AdapterMismatchError, "built for base model 'someone/other"),
    ],
    ids=["no-config", "bad-json", "truncated", "no-weights", "other-base"],
)
def test_damaged_or_foreign_parent_adapter_is_refused(
    tmp_path: Path, base_dir: Path, adapters: Path, damage: Callable[[Path], None], error: type, message: str
) -> None:
    parent = adapters / "actor" / "v1"
    damage(parent)
    with pytest.raises(error, match=message):
        check_parent_adapter(parent, model=str(base_dir), role="actor", cache_dir=tmp_path)
    with pytest.raises(error, match=message):  # the trainers check it before loading the model
        train_sft(
            SFT_ROWS,
            small(SFTTrainingConfig, base_dir),
            role="actor",
            output_dir=tmp_path / "out",
            cache_dir=tmp_path,
            parent_adapter=parent,
        )
    assert not (tmp_path / "out").exists()


def _set_base(folder: Path, base: str) -> None:
    config = json.loads((folder / CONFIG_FILE).read_text())
    (folder / CONFIG_FILE).write_text(json.dumps(config | {"base_model_name_or_path": base}))


def test_parent_of_another_role_or_base_per_sparring_json_is_refused(
    tmp_path: Path, base_dir: Path, adapters: Path
) -> None:
    parent = adapters / "critic" / "v1"
    metadata = {
        "role": "critic",
        "trainer": "sft",
        "base_model": str(base_dir.resolve()),
        "parent_adapter": None,
        "config": {},
        "metrics": {},
        "dataset_snapshot_id": None,
        "created_at": "2026-01-01T00:00:00+00:00",
    }
    (parent / METADATA_FILE).write_text(json.dumps(metadata))
    check_parent_adapter(parent, model=str(base_dir), role="critic", cache_dir=tmp_path)
    with pytest.raises(AdapterMismatchError, match=r"belongs to role 'critic', not 'actor'"):
        check_parent_adapter(parent, model=str(base_dir), role="actor", cache_dir=tmp_path)
    with pytest.raises(AdapterMismatchError, match=r"trained on base model .* not 'bundled'"):
        check_parent_adapter(parent, model="bundled", role="critic", cache_dir=tmp_path)
    (parent / METADATA_FILE).write_text("{oops")
    with pytest.raises(AdapterError, match=r"sparring\.json is unreadable"):
        check_parent_adapter(parent, model=str(base_dir), role="critic", cache_dir=tmp_path)


@pytest.mark.parametrize(
    ("config_type", "fields", "message"),
    [
        (DPOTrainingConfig, {"rpo_alpha": -0.5}, "rpo_alpha must be >= 0"),
        (DPOTrainingConfig, {"learning_rate": 0.0}, "learning_rate must be a positive number"),
        (DPOTrainingConfig, {"per_device_train_batch_size": 0}, "raise gradient_accumulation_steps"),
        (DPOTrainingConfig, {"loss_type": "dpo"}, "not a DPO loss of TRL; use one of sigmoid"),
        (DPOTrainingConfig, {"loss_type": "sft", "rpo_alpha": 1.0}, "second time: set rpo_alpha to None"),
        (DPOTrainingConfig, {"loss_type": "exo_pair"}, "needs label_smoothing > 0"),
        (DPOTrainingConfig, {"label_smoothing": 0.1}, "no effect with loss_type 'sigmoid'"),
        (DPOTrainingConfig, {"beta": 0.0}, "beta must be > 0"),
        (KTOTrainingConfig, {"per_device_train_batch_size": 1}, "kto needs per_device_train_batch_size >= 2"),
        (KTOTrainingConfig, {"loss_type": "sigmoid"}, "not a KTO loss"),
        (KTOTrainingConfig, {"desirable_weight": 0.0}, "must be > 0"),
        (SFTTrainingConfig, {"num_train_epochs": 0}, "set max_steps instead"),
        (SFTTrainingConfig, {"max_steps": 0}, "max_steps must be -1"),
        (SFTTrainingConfig, {"device": "gpu"}, "use auto, cpu, cuda"),
        (SFTTrainingConfig, {"device": "cuda:1"}, "CUDA_VISIBLE_DEVICES=1"),
        (SFTTrainingConfig, {"report_to": "tensorbored"}, "names no known tracker"),
        (SFTTrainingConfig, {"report_to": ["none", "wandb"]}, 'mixes "none"'),
        (SFTTrainingConfig, {"max_length": 1}, "max_length must be >= 2"),
        (SFTTrainingConfig, {"max_seconds": 0}, "max_seconds must be > 0"),
        (PPOTrainingConfig, {"clip_eps": 0.0}, "clip_eps must be in"),
        (PPOTrainingConfig, {"kl_coef": -0.1}, "kl_coef must be >= 0"),
        (PPOTrainingConfig, {"objective": "a2c"}, "objective must be one of clipped, reinforce"),
        (PPOTrainingConfig, {"clip_eps_high": math.inf}, "clip_eps_high must be a finite number"),
        (PPOTrainingConfig, {"gradient_accumulation_steps": 0}, "gradient_accumulation_steps must be >= 1"),
    ],
)
def test_config_validation_says_how_to_fix(config_type: type, fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        config_type(**fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"r": 0}, "lora.r must be >= 1"),
        ({"dropout": 1.0}, r"lora.dropout must be in \[0, 1\)"),
        ({"target_modules": ["q_proj", "lm_head"]}, "must not include lm_head"),
        ({"target_modules": []}, "target_modules is empty"),
    ],
)
def test_lora_settings_validation(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoraSettings(**fields)


def test_a_default_adapter_draws_no_dropout_masks_and_a_set_rate_does() -> None:
    """Dropout is off by default (its masks cost 16% of the main job's SFT on CPU); a rate set
    in the settings still reaches every adapted layer."""
    from tiny_model import tiny_model, tiny_tokenizer

    from training.trainers.lora import attach_adapter

    tokenizer = tiny_tokenizer()
    for settings, kind in ((LoraSettings(), torch.nn.Identity), (LoraSettings(dropout=0.1), torch.nn.Dropout)):
        model = attach_adapter(tiny_model(tokenizer), settings, parent=None)
        layers = [m.lora_dropout["default"] for m in model.modules() if hasattr(m, "lora_dropout")]
        assert layers and all(type(layer) is kind for layer in layers), (settings, {type(x) for x in layers})


def test_every_config_field_has_help() -> None:
    for config_type in (SFTTrainingConfig, DPOTrainingConfig, KTOTrainingConfig, PPOTrainingConfig, LoraSettings):
        missing = [f.name for f in dataclasses.fields(config_type) if not f.metadata.get("help")]
        assert not missing, f"{config_type.__name__} fields without help: {missing}"


def test_configs_round_trip_through_their_dict() -> None:
    config = DPOTrainingConfig(lora=LoraSettings(target_modules=["q_proj", "v_proj"]), rpo_alpha=0.5)
    data = json.loads(json.dumps(config.to_dict()))
    assert DPOTrainingConfig(**data) == config


def test_one_table_holds_every_trainer_kind(tmp_path: Path) -> None:
    """Each row's train function takes what the training job passes, and each TRL row's
    settings make a valid config of the TRL class it names."""
    import inspect

    from training.trainers import TRLTrainingConfig, kind_names, trainer_kind
    from training.trainers.kinds import KINDS

    assert kind_names() == ["sft", "dpo", "kto", "ppo", "grpo"]
    assert kind_names(reads_snapshot=True) == ["sft", "dpo", "kto", "ppo"]
    assert kind_names(data_parallel=True) == ["sft", "dpo", "kto"]
    for kind in KINDS.values():
        parameters = inspect.signature(kind.train).parameters
        assert {"config", "role", "output_dir", "cache_dir", "parent_adapter", "progress", "on_log"} <= set(parameters)
        assert ("dataset_snapshot_id" in parameters) == kind.reads_snapshot, kind.name
        config = kind.config_type()
        if isinstance(config, TRLTrainingConfig):
            arguments = config.trl_arguments(output_dir=str(tmp_path), bf16=False, use_cpu=True)
            assert kind.config_type.trl_config_class()(**arguments).learning_rate == config.learning_rate
    with pytest.raises(ValueError, match="unknown trainer 'rlhf'; trainers: sft, dpo, kto, ppo, grpo"):
        trainer_kind("rlhf")


def test_choices_match_the_installed_trl_and_transformers() -> None:
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK
    from trl import DPOConfig, KTOConfig

    dpo_help = {f.name: f for f in dataclasses.fields(DPOConfig)}["loss_type"].metadata["help"]
    assert all(f"'{name}'" in dpo_help for name in DPO_LOSS_TYPES)
    assert list(KTO_LOSS_TYPES) == {f.name: f for f in dataclasses.fields(KTOConfig)}["loss_type"].metadata["choices"]
    assert set(REPORT_TARGETS) - {"none", "all"} == set(INTEGRATION_TO_CALLBACK)
    # rpo_alpha maps to TRL's loss combination, which DPOConfig accepts
    arguments = DPOTrainingConfig(rpo_alpha=0.5).trl_arguments(output_dir="unused", bf16=False, use_cpu=True)
    trl_config = DPOConfig(**arguments)
    assert (trl_config.loss_type, trl_config.loss_weights) == (["sigmoid", "sft"], [1.0, 0.5])
    # SFT batches rows of similar length together (less padding) unless told not to
    from trl import SFTConfig

    for grouped, sampler in ((True, "group_by_length"), (False, "random")):
        arguments = SFTTrainingConfig(group_by_length=grouped).trl_arguments(output_dir="unused", bf16=False,
                                                                            use_cpu=True)
        assert SFTConfig(**arguments).train_sampling_strategy == sampler
