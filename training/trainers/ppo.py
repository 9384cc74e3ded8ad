"""Offline clipped policy-gradient (PPO-style) update of one role's LoRA adapter on logged samples.

TRL 1.16 has no PPOTrainer, so this is a plain torch loop. For each row (the policy-gradient
builder's format) the prompt and completion token ids are teacher-forced through the policy
(base model + the adapter being trained) to get the new log-probability ``new`` of every
completion token. With ``behaviour`` the logged log-probability of that token under the
policy that generated it, ``A`` the row's advantage and ``base`` the token's log-probability
under the base model (the same model, adapter disabled):

    ratio   = exp(new - behaviour)
    pg      = -min(ratio * A, clip(ratio, 1 - clip_eps, 1 + clip_eps) * A)
    kl      = exp(base - new) - (base - new) - 1        (k3: unbiased, always >= 0)
    loss    = sum over the step's completion tokens of (pg + kl_coef * kl) / their number

that is a token mean over every completion token of the optimiser step (all its accumulated
micro-batches). With ``objective="reinforce"`` the policy term is ``pg = -A * new`` instead:
no ratio and no clip: REINFORCE with the baseline the builder subtracted. The clipped surrogate stops
pushing a token up once its ratio passes ``1 + clip_eps``, which bounds what several epochs
over one logged batch can teach; REINFORCE keeps going, and the KL term holds it near the base.
Rows whose advantage is zero are left out unless ``skip_zero_advantage`` is off (they teach
the KL term only); when every row's is, all are kept and the update is the KL term's alone
(``zero_advantage_rows`` equal to the rows says so). ``new - behaviour`` is clamped to
[-20, 20] before ``exp`` so that logged log-probabilities far from the policy's cannot
overflow. AdamW updates the LoRA parameters only, at a constant learning rate, after clipping
the gradient norm to ``max_grad_norm``.

Left out, on purpose: a value function (the builder's group-normalised advantages replace
it), several passes over one sample with early stopping on KL (run more epochs instead),
dual clipping. Dropout is off (the model stays in eval mode) so that an unchanged policy has
ratio exactly 1. Rows longer than ``max_length`` keep their start: completion tokens past it
leave the loss; a row whose prompt alone fills ``max_length`` is skipped and counted.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset
from transformers import TrainingArguments, set_seed

from graphs.policies.logits_to_keep import last_positions
from storage.models import DatasetKind
from training.adapter_folders import AdapterMetadata, discard, prepare_run, staging_dir, write_adapter
from training.trainers.data import TrainingRows, as_dataset, require_columns
from training.trainers.errors import DatasetColumnsError, TrainingDivergedError
from training.trainers.lora import attach_adapter, load_base_model
from training.trainers.ppo_config import PPOTrainingConfig
from training.trainers.progress import LogFn, ProgressFn
from training.trainers.reporting import TENSORBOARD, TrackerReport, run_folder, targets, tracker_callbacks
from training.trainers.result import TrainResult

PPO_COLUMNS = (("prompt_token_ids", "completion_token_ids", "behaviour_logprobs", "advantage"),)
"""The columns read from the policy-gradient builder's rows (the others ride along unused)."""
LOG_RATIO_LIMIT = 20.0
ZERO_ADVANTAGE = 1e-6
"""Below this an advantage counts as zero: the builder's group-normalised advantage of a group
whose samples all got the same reward is exactly 0."""


@dataclass(frozen=True)
class Sample:
    """One logged completion, cut to ``max_length``."""

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float]
    advantage: float
    reward: float | None = None
    """the turn's credit, when the row has one (only logged, never in the loss)"""


def read_samples(dataset: Dataset, max_length: int) -> tuple[list[Sample], int]:
    """The rows as samples, and how many were skipped because the prompt fills ``max_length``.

    A row with no completion token, no prompt token, non-finite numbers, or a number of
    behaviour logprobs other than its number of completion tokens raises
    ``DatasetColumnsError``.
    """
    samples: list[Sample] = []
    skipped = 0
    for index, row in enumerate(dataset):
        where = f"row {index}" + (f" (turn {row['turn_id']})" if row.get("turn_id") else "")
        prompt, completion = list(row["prompt_token_ids"] or []), list(row["completion_token_ids"] or [])
        logprobs, advantage = list(row["behaviour_logprobs"] or []), row["advantage"]
        if len(logprobs) != len(completion):
            raise DatasetColumnsError(
                f"{where} has {len(logprobs)} behaviour logprobs for {len(completion)} completion tokens; they "
                f"must match one to one. Rebuild the snapshot with the policy-gradient builder (it leaves such "
                f"turns out) or drop the row."
            )
        if not prompt or not completion:
            raise DatasetColumnsError(
                f"{where} has an empty {'prompt' if not prompt else 'completion'} token list: the update needs "
                f"at least one of each. Drop the row or rebuild the snapshot."
            )
        if advantage is None or not all(math.isfinite(x) for x in [advantage, *logprobs]):
            raise DatasetColumnsError(
                f"{where} has a missing or non-finite advantage or behaviour logprob. Drop the row or rebuild "
                f"the snapshot."
            )
        room = max_length - len(prompt)
        if room < 1:
            skipped += 1
            continue
        reward = row.get("reward")
        samples.append(Sample(prompt, completion[:room], logprobs[:room], float(advantage),
                              float(reward) if reward is not None and math.isfinite(reward) else None))
    return samples, skipped


def policy_terms(
    new: torch.Tensor, behaviour: torch.Tensor, base: torch.Tensor, advantages: torch.Tensor, clip_eps: float,
    objective: str = "clipped", clip_eps_high: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token policy loss (the clipped surrogate, the ratio in [1 - clip_eps, 1 + clip_eps_high],
    or REINFORCE's ``-A * new``), k3 KL and ratio; inputs [rows, tokens], advantages [rows]."""
    ratio = torch.exp((new - behaviour).clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT))
    a = advantages[:, None]
    if objective == "reinforce":
        pg = -a * new
    else:
        pg = -torch.minimum(ratio * a, ratio.clamp(*clip_range(clip_eps, clip_eps_high)) * a)
    base_minus_new = base - new
    kl = torch.exp(base_minus_new) - base_minus_new - 1
    return pg, kl, ratio


def clip_range(clip_eps: float, clip_eps_high: float | None) -> tuple[float, float]:
    """The ratio's clip: [1 - clip_eps, 1 + clip_eps_high], clip_eps upwards too when clip_eps_high is None."""
    return 1 - clip_eps, 1 + (clip_eps if clip_eps_high is None else clip_eps_high)


def batch_logprobs(model: torch.nn.Module, samples: Sequence[Sample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of each sample's completion tokens, teacher-forced: [rows, tokens] and a mask."""
    _, logps, mask = _completion_log_softmax(model, samples, pad_id)
    return logps, mask


def logprobs_and_entropy(
    model: torch.nn.Module, samples: Sequence[Sample], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``batch_logprobs``, and the policy's entropy at each completion position ([rows, tokens],
    no gradient)."""
    log_softmax, logps, mask = _completion_log_softmax(model, samples, pad_id)
    with torch.no_grad():
        entropy = -(log_softmax.exp() * log_softmax).sum(-1) * mask
    return logps, mask, entropy


def _completion_log_softmax(
    model: torch.nn.Module, samples: Sequence[Sample], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The log-softmax over the vocabulary at each completion position ([rows, tokens, vocab]),
    the completion tokens' log-probabilities (0 past a row's end) and their mask ([rows, tokens]).

    Sequences are padded on the right, so every position counts from 0 as in generation;
    only the logits from the shortest prompt's last token on are computed.
    """
    device = next(model.parameters()).device
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
    width, tokens = max(lengths), max(len(s.completion_ids) for s in samples)
    first = min(len(s.prompt_ids) for s in samples) - 1  # the first position whose logits are needed
    input_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    targets = torch.zeros((len(samples), tokens), dtype=torch.long)
    mask = torch.zeros((len(samples), tokens), dtype=torch.bool)
    index = torch.zeros((len(samples), tokens), dtype=torch.long)
    for row, (sample, length) in enumerate(zip(samples, lengths, strict=True)):
        n = len(sample.completion_ids)
        input_ids[row, :length] = torch.tensor(sample.prompt_ids + sample.completion_ids)
        attention[row, :length] = 1
        targets[row, :n] = torch.tensor(sample.completion_ids)
        mask[row, :n] = True
        # the logits at position p predict the token at p + 1
        index[row, :n] = torch.arange(len(sample.prompt_ids) - 1, len(sample.prompt_ids) - 1 + n) - first
    keep = last_positions(width, width - first, device)
    logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device), logits_to_keep=keep).logits
    index, targets, mask = index.to(device), targets.to(device), mask.to(device)
    picked = logits.gather(1, index[:, :, None].expand(-1, -1, logits.size(-1))).float()
    log_softmax = picked.log_softmax(-1)
    return log_softmax, log_softmax.gather(-1, targets[:, :, None]).squeeze(-1) * mask, mask


def completion_logprobs(model: torch.nn.Module, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """Log-probability of each completion token given the prompt and the tokens before it."""
    sample = Sample(list(prompt_ids), list(completion_ids), [0.0] * len(completion_ids), 0.0)
    with torch.no_grad():
        logps, _ = batch_logprobs(model, [sample], pad_id=0)  # one row: no padding
    return logps[0].tolist()


def step_plan(n_rows: int, config: PPOTrainingConfig) -> list[list[int]]:
    """Row indices of each optimiser step: shuffled passes (seeded), cut into steps of
    ``per_device_train_batch_size x gradient_accumulation_steps`` rows (the last may be short).
    ``max_steps`` (when set) fixes the number of steps, else ``num_train_epochs`` the rows."""
    per_step = config.per_device_train_batch_size * config.gradient_accumulation_steps
    total = config.max_steps * per_step if config.max_steps > 0 else math.ceil(config.num_train_epochs * n_rows)
    rng = random.Random(config.seed)
    order: list[int] = []
    while len(order) < total:
        permutation = list(range(n_rows))
        rng.shuffle(permutation)
        order.extend(permutation)
    return [order[start : start + per_step] for start in range(0, total, per_step)]


def train_ppo(
    rows: TrainingRows,
    config: PPOTrainingConfig | None = None,
    *,
    role: str,
    output_dir: Path,
    cache_dir: Path,
    parent_adapter: Path | None = None,
    dataset_snapshot_id: int | None = None,
    progress: ProgressFn | None = None,
    on_log: LogFn | None = None,
) -> TrainResult:
    """Update ``role``'s adapter on logged samples and write it to ``output_dir`` (which must not hold files).

    ``parent_adapter``: continue from this adapter folder (it is only read), normally the one
    that generated the samples; else a fresh adapter. ``progress(step, total)`` is called
    after every optimiser step, ``on_log(entry)`` with every log entry.
    """
    config = config or PPOTrainingConfig()
    dataset = as_dataset(rows, DatasetKind.PPO)
    require_columns(dataset, DatasetKind.PPO, *PPO_COLUMNS)
    samples, skipped = read_samples(dataset, config.max_length)
    if not samples:
        raise DatasetColumnsError(
            f"Every row's prompt fills max_length ({config.max_length} tokens), leaving no completion token to "
            f"train on: raise max_length."
        )
    without_advantage = sum(abs(s.advantage) < ZERO_ADVANTAGE for s in samples)
    if config.skip_zero_advantage and without_advantage < len(samples):
        samples = [s for s in samples if abs(s.advantage) >= ZERO_ADVANTAGE]
    output_dir = prepare_run(
        role=role, output_dir=output_dir, parent_adapter=parent_adapter, model=config.model, cache_dir=cache_dir
    )
    staging = staging_dir(output_dir)
    try:
        # before the model loads, so that a tracker whose package is missing fails at once
        report = _tracker_report(config, role, staging, len(step_plan(len(samples), config)))
        set_seed(config.seed)
        model, tokenizer = load_base_model(config.model, cache_dir=cache_dir, device=config.device,
                                           precision=config.precision)
        policy = attach_adapter(model, config.lora, parent_adapter)
        policy.eval()
        report.begin(policy)
        try:
            log_history, metrics = _train(
                policy, samples, config, tokenizer.pad_token_id, progress, _both(on_log, report.log)
            )
        finally:
            report.end(policy)
        metrics["skipped_rows"] = float(skipped)
        metrics["zero_advantage_rows"] = float(without_advantage)
        metadata = AdapterMetadata.new(
            role=role,
            trainer=DatasetKind.PPO,
            config=config,
            metrics=metrics,
            parent_adapter=parent_adapter,
            dataset_snapshot_id=dataset_snapshot_id,
        )
        write_adapter(policy, staging, output_dir, metadata)
    except BaseException:
        discard(staging)
        raise
    return TrainResult(adapter_dir=output_dir, metrics=metrics, log_history=log_history)


def _tracker_report(config: PPOTrainingConfig, role: str, staging: Path, max_steps: int) -> TrackerReport:
    """The trackers of ``config.report_to``, driven as a TRL trainer would drive them; as in TRL's
    runner, the output folder trackers see is the staging folder (only its files are published)."""
    names = targets(config.report_to)
    folder = run_folder(config.logging_dir, DatasetKind.PPO, role) if config.logging_dir else None
    args = TrainingArguments(
        output_dir=str(staging), report_to=[n for n in names if n != TENSORBOARD or folder is None] or "none",
        learning_rate=config.learning_rate, num_train_epochs=config.num_train_epochs, max_steps=config.max_steps,
        per_device_train_batch_size=config.per_device_train_batch_size, seed=config.seed,
        gradient_accumulation_steps=config.gradient_accumulation_steps, logging_steps=config.logging_steps,
        use_cpu=True, disable_tqdm=True,
    )  # what trackers record as the run's arguments (use_cpu: nothing here places a model)
    return TrackerReport(tracker_callbacks(names, folder), args, max_steps)


def _both(first: LogFn | None, second: LogFn) -> LogFn:
    def log(entry: dict[str, float]) -> None:
        if first is not None:
            first(entry)
        second(entry)

    return log


def _train(
    policy: torch.nn.Module,
    samples: list[Sample],
    config: PPOTrainingConfig,
    pad_id: int,
    progress: ProgressFn | None,
    on_log: LogFn | None,
) -> tuple[list[dict[str, float]], dict[str, float]]:
    params = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    plan = step_plan(len(samples), config)
    started = time.monotonic()
    if progress is not None:
        progress(0, len(plan))
    log_history: list[dict[str, float]] = []
    losses: list[float] = []
    rows_done = 0
    for step, indices in enumerate(plan, start=1):
        stats = _optimizer_step(policy, [samples[i] for i in indices], config, pad_id, params, optimizer)
        if not math.isfinite(stats["loss"]):
            raise TrainingDivergedError(
                f"The PPO loss became {stats['loss']} at step {step} (diverged); no adapter was written. Lower "
                f"learning_rate (now {config.learning_rate}) or check the behaviour logprobs and advantages."
            )
        losses.append(stats["loss"])
        rows_done += len(indices)
        entry = {**stats, "learning_rate": config.learning_rate, "epoch": rows_done / len(samples), "step": step}
        out_of_time = config.max_seconds is not None and time.monotonic() - started >= config.max_seconds
        if step % config.logging_steps == 0 or step == len(plan) or out_of_time:
            log_history.append(entry)
            if on_log is not None:
                on_log(dict(entry))
        if progress is not None:
            progress(step, len(plan))
        if out_of_time:
            break
    metrics = {key: value for key, value in log_history[-1].items() if key != "step"}
    metrics.update(train_loss=sum(losses) / len(losses), steps=float(len(losses)), runtime_s=time.monotonic() - started)
    return log_history, metrics


def _optimizer_step(
    policy: torch.nn.Module,
    rows: list[Sample],
    config: PPOTrainingConfig,
    pad_id: int,
    params: list[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
) -> dict[str, float]:
    """Accumulate the gradient of the step's token-mean loss over micro-batches, then update.

    Besides the loss terms, what tells whether the update can teach anything: the mean and
    spread of the rows' rewards, the share of rows whose advantage is zero (their group's
    samples all scored alike: no gradient but the KL's) and the policy's token entropy."""
    n_tokens = sum(len(s.completion_ids) for s in rows)
    terms = ("loss", "pg_loss", "ratio_mean", "clip_fraction", "entropy") + (("kl",) if config.kl_coef > 0 else ())
    sums = dict.fromkeys(terms, 0.0)  # without its term the KL to the base is not computed, so not logged
    size = config.per_device_train_batch_size
    for start in range(0, len(rows), size):
        micro = rows[start : start + size]
        new, mask, entropy = logprobs_and_entropy(policy, micro, pad_id)
        if config.kl_coef > 0:
            with torch.no_grad(), policy.disable_adapter():
                base, _ = batch_logprobs(policy, micro, pad_id)
        else:  # no KL term: spare the base model's forward pass
            base = new.detach()
        behaviour = _padded([s.behaviour_logprobs for s in micro], new)
        advantages = torch.tensor([s.advantage for s in micro], dtype=new.dtype, device=new.device)
        pg, kl, ratio = policy_terms(new, behaviour, base, advantages, config.clip_eps, config.objective,
                                     config.clip_eps_high)
        loss = ((pg + config.kl_coef * kl) * mask).sum() / n_tokens
        loss.backward()
        with torch.no_grad():
            sums["loss"] += loss.item()
            sums["pg_loss"] += (pg * mask).sum().item() / n_tokens
            if "kl" in sums:
                sums["kl"] += (kl * mask).sum().item() / n_tokens
            sums["ratio_mean"] += (ratio * mask).sum().item() / n_tokens
            low, high = clip_range(config.clip_eps, config.clip_eps_high)
            clipped = (ratio < low) | (ratio > high)
            sums["clip_fraction"] += (clipped & mask).sum().item() / n_tokens
            sums["entropy"] += entropy.sum().item() / n_tokens
    grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {**sums, **_reward_stats(rows), "grad_norm": float(grad_norm)}


def _reward_stats(rows: Sequence[Sample]) -> dict[str, float]:
    """The step's reward mean and population spread (rows that carry one) and its share of
    rows with zero advantage."""
    stats = {"frac_zero_advantage": sum(abs(s.advantage) < ZERO_ADVANTAGE for s in rows) / len(rows)}
    rewards = [s.reward for s in rows if s.reward is not None]
    if rewards:
        stats.update(reward=statistics.fmean(rewards), reward_std=statistics.pstdev(rewards))
    return stats


def _padded(values: list[list[float]], like: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(like)
    for row, row_values in enumerate(values):
        out[row, : len(row_values)] = torch.tensor(row_values, dtype=like.dtype)
    return out
