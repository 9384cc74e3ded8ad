"""The retrain loop: play, build datasets since the last watermark, train, gate, deploy, repeat.

Each round plays new training episodes with the active adapters, then for each learner role
builds a snapshot of what is new, trains a candidate from the active version, and gates it on
held-out tasks (the same tasks and seeds every round). A role whose step fails (no new rows,
a crashed trainer, a rejected candidate) is recorded in the round's outcome and the loop goes
on with the active adapters. Every round is a `runs` row whose summary says what happened.
Training jobs run in a child process (``training.isolated``): a trainer that dies, even by
the OOM killer, fails its role's step and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine

from evaluation.evaluator import EvaluationResult, Evaluator, PhaseProgress
from graphs.context import GameOptions
from graphs.episodes import play
from graphs.policies.base import Backend
from graphs.registry import GameSpec
from graphs.tasks.base import Task
from storage.dataset_rows import played_task_ids
from storage.recorder import Recorder
from storage.records import RunRecord
from training.datasets import DatasetError, LogFilter, SFTOptions, build_snapshot, load_snapshot
from training.deploy import GateResult, LivePolicies, gate_and_deploy
from training.jobs import JobResult, run_training_job
from training.registry import AdapterRecord, active_version
from training.trainers.kinds import kind_names, trainer_kind

JudgeRows = Literal["own", "truth"]
JUDGE_ROWS: tuple[JudgeRows, ...] = ("own", "truth")


@dataclass(frozen=True)
class RetrainConfig:
    """What one retrain loop does each round. Each field is a key of `retrain --config` and a CLI
    option of the same name, but ``train_options``: the file's `train` mapping, and `--learning-rate`,
    `--epochs`, `--max-steps`, `--max-seconds`."""

    roles: tuple[str, ...] = ("actor", "critic")
    """Learner roles trained each round, one adapter each."""
    trainer: str = "sft"
    """sft (rejection sampling), dpo, kto or ppo."""
    every_episodes: int = 64
    """New training episodes played per round."""
    every_minutes: float | None = None
    """Also end a round's play after this many minutes (whichever comes first)."""
    samples: int = 4
    """Episodes per task: siblings that share a state, for best-of-group rows and pairs."""
    tasks: str = "arithmetic"
    practice: int = 0
    """Solo practice episodes of the game's practising seat per round (0: none), played before the
    full episodes: its other learner seats are scripted stand-ins, so each costs one model answer."""
    practice_samples: int = 1
    """Practice attempts per task: more distinct tasks yield more distinct right answers to learn from."""
    practice_tasks: str | None = None
    """Task source of practice (default: ``tasks``), e.g. the easier levels a weak model sometimes solves."""
    margin: float = 0.0
    """How much worse than the active version a candidate may be and still be promoted."""
    min_rows: int = 16
    """A role with fewer new rows is not trained this round (its rows wait for the next): a
    candidate from a handful of rows cannot move a 200-task gate, and its gate costs a whole
    evaluation."""
    concurrency: int = 16
    judge_rows: JudgeRows = "own"
    """sft rows of the game's judge-like seat (``GameSpec.truth_verdicts``, math-reflection's critic):
    own, its own right verdicts, balanced across labels; truth, reviews of the answering seat's
    answers checked against the ground truth (practice included), with the verdict the truth calls
    for, balanced at each difficulty (``training.datasets.truth_verdicts``). `sparring retrain`
    chooses by ``default_judge_rows`` when neither its options nor its config file name them."""
    judge_max_rows: int = 140
    """judge_rows truth: the most rows a round trains the judge seat on (a seeded, balanced choice;
    the rest of the round's answers are not read again). On 70, math-reflection's critic learnt
    the verdict line's format but not when to say which, in some runs (docs/training.md)."""
    refinements: bool = False
    """sft rows of the game's refining seat (``GameSpec.refinements``, math-reflection's actor) also
    teach its refinement turn: a fix and a keep for each task its first answers got both right and
    wrong this round (``training.datasets.sft``), which takes several samples a task
    (``practice_samples`` 2)."""
    first_repairs: bool = False
    """sft rows of the game's refining seat also answer the first prompt of each wrong first answer the
    game's correction makes right (``SFTOptions.first_repairs``), where that prompt had no right answer.
    `sparring retrain` turns it on for a game that declares corrections."""
    answer_lines: bool = False
    """sft rows of the game's refining seat end each right answer with the final line its prompt asks for
    (``SFTOptions.answer_lines``). `sparring retrain` turns it on for a game that declares one."""
    train_options: dict[str, Any] = field(default_factory=dict)
    """Overrides of the trainer config (learning_rate, num_train_epochs, max_steps...)."""

    def __post_init__(self) -> None:
        if self.trainer not in kind_names(reads_snapshot=True):
            raise ValueError(f"trainer {self.trainer!r} is not one of {', '.join(kind_names(reads_snapshot=True))}")
        if not self.roles:  # whether the game can train and gate each role: GameSpec.gate_metric
            raise ValueError("roles: name at least one learner role of the game")
        if self.every_episodes < self.samples:
            raise ValueError(f"every_episodes ({self.every_episodes}) must be at least samples ({self.samples})")
        if self.every_minutes is not None and self.every_minutes <= 0:
            raise ValueError("every_minutes must be positive (or left unset)")
        if self.min_rows < 1:
            raise ValueError(f"min_rows ({self.min_rows}) must be at least 1")
        if self.practice < 0 or self.practice_samples < 1:
            raise ValueError(f"practice ({self.practice}) must be >= 0 and practice_samples "
                             f"({self.practice_samples}) >= 1")
        if self.judge_rows not in JUDGE_ROWS:
            raise ValueError(f"judge_rows must be one of {', '.join(JUDGE_ROWS)}; got {self.judge_rows!r}")
        if self.judge_rows == "truth" and self.trainer != "sft":
            raise ValueError(f"judge_rows 'truth' makes sft rows, but the trainer is {self.trainer}: use trainer "
                             "sft, or judge_rows 'own'")
        for name in ("refinements", "first_repairs", "answer_lines"):
            if getattr(self, name) and self.trainer != "sft":
                raise ValueError(f"{name} make sft rows, but the trainer is {self.trainer}: use trainer sft, or "
                                 f"leave {name} off")
        if self.judge_max_rows < 2:
            raise ValueError(f"judge_max_rows ({self.judge_max_rows}) must be at least 2 (a correct and an "
                             "incorrect answer)")


@dataclass
class RoleOutcome:
    role: str
    status: str
    """promoted, rejected, skipped (no new rows) or failed"""
    detail: str = ""
    snapshot_id: int | None = None
    rows: int = 0
    candidate: str | None = None
    gate: dict[str, Any] = field(default_factory=dict)


@dataclass
class RoundOutcome:
    round: int
    episodes: int
    roles: list[RoleOutcome]
    seconds: float


@dataclass(frozen=True)
class RoundsOutcome:
    """What ``retrain_rounds`` did: each round's outcome, and its report's figures."""

    rounds: list[RoundOutcome]
    figures: dict[str, dict[str, EvaluationResult]]
    """stage ("before", "round 1"...) -> report set name -> its evaluation; empty without a report"""


Draws = Callable[[LivePolicies, int, int], Awaitable[Any]]
"""What a round's training episodes play, from the live policies, the round and its first
episode's seed (``app.seat_pools.resolve.RoundDraws``, for pool and schedule seats)."""
Elsewhere = Callable[..., Awaitable[int]]
"""Plays a round's episodes on other machines (``app.ray_rounds.RayRounds.play``): called with
the policies, the tasks (episode i: task i, seed SEED+i) and the keywords ``seed``, ``options``,
``run_id`` (the round's run, their runs' parent) and ``advance`` (the episodes done so far);
returns the episodes played."""
RunJob = Callable[..., JobResult]
"""Runs a training job with ``training.jobs.run_training_job``'s arguments (``app.ray_rounds``:
on a node of a Ray cluster)."""


@dataclass(frozen=True)
class Rounds:
    """What every round of one retrain plays, trains and gates with."""

    engine: Engine
    game: GameSpec
    backend: Backend
    """where candidates are loaded for their gates"""
    live: LivePolicies
    gates: Sequence[Evaluator]
    """the deciding task set's evaluator, then the guards' (sets where no family may get worse)"""
    config: RetrainConfig
    base_model: str
    device: str
    store_dir: Path
    cache_dir: Path
    seed: int
    options: GameOptions
    say: Callable[[str], None] = lambda message: None
    progress: PhaseProgress = lambda phase, done, total: None
    draws: Draws | None = None
    """for pool and schedule seats: what the training episodes play; practice and evaluations play
    ``live`` alone"""
    elsewhere: Elsewhere | None = None
    """plays the practice and training episodes instead of this process (a Ray cluster)"""
    run_job: RunJob = run_training_job
    """trains each role's candidate"""
    train_processes: int = 1
    """data-parallel processes of each training job (``SPARRING_TRAIN_PROCESSES``)"""


async def retrain_rounds(setup: Rounds, *, rounds: int, report: Sequence[Evaluator] = ()) -> RoundsOutcome:
    """``rounds`` rounds of ``retrain_round``, one after the other. With ``report`` evaluators,
    each of their sets is measured with the live policies before the first round and after each
    (an evaluator shared with the gates measures the same policies once)."""

    async def measured(label: str) -> dict[str, EvaluationResult]:
        return {e.name: await e(setup.live(), label=f"{label}: {e.name}") for e in report}

    figures = {"before": await measured("before")} if report else {}
    outcomes = []
    for index in range(1, rounds + 1):
        outcomes.append(await retrain_round(setup, index))
        if report:
            figures[f"round {index}"] = await measured(f"after round {index}")
    return RoundsOutcome(outcomes, figures)


async def retrain_round(setup: Rounds, round_index: int) -> RoundOutcome:
    """One round: practice, training episodes, then each role trained and gated."""
    engine, game, config, live = setup.engine, setup.game, setup.config, setup.live
    evaluate, *guards = setup.gates
    started = time.perf_counter()
    run = RunRecord.new(game.name, {"purpose": f"retrain round {round_index}", "config": asdict(config)}, setup.seed)
    run_id = run.id
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        try:
            practised = await _practise(setup, recorder, run_id=run_id, round_index=round_index)
            playing = live if setup.draws is None else await setup.draws(live, round_index,
                                                                          setup.seed + 1000 * round_index)
            episodes = len(practised) + await _play_training_episodes(
                setup, playing, recorder, run_id=run_id, round_index=round_index, exclude={t.id for t in practised})
            recorder.flush()  # the dataset builds below read these episodes from the store
            outcomes = []
            sets = " and ".join(f"{len(e.tasks)} {e.name} tasks" for e in setup.gates)
            for role in config.roles:  # a role's failure is its outcome; only an interrupt gets out
                outcome = await train_and_gate(
                    engine, game.name, config, role,
                    lambda adapter: gate_and_deploy(engine, adapter, setup.backend, live, evaluate,
                                                    margin=config.margin, guards=guards),
                    rows=lambda role=role: sft_options(config, game, role), gated_on=sets,
                    base_model=setup.base_model, device=setup.device, store_dir=setup.store_dir,
                    cache_dir=setup.cache_dir, seed=setup.seed, say=setup.say, run_job=setup.run_job,
                    processes=setup.train_processes,
                    progress=lambda step, total, role=role: setup.progress(f"round {round_index}: train {role}",
                                                                           step, total))
                outcomes.append(outcome)
        except BaseException:
            recorder.abort_running(run_id, f"retrain round {round_index} was interrupted")
            recorder.finish_run(run_id, "interrupted", {"round": round_index})
            raise
        result = RoundOutcome(round_index, episodes, outcomes, time.perf_counter() - started)
        recorder.finish_run(run_id, "finished", {"round": round_index, "episodes": episodes,
                                                 "roles": [asdict(o) for o in outcomes]})
    return result


async def _practise(setup: Rounds, recorder: Recorder, *, run_id: str, round_index: int) -> list[Task]:
    """Solo practice of the game's practising seat (``GameSpec.practice``): ``config.practice``
    episodes over fresh tasks of ``practice_tasks``, ``practice_samples`` each, with the other
    seats played by scripted stand-ins and the game's practice options. Returns the tasks played
    (one entry per episode)."""
    game, config = setup.game, setup.config
    practice = game.practice
    if not config.practice or practice is None:
        return []
    from graphs.policies.policy import Policy
    from graphs.registry import scripted_bot

    policies = setup.live()
    for seat, bot in practice.stand_ins.items():
        policies[seat] = Policy(scripted_bot(bot), policies[seat].sampling)
    solo = game.make_options({**asdict(setup.options), **practice.options})
    tasks = _fresh_tasks(setup.engine, game, config.practice_tasks or config.tasks,
                         -(-config.practice // config.practice_samples), setup.seed)
    pending = [t for t in tasks for _ in range(config.practice_samples)][: config.practice]
    phase = f"round {round_index}: practise {practice.seat}"
    seed = setup.seed + 1000 * round_index + 500
    setup.progress(phase, 0, len(pending))
    if setup.elsewhere is not None:
        played = await setup.elsewhere(policies, pending, seed=seed, options=solo, run_id=run_id,
                                       advance=lambda done: setup.progress(phase, done, len(pending)))
        return pending[:played]
    finished = 0

    def advance(_episode: object) -> None:
        nonlocal finished
        finished += 1
        setup.progress(phase, finished, len(pending))

    report = await play(game, pending, lambda: dict(policies), recorder, concurrency=config.concurrency,
                        seed=seed, options=solo, run_id=run_id, on_episode=advance)
    return pending[: len(report.episodes)]


async def _play_training_episodes(setup: Rounds, live: Any, recorder: Recorder, *, run_id: str, round_index: int,
                                  exclude: set[str] = frozenset()) -> int:
    """Play the round's training episodes, ``concurrency`` at a time, until enough are played
    or time is up (a new episode starts as soon as a slot frees; past ``every_minutes`` none
    starts, once the first ``concurrency`` have)."""
    config = setup.config
    phase = f"round {round_index}: play"
    distinct = _fresh_tasks(setup.engine, setup.game, config.tasks, max(1, config.every_episodes // config.samples),
                            setup.seed, exclude)
    pending = [t for t in distinct for _ in range(config.samples)][: config.every_episodes]
    seed = setup.seed + 1000 * round_index
    setup.progress(phase, 0, len(pending))
    if setup.elsewhere is not None:
        return await setup.elsewhere(live(), pending, seed=seed, options=setup.options, run_id=run_id,
                                     advance=lambda done: setup.progress(phase, done, len(pending)))
    deadline = None if config.every_minutes is None else time.monotonic() + 60 * config.every_minutes
    started, finished = 0, 0

    def keep_going() -> bool:
        nonlocal started
        if deadline is not None and started >= config.concurrency and time.monotonic() >= deadline:
            return False
        started += 1
        return True

    def advance(_episode: object) -> None:
        nonlocal finished
        finished += 1
        setup.progress(phase, finished, len(pending))

    report = await play(setup.game, pending, live, recorder, concurrency=config.concurrency, seed=seed,
                        options=setup.options, run_id=run_id, on_episode=advance, keep_going=keep_going)
    return len(report.episodes)


def _fresh_tasks(engine: Engine, game: GameSpec, source: str, wanted: int, seed: int,
                 exclude: set[str] = frozenset()) -> list[Task]:
    """``wanted`` training tasks of ``source`` that no earlier round played (read from the store,
    so cron runs differ too) and not in ``exclude``; when the source is used up, tasks repeat."""
    played = played_task_ids(engine, game.name, "train") | set(exclude)
    candidates = game.tasks.load(source, n=len(played) + wanted, seed=seed, split="train")
    fresh = [t for t in candidates if t.id not in played]
    return (fresh or candidates)[:wanted]


def default_judge_rows(game: GameSpec, trainer: str) -> JudgeRows:
    """The judge seat's rows when neither the command line nor a config file names them: truth
    for sft on a game that declares truth verdicts (a round's own right verdicts are usually too
    few to train it at all); the choice and its cost are measured in docs/results/."""
    if trainer == "sft" and game.truth_verdicts is not None:
        return "truth"
    return "own"


def sft_options(config: RetrainConfig, game: GameSpec, role: str) -> SFTOptions | None:
    """How a round builds ``role``'s rows (None: the builder's defaults): truth verdicts for the
    game's judge seat when ``judge_rows`` asks for them, refinement rows too for its refining seat
    when ``refinements`` does, balanced own verdicts for its balanced seats."""
    if config.trainer != "sft":
        return None
    truth = game.truth_verdicts
    if config.judge_rows == "truth":
        if truth is None:
            raise ValueError(f"game {game.name!r} declares no truth verdicts (GameSpec.truth_verdicts): no seat of "
                             "it learns its verdicts from the ground truth; use judge_rows 'own' (--judge-rows own)")
        if role == truth.judge_seat:
            return SFTOptions(verdicts="truth", max_rows=config.judge_max_rows)
    balance = role in game.balanced_seats
    if config.refinements or config.first_repairs or config.answer_lines:
        if game.refinements is None:
            raise ValueError(f"game {game.name!r} declares no refinements (GameSpec.refinements): no seat of it "
                             "learns from its checked first answers; leave refinements, first_repairs and "
                             "answer_lines off")
        if config.answer_lines and game.refinements.answer_line is None:
            raise ValueError(f"game {game.name!r} declares no answer line (Refinements.answer_line); leave "
                             "answer_lines off")
        if role == game.refinements.seat:
            return SFTOptions(balance=balance, refinements=config.refinements, first_repairs=config.first_repairs,
                              answer_lines=config.answer_lines)
    return SFTOptions(balance=True) if balance else None


async def train_and_gate(
    engine: Engine, game: str, config: RetrainConfig, role: str, gate: Callable[[AdapterRecord], Awaitable[GateResult]],
    *, rows: Callable[[], SFTOptions | None] = lambda: None, gated_on: str, base_model: str, device: str,
    store_dir: Path, cache_dir: Path, seed: int, say: Callable[[str], None], progress: Callable[[int, int], None],
    run_job: RunJob = run_training_job, processes: int = 1,
) -> RoleOutcome:
    """Build ``role``'s rows of ``game`` since the watermark (``rows``: how), train a candidate from
    the active version with ``run_job`` (in ``processes`` data-parallel ones), and ``gate`` it
    (``gated_on``: what the gate plays, for the message); any failure is the outcome's."""
    outcome = RoleOutcome(role, "failed")
    try:
        options = rows()
        snapshot = build_snapshot(engine, config.trainer, role, game=game, base_model=base_model,
                                  out_dir=store_dir / "datasets", since="latest", log_filter=LogFilter(split="train"),
                                  options=options, seed=seed, for_training=True)
        outcome.snapshot_id, outcome.rows = snapshot.id, snapshot.row_count
        if snapshot.row_count < config.min_rows:
            outcome.status = "skipped"
            outcome.detail = (f"{snapshot.row_count} new rows, fewer than min_rows {config.min_rows}: not trained; "
                              "they are kept for the next round")
            say(f"{role}: {outcome.status} {outcome.detail}")
            return outcome
        rows = load_snapshot(engine, snapshot.id, role=role, base_model=base_model, kind=config.trainer)
        config_type = trainer_kind(config.trainer).config_type
        train_config = config_type(model=base_model, device=device, seed=seed, **config.train_options)
        say(f"training {role} ({config.trainer}) on {snapshot.row_count} rows")
        job = run_job(engine, kind=config.trainer, role=role, rows=rows, config=train_config,
                      adapters_root=store_dir / "adapters", cache_dir=cache_dir, parent=active_version(engine, role),
                      dataset_snapshot_id=snapshot.id, progress=progress, isolated=True, processes=processes)
        outcome.candidate = job.adapter.name
        say(f"gating {job.adapter.name} on {gated_on}")
        result = await gate(job.adapter)
        outcome.gate = result.figures()
        outcome.status = "promoted" if result.promoted else "rejected"
        outcome.detail = result.reason
    except DatasetError as exc:
        outcome.status, outcome.detail = "skipped", str(exc)
    except Exception as exc:  # a failed role is recorded; the loop goes on with the active adapters
        outcome.detail = f"{type(exc).__name__}: {exc}"
    gated = outcome.status in ("promoted", "rejected")  # the gate's reason starts with its decision
    say(f"{role}: {outcome.detail}" if gated else f"{role}: {outcome.status} {outcome.detail}")
    return outcome
