"""Online GRPO of one role's LoRA adapter with TRL's ``GRPOTrainer``, on rollouts of the real game.

TRL's trainer asks for completions through its (experimental) ``rollout_func``. Ours plays
episodes of the game with ``graphs.episodes.play``: the trained role's seat is served by an
``InProcessBackend`` wrapping the trainer's current model (the adapter being trained, so the
rollouts are on-policy), the other seats by ``other_policies``, and every episode is logged to
``sink`` like any other (its turns name the trained policy in ``served_by``). TRL's sampler
repeats each task's prompt ``num_generations`` times in a batch, so each task is played
``num_generations`` times per step: one episode per prompt it hands over.

What is trained is the role's FIRST turn of each episode: its prompt and completion token ids
(as the backend logged them) and its reward. By default (``reward="first_turn"``) the reward
is that turn's credit by the game's credit rule for the role (``GameSpec.credit_rule``), read
from the episode's logged rewards as the dataset builders read them (math-reflection actor:
``correct``, 1 if its first answer is right; critic: ``verdict_correct`` plus the improvement
of the actor's next answer; negotiation proposer: the deal's value share, less 1 if the move
was incoherent): only that turn's tokens get the gradient, and GRPO reinforces what the
offline builders and the gate reward. ``reward="episode"`` uses the episode's headline reward
instead (math-reflection: the final answer's correctness, after the critic and the refinements).

Notes:

- The backend generates under ``torch.inference_mode()`` in its worker thread and puts the
  model in eval mode (no LoRA dropout while sampling); the model's training mode is restored
  after each rollout, and the backend is closed (its thread stopped) before TRL goes on.
- The logged log-probabilities are under the raw logits (before temperature), while TRL's are
  under logits / temperature; TRL only uses ours for vLLM importance sampling and off-policy
  masking, both off here, and recomputes its own.
- The backend's completion ids leave out the EOS token that ended a turn; it is appended
  (log-probability NaN, not recorded) so that the model also learns where to stop.
- An episode that fails before the role's turn, or a turn without credit (a task without
  ground truth), still returns a completion (EOS alone for a failed one) with reward None:
  TRL gives it zero advantage. If every episode of a rollout fails, training stops.
- The rollouts run in a fresh event loop on a helper thread, so ``train_grpo`` may be called
  from a thread that already runs an event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from graphs.context import GameOptions
from graphs.policies.base import SamplingParams
from graphs.policies.policy import Policy
from graphs.registry import GameSpec, get_game
from graphs.seats import SeatKind
from graphs.tasks.base import Task
from storage.records import EpisodeEnd, EpisodeStart, JudgmentRecord, RecordSink, RewardRecord, TurnRecord
from training.trainers.errors import EmptyTrainingDataError, TrainerError
from training.trainers.grpo_config import GRPOTrainingConfig
from training.trainers.progress import LogFn, ProgressFn
from training.trainers.result import TrainResult
from training.trainers.trl_runner import train_with_trl

GRPO_KIND = "grpo"
REWARD_KEY = "sparring_reward"
"""The extra key of the rollout output that carries each episode's reward to the reward function."""


def training_model_name(role: str) -> str:
    """The ``model_name`` (hence ``served_by`` and the policy label) of the trained role's seat."""
    return f"{role}@grpo-training"


def train_grpo(
    tasks: Sequence[Task],
    config: GRPOTrainingConfig | None = None,
    *,
    role: str,
    game: str = "math-reflection",
    other_policies: Mapping[str, Policy],
    sink: RecordSink,
    output_dir: Path,
    cache_dir: Path,
    parent_adapter: Path | None = None,
    options: GameOptions | None = None,
    run_id: str | None = None,
    progress: ProgressFn | None = None,
    on_log: LogFn | None = None,
) -> TrainResult:
    """Train ``role``'s adapter by GRPO on episodes of ``game`` played on ``tasks``; write it to
    ``output_dir`` (which must not hold files).

    ``other_policies`` fill every other non-judge seat; the rollout episodes are logged to
    ``sink`` (with ``run_id``). ``parent_adapter``: continue from this adapter folder (only
    read). ``options``: the game's options (its defaults when None). ``progress(step, total)``
    is called after every optimiser step, ``on_log(entry)`` with every log entry.
    """
    config = config or GRPOTrainingConfig()
    spec = get_game(game)
    try:
        options = spec.make_options() if options is None else spec.check_options(options)
    except ValueError as exc:
        raise TrainerError(str(exc)) from exc
    try:
        seat = spec.seat(role)
    except KeyError as exc:
        raise TrainerError(str(exc.args[0])) from exc
    if seat.kind != SeatKind.LEARNER:
        raise TrainerError(f"seat {role!r} of {game!r} is a {seat.kind} seat, not a learner: it has no adapter.")
    if role in other_policies:
        raise TrainerError(
            f"other_policies has a policy for {role!r}, the role being trained: its seat is served by the "
            f"adapter in training. Leave it out of other_policies."
        )
    missing = [
        s.name for s in spec.seats if s.kind != SeatKind.JUDGE and s.name != role and s.name not in other_policies
    ]
    if missing:
        raise TrainerError(f"game {game!r} needs a policy in other_policies for seat(s) {', '.join(missing)}.")
    by_prompt: dict[str, Task] = {}
    rows = []
    for task in tasks:
        messages = spec.first_prompt(task)  # it only names the task: what is trained is the prompt each turn got
        key = messages[-1]["content"]
        if key in by_prompt:  # the same prompt twice: one task stands for both
            continue
        by_prompt[key] = task
        rows.append({"prompt": messages, "task_id": task.id})
    if not rows:
        raise EmptyTrainingDataError("No tasks to play: GRPO needs at least one task to generate rollouts on.")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    rollout = GameRollout(
        game=spec,
        role=role,
        tasks=by_prompt,
        other_policies=dict(other_policies),
        sink=sink,
        config=config,
        options=options,
        run_id=run_id,
    )
    trainer_cls = partial(GRPOTrainer, reward_funcs=[pass_through_reward], rollout_func=rollout)
    return train_with_trl(
        kind=GRPO_KIND,
        trainer_cls=trainer_cls,  # type: ignore[arg-type]
        args_cls=GRPOConfig,
        dataset=Dataset.from_list(rows),
        config=config,
        role=role,
        output_dir=output_dir,
        cache_dir=cache_dir,
        parent_adapter=parent_adapter,
        dataset_snapshot_id=None,
        progress=progress,
        on_log=on_log,
    )


def pass_through_reward(prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
    """TRL's reward function: the reward the rollout found in the game (None: none, zero advantage)."""
    return list(kwargs[REWARD_KEY])


pass_through_reward.__name__ = "game_reward"  # TRL logs rewards/<name>/mean


@dataclass
class _Tap:
    """Forwards every record to the caller's sink and keeps this rollout's turns and rewards."""

    sink: RecordSink
    turns: dict[str, list[TurnRecord]] = field(default_factory=dict)
    rewards: dict[str, list[RewardRecord]] = field(default_factory=dict)

    def episode_started(self, record: EpisodeStart) -> None:
        self.sink.episode_started(record)

    def turn(self, record: TurnRecord) -> None:
        self.turns.setdefault(record.episode_id, []).append(record)
        self.sink.turn(record)

    def reward(self, record: RewardRecord) -> None:
        self.rewards.setdefault(record.episode_id, []).append(record)
        self.sink.reward(record)

    def judgment(self, record: JudgmentRecord) -> None:
        self.sink.judgment(record)

    def episode_finished(self, record: EpisodeEnd) -> None:
        self.sink.episode_finished(record)


@dataclass
class GameRollout:
    """TRL's ``rollout_func``: one episode per prompt TRL hands over, the role's first turn back."""

    game: GameSpec
    role: str
    tasks: dict[str, Task]
    other_policies: dict[str, Policy]
    sink: RecordSink
    config: GRPOTrainingConfig
    options: GameOptions | None = None
    """the game's options (its defaults when None)"""
    run_id: str | None = None
    _calls: itertools.count = field(default_factory=itertools.count)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list]:
        tasks = [self.tasks[_prompt_key(prompt)] for prompt in prompts]
        model, tokenizer = trainer.model, trainer.processing_class
        seed = self.config.seed + next(self._calls) * max(len(tasks), 1) * 1_000
        was_training = model.training
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="grpo-rollout") as pool:
            try:
                tap, summaries = pool.submit(asyncio.run, self._play(model, tokenizer, tasks, seed)).result()
            finally:
                model.train(was_training)
        return self._collect(tap, summaries, tasks, tokenizer)

    async def _play(self, model: Any, tokenizer: Any, tasks: list[Task], seed: int) -> tuple[_Tap, list]:
        from graphs.episodes import play
        from graphs.policies.inprocess import InProcessBackend

        backend = InProcessBackend(model, tokenizer, model_name=training_model_name(self.role))
        try:
            sampling = SamplingParams(
                temperature=self.config.temperature,
                top_p=self.config.top_p,
                max_new_tokens=self.config.max_completion_length,
            )
            policies = {**self.other_policies, self.role: Policy(backend, sampling)}
            tap = _Tap(self.sink)
            report = await play(
                self.game,
                tasks,
                policies,
                tap,
                concurrency=self.config.concurrency,
                seed=seed,
                options=self.options,
                run_id=self.run_id,
            )
        finally:
            await backend.aclose()
        return tap, report.episodes

    def _collect(self, tap: _Tap, summaries: list, tasks: list[Task], tokenizer: Any) -> dict[str, list]:
        eos = tokenizer.eos_token_id
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], REWARD_KEY: []}
        errors = []
        for summary, task in zip(summaries, tasks, strict=True):
            own = [t for t in tap.turns.get(summary.episode_id, []) if t.seat == self.role]
            if not own:
                errors.append(summary.error or "the role never played")
                prompt = tokenizer.apply_chat_template(
                    self.game.first_prompt(task), add_generation_prompt=True, return_dict=True
                )["input_ids"]
                out["prompt_ids"].append(list(prompt))
                out["completion_ids"].append([eos])
                out["logprobs"].append([math.nan])
                out[REWARD_KEY].append(None)
                continue
            turn = own[0]
            completion, logprobs = list(turn.completion_token_ids), list(turn.logprobs or [])
            if turn.finish_reason == "stop" or not completion:  # ended by EOS (the seat has no stop strings)
                completion.append(eos)
                logprobs.append(math.nan)
            out["prompt_ids"].append(list(turn.prompt_token_ids))
            out["completion_ids"].append(completion)
            out["logprobs"].append(logprobs)
            out[REWARD_KEY].append(self._reward(summary, turn, tap.turns[summary.episode_id],
                                                tap.rewards.get(summary.episode_id, [])))
        if len(errors) == len(summaries):
            raise TrainerError(
                f"Every one of the {len(summaries)} rollout episodes failed before {self.role!r} played, e.g. "
                f"{errors[0]}. Check the other policies' backends."
            )
        return out

    def _reward(self, summary: Any, turn: TurnRecord, turns: list[TurnRecord],
                rewards: list[RewardRecord]) -> float | None:
        if self.config.reward == "episode":
            return summary.reward
        return turn_credit(self.game, self.role, turn.id, turns, rewards)


@dataclass(frozen=True)
class _CreditTurn:
    """A rollout turn as credit rules see a logged one (``graphs.credit.CreditTurn``)."""

    turn_id: str
    idx: int
    seat: str
    selected: bool
    rewards: dict[str, float]


def turn_credit(game: GameSpec, role: str, turn_id: str, turns: Sequence[TurnRecord],
                rewards: Sequence[RewardRecord]) -> float | None:
    """The credit of ``role``'s turn ``turn_id`` by the game's credit rule, from one episode's
    turns and reward events (of several events with one name on a turn, the latest, as the
    builders read them); None: the rule gives the turn none."""
    by_turn: dict[str, dict[str, float]] = {}
    for reward in rewards:
        if reward.turn_id is not None:
            by_turn.setdefault(reward.turn_id, {})[reward.name] = reward.value
    seen = [_CreditTurn(t.id, t.index, t.seat, t.seat == role, by_turn.get(t.id, {}))
            for t in sorted(turns, key=lambda t: t.index)]
    return game.credit_rule(role).credits(seen, role).get(turn_id)


def _prompt_key(prompt: Any) -> str:
    """The text that names a task: the last message's content (or the prompt, if plain text)."""
    if isinstance(prompt, str):
        return prompt
    return prompt[-1]["content"]

