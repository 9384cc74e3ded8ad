"""The `sparring` command line: play games, query what was logged, export it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import uuid
from datetime import datetime
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from app.output import Format, emit
from app.settings import Settings, SettingsError, load_settings
from app.wiring import SEAT_SPEC_HELP, PolicyFactory, SeatSpecError, parse_seat_specs

app = typer.Typer(
    help="sparring: train language-model agents by letting them play games and debates.\n\n"
    "Every turn is logged to SQL (SPARRING_DATABASE_URL, default sqlite:///sparring.db).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
episodes_app = typer.Typer(help="Query logged episodes.", no_args_is_help=True)
app.add_typer(episodes_app, name="episodes")
datasets_app = typer.Typer(help="Build training datasets from the logs.", no_args_is_help=True)
app.add_typer(datasets_app, name="datasets")
adapters_app = typer.Typer(help="The adapter registry: versions, lineage, promote and rollback.", no_args_is_help=True)
app.add_typer(adapters_app, name="adapters")

err = Console(stderr=True)
out = Console()

DbOption = Annotated[
    str | None, typer.Option("--db", help="Database URL; overrides SPARRING_DATABASE_URL.", show_default=False)
]
FormatOption = Annotated[Format, typer.Option("--format", "-f", help="Output format.")]


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def settings_or_exit(**overrides: object) -> Settings:
    try:
        return load_settings(**overrides)
    except SettingsError as exc:
        fail(str(exc))


def store_or_exit(settings: Settings):
    from storage.engine import DatabaseError, open_store

    try:
        return open_store(settings.database_url)
    except DatabaseError as exc:
        fail(str(exc))


@app.command()
def games(fmt: FormatOption = Format.table) -> None:
    """List the games and their seats.

    Example: `sparring games`
    """
    from graphs.games import game_registry

    rows = [
        {"game": g.name, "seats": ", ".join(f"{s.name} ({s.kind})" for s in g.seats), "description": g.description}
        for g in game_registry().values()
    ]
    emit(rows, fmt, title="games")


@app.command()
def play(
    game: Annotated[str, typer.Argument(help="Game to play; `sparring games` lists them.")],
    episodes: Annotated[int, typer.Option("--episodes", "-n", min=1, help="Number of tasks to play.")] = 16,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Episodes played at once.")] = 16,
    turns: Annotated[int, typer.Option(min=1, help="math-reflection: most actor answers (1 + refinements).")] = 3,
    rounds: Annotated[int, typer.Option(min=1, help="debate: rounds in which both debaters speak.")] = 2,
    stop_on_correct: Annotated[
        bool, typer.Option(help="math-reflection: stop when the critic says the answer is correct.")
    ] = True,
    tasks: Annotated[
        str, typer.Option(help="Task source: 'arithmetic', 'arithmetic:1-3', a GSM8K/MATH .jsonl file, or 'hf:ID'.")
    ] = "arithmetic",
    split: Annotated[
        str, typer.Option(help="train or heldout: the generator's split, or the label of a task file's tasks.")
    ] = "train",
    samples: Annotated[int, typer.Option(min=1, help="Episodes per task (several samples of one task).")] = 1,
    seat: Annotated[list[str] | None, typer.Option("--seat", "-s", help=SEAT_SPEC_HELP)] = None,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature (0 = greedy).")] = 0.7,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus sampling mass.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Most tokens a model turn may generate.")] = 160,
    timeout: Annotated[float | None, typer.Option(help="Seconds before an episode is marked timeout.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for task choice and sampling (default: settings).")] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Play GAME on N tasks, logging every turn, reward and judgment.

    Examples:

    * `sparring play math-reflection --episodes 32 --concurrency 16 --turns 3`
    * `sparring play debate -n 8 --rounds 2 --seat debater_b=scripted:stubborn`
    * `sparring play math-reflection --tasks ../shared/data/gsm8k_test.jsonl -n 100 --temperature 0`
    """
    from graphs.context import GameOptions
    from graphs.games import UnknownGameError, get_game
    from graphs.policies.base import SamplingParams
    from graphs.tasks import load_tasks
    from graphs.tasks.base import TaskSourceError

    settings = settings_or_exit(database_url=db, seed=seed)
    try:
        spec = get_game(game)
        seat_specs = parse_seat_specs(spec, seat or [])
        options = GameOptions(turns=turns, rounds=rounds, stop_on_correct=stop_on_correct)
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
        task_list = load_tasks(tasks, n=episodes, seed=settings.seed, split=split)
    except (UnknownGameError, SeatSpecError, TaskSourceError, ValueError) as exc:
        fail(str(exc))
    if not task_list:
        fail(f"task source {tasks!r} gave no tasks")
    task_list = [t for t in task_list for _ in range(samples)]

    from graphs.runner import play as play_games
    from storage.recorder import Recorder, mark_orphans
    from storage.records import EpisodeStatus, RunRecord

    engine = store_or_exit(settings)
    orphans = mark_orphans(engine)
    if orphans:
        err.print(f"marked {orphans} episode(s) of ended processes as failed (interrupted)")
    run = RunRecord(
        id=uuid.uuid4().hex,
        game=spec.name,
        config={
            "episodes": episodes, "samples": samples, "concurrency": concurrency, "tasks": tasks, "split": split,
            "seats": seat_specs, "options": vars(options), "sampling": vars(sampling), "model": settings.model,
        },
        seed=settings.seed,
        host=socket.gethostname(),
        pid=os.getpid(),
    )
    factory = PolicyFactory(settings, sampling, engine)
    with Recorder(engine) as recorder:
        recorder.start_run(run)
        progress = Progress(
            TextColumn(f"[bold]{spec.name}[/]"), BarColumn(), MofNCompleteColumn(),
            TextColumn("ok {task.fields[ok]} failed {task.fields[bad]}"), TimeElapsedColumn(), TimeRemainingColumn(),
            console=err, transient=fmt != Format.table,
        )

        async def main():
            try:
                with err.status("loading models…"):
                    policies = await factory.policies(seat_specs)
                with progress:
                    bar = progress.add_task("play", total=len(task_list), ok=0, bad=0)
                    counts = {"ok": 0, "bad": 0}

                    def tick(summary) -> None:
                        counts["ok" if summary.status == EpisodeStatus.SUCCEEDED else "bad"] += 1
                        progress.update(bar, advance=1, **counts)

                    return await play_games(
                        spec, task_list, policies, recorder, concurrency=concurrency, seed=settings.seed,
                        options=options, run_id=run.id, timeout_s=timeout, on_episode=tick,
                    )
            finally:
                await factory.aclose()

        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        try:
            report = asyncio.run(main())
        except KeyboardInterrupt:
            recorder.abort_running(run.id, "interrupted by the user (Ctrl-C or SIGTERM)")
            recorder.finish_run(run.id, "interrupted", {})
            err.print("interrupted: finished episodes are kept, running ones are marked failed")
            raise typer.Exit(130) from None
        except Exception as exc:
            recorder.abort_running(run.id, f"the run stopped: {exc}")
            recorder.finish_run(run.id, "failed", {"error": str(exc)})
            fail(str(exc), code=1)
        finally:
            signal.signal(signal.SIGTERM, previous)
        recorder.flush()
        from evaluation.metrics import run_metrics

        metrics = run_metrics(engine, run.id)
        summary = {
            "run_id": run.id,
            "game": spec.name,
            "episodes": len(report.episodes),
            "succeeded": report.count(EpisodeStatus.SUCCEEDED),
            "failed": report.count(EpisodeStatus.FAILED),
            "timeout": report.count(EpisodeStatus.TIMEOUT),
            **metrics,
            "generated_tokens": report.completion_tokens,
            "tokens_per_s": round(report.tokens_per_s, 1),
            "wall_s": round(report.wall_s, 1),
        }
        recorder.finish_run(run.id, "finished", summary)
    _print_summary(summary, fmt)
    failures = [e for e in report.episodes if e.status != EpisodeStatus.SUCCEEDED]
    if failures and fmt == Format.table:
        first = failures[0]
        err.print(f"[yellow]{len(failures)} episode(s) did not succeed[/]; first: {first.episode_id[:12]} "
                  f"at {first.error_stage}: {first.error}  (see `sparring episodes list --status failed`)")


def _raise_interrupt(signum, frame) -> NoReturn:
    raise KeyboardInterrupt


def _print_summary(summary: dict, fmt: Format) -> None:
    if fmt == Format.table:
        rows = [{"metric": k, "value": v} for k, v in summary.items()]
        emit(rows, fmt, title="play summary", console=out)
    else:
        emit([summary], fmt)


def _parse_since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        fail(f"--since {value!r}: expected an ISO date or time, e.g. 2026-11-21 or 2026-11-21T14:00")


@episodes_app.command("list")
def episodes_list(
    game: Annotated[str | None, typer.Option(help="Only this game.")] = None,
    status: Annotated[str | None, typer.Option(help="running, succeeded, failed or timeout.")] = None,
    seat: Annotated[str | None, typer.Option(help="Only episodes with a turn from this seat.")] = None,
    policy: Annotated[str | None, typer.Option(help="Only episodes where a turn's policy/adapter contains this.")] = None,
    run: Annotated[str | None, typer.Option(help="Only this run id.")] = None,
    min_reward: Annotated[float | None, typer.Option(help="Reward at least this.")] = None,
    max_reward: Annotated[float | None, typer.Option(help="Reward at most this.")] = None,
    since: Annotated[str | None, typer.Option(help="Started at or after this ISO time.")] = None,
    sort: Annotated[str, typer.Option(help="Sort key, '-' for descending: started_at, reward, num_turns…")] = "-started_at",
    limit: Annotated[int, typer.Option(min=1, help="Rows per page.")] = 20,
    page: Annotated[int, typer.Option(min=1, help="Page number.")] = 1,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """List logged episodes with filters, sorting and paging.

    Examples:

    * `sparring episodes list --game math-reflection --status failed`
    * `sparring episodes list --min-reward 1 --sort -finished_at --limit 50 --page 2`
    * `sparring episodes list --seat critic --format jsonl > episodes.jsonl`
    """
    from storage.queries import EpisodeFilter, list_episodes

    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    flt = EpisodeFilter(
        game=game, status=status, seat=seat, policy=policy, run_id=run,
        min_reward=min_reward, max_reward=max_reward, since=_parse_since(since),
    )
    try:
        result = list_episodes(engine, flt, sort=sort, limit=limit, offset=(page - 1) * limit)
    except ValueError as exc:
        fail(str(exc))
    pages = max(1, -(-result.total // limit))
    rows = [{**row, "id": row["id"][:12] if fmt == Format.table else row["id"]} for row in result.items]
    emit(
        rows, fmt,
        columns=["id", "game", "task_id", "status", "reward", "num_turns", "started_at", "error_stage"],
        title="episodes", caption=f"page {page}/{pages} · {result.total} matching",
    )


@episodes_app.command("show")
def episodes_show(
    episode_id: Annotated[str, typer.Argument(help="Episode id or a unique prefix of it.")],
    tokens: Annotated[bool, typer.Option(help="Also print token ids and logprobs.")] = False,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Show one episode turn by turn, with seats, rewards and judgments.

    Examples:

    * `sparring episodes show 3f2a9c`
    * `sparring episodes show 3f2a9c --format json | jq .turns[0]`
    """
    from storage.queries import get_episode

    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    try:
        episode = get_episode(engine, episode_id)
    except KeyError as exc:
        fail(exc.args[0])
    if fmt != Format.table:
        emit([episode], fmt)
        return
    _render_episode(episode, tokens)


def _render_episode(episode: dict, tokens: bool) -> None:
    from rich.panel import Panel

    task = episode.get("task") or {}
    out.print(Panel(
        f"[bold]{task.get('question', '')}[/]\n\nground truth: {task.get('answer')}",
        title=f"episode {episode['id']} · {episode['game']} · {episode['status']} · reward {episode.get('reward')}",
    ))
    if episode.get("error"):
        out.print(f"[red]error at {episode.get('error_stage')}: {episode['error']}[/]")
    rewards_by_turn: dict[str | None, list[str]] = {}
    for r in episode.get("rewards", []):
        rewards_by_turn.setdefault(r.get("turn_id"), []).append(f"{r['name']}={r['value']:g}")
    for turn in episode.get("turns", []):
        header = (
            f"#{turn['idx']} round {turn['round']} · {turn['seat']} ({turn['seat_kind']}) · {turn['served_by']}"
            f" · {turn['completion_tokens']} tokens · {turn['latency_ms']:.0f} ms"
        )
        extra = rewards_by_turn.get(turn["id"], [])
        if turn.get("parsed") is False:
            extra.append("unparsed")
        body = turn["response"]
        if tokens:
            body += f"\n\n[dim]token ids {turn['completion_token_ids']}\nlogprobs {turn['logprobs']}[/]"
        out.print(Panel(body, title=header, subtitle=" ".join(extra) or None, title_align="left"))
    for j in episode.get("judgments", []):
        out.print(Panel(j["rationale"], title=f"judgment by {j['judge_seat']}: winner {j['winner_seat'] or 'tie'}"))
    episode_rewards = rewards_by_turn.get(None)
    if episode_rewards:
        out.print("episode rewards: " + " ".join(episode_rewards))


@app.command()
def export(
    path: Annotated[Path, typer.Argument(help="Output file (.jsonl or .parquet).")],
    level: Annotated[str, typer.Option(help="'episodes' (nested turns) or 'turns' (one flat row per turn).")] = "turns",
    game: Annotated[str | None, typer.Option(help="Only this game.")] = None,
    status: Annotated[str | None, typer.Option(help="Only this status.")] = None,
    seat: Annotated[str | None, typer.Option(help="Only episodes with a turn from this seat.")] = None,
    run: Annotated[str | None, typer.Option(help="Only this run id.")] = None,
    since: Annotated[str | None, typer.Option(help="Started at or after this ISO time.")] = None,
    db: DbOption = None,
) -> None:
    """Export logged episodes or turns to JSONL or Parquet (format from the file suffix).

    Examples:

    * `sparring export turns.parquet --game math-reflection`
    * `sparring export episodes.jsonl --level episodes --status succeeded`
    """
    from storage.export import export as export_rows
    from storage.queries import EpisodeFilter

    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        fail(f"{path}: use a .jsonl or .parquet file name")
    if level not in ("episodes", "turns"):
        fail(f"--level {level!r}: use 'episodes' or 'turns'")
    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    flt = EpisodeFilter(game=game, status=status, seat=seat, run_id=run, since=_parse_since(since))
    with err.status(f"exporting {level} to {path}…"):
        count = export_rows(engine, flt, path, fmt=suffix[1:], level=level)
    err.print(f"wrote {count} {level} to {path}")


def _build(engine, settings: Settings, kind: str, role: str, game: str, since: str, split: str | None):
    from training.datasets import EmptyDatasetError, LogFilter, build_snapshot

    try:
        with err.status(f"building {kind} rows for {role} from {game} logs…"):
            return build_snapshot(
                engine, kind, role, game=game, base_model=settings.model, out_dir=settings.data_dir / "datasets",
                since=None if since == "all" else "latest", log_filter=LogFilter(split=split), seed=settings.seed,
            )
    except EmptyDatasetError as exc:
        fail(str(exc))


@datasets_app.command("build")
def datasets_build(
    kind: Annotated[str, typer.Argument(help="dpo, kto, ppo, sft or reward.")],
    role: Annotated[str, typer.Option(help="The learner role (seat) the rows train.")],
    game: Annotated[str, typer.Option(help="Game whose logs are read.")] = "math-reflection",
    since: Annotated[str, typer.Option(help="'latest': only what is newer than the last snapshot; 'all'.")] = "latest",
    split: Annotated[str | None, typer.Option(help="Only episodes of this task split.")] = "train",
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Build a dataset snapshot (TRL conversational JSONL) for one role from the logs.

    Examples:

    * `sparring datasets build sft --role actor`
    * `sparring datasets build dpo --role critic --since all --format json`
    """
    if kind not in ("dpo", "kto", "ppo", "sft", "reward"):
        fail(f"unknown dataset kind {kind!r}; kinds: dpo, kto, ppo, sft, reward")
    if since not in ("latest", "all"):
        fail(f"--since {since!r}: use 'latest' or 'all'")
    settings = settings_or_exit(database_url=db)
    snapshot = _build(store_or_exit(settings), settings, kind, role, game, since, split)
    row = {"snapshot": snapshot.id, "kind": str(snapshot.kind), "role": role, "rows": snapshot.row_count,
           "episodes_read": snapshot.episodes_read, "skipped": snapshot.skipped, "path": str(snapshot.path)}
    emit([row], fmt, title="dataset snapshot")


@app.command()
def train(
    kind: Annotated[str, typer.Argument(help="Trainer: sft, dpo, kto or ppo.")],
    role: Annotated[str, typer.Option(help="The learner role whose adapter is trained.")],
    dataset: Annotated[int | None, typer.Option(help="Snapshot id; default: build one from new logs.")] = None,
    game: Annotated[str, typer.Option(help="Game whose logs are read when building.")] = "math-reflection",
    learning_rate: Annotated[float | None, typer.Option(help="Default: the trainer's.")] = None,
    epochs: Annotated[float | None, typer.Option(help="Passes over the dataset.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop after this many optimiser steps.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Rows per device per step.")] = None,
    beta: Annotated[float | None, typer.Option(help="dpo/kto: strength of the tie to the reference.")] = None,
    rpo_alpha: Annotated[float | None, typer.Option(help="dpo: weight of an NLL term on the chosen side.")] = None,
    report_to: Annotated[str | None, typer.Option(help="sft/dpo/kto: tensorboard, mlflow, wandb… (default none).")] = None,
    fresh: Annotated[bool, typer.Option(help="Start a new adapter instead of continuing the active one.")] = False,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Train a LoRA adapter for one role and publish it as a candidate version.

    The adapter continues from the role's active version unless `--fresh`. Promote it with
    `sparring adapters promote ROLE@vN`.

    Examples:

    * `sparring train sft --role actor`
    * `sparring train dpo --role critic --rpo-alpha 1.0 --epochs 2`
    * `sparring train ppo --role actor --dataset 12 --learning-rate 1e-5`
    """
    from training.jobs import TRAINER_KINDS, TrainingJobError, run_training_job, trainer_for

    if kind not in TRAINER_KINDS:
        fail(f"unknown trainer {kind!r}; trainers: {', '.join(TRAINER_KINDS)}")
    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    _, config_type = trainer_for(kind)
    options = {"learning_rate": learning_rate, "num_train_epochs": epochs, "max_steps": max_steps,
               "per_device_train_batch_size": batch_size, "beta": beta, "rpo_alpha": rpo_alpha,
               "report_to": report_to}
    fields = config_type.__dataclass_fields__
    unknown = [f"--{k.replace('_', '-')}" for k, v in options.items() if v is not None and k not in fields]
    if unknown:
        fail(f"{', '.join(unknown)} does not apply to the {kind} trainer")
    try:
        config = config_type(model=settings.model, device=settings.device, seed=settings.seed,
                             **{k: v for k, v in options.items() if v is not None})
    except ValueError as exc:
        fail(str(exc))

    from training.datasets import DatasetError, load_snapshot
    from training.registry import active_version

    snapshot_id = dataset if dataset is not None else _build(engine, settings, kind, role, game, "latest", "train").id
    try:
        rows = load_snapshot(engine, snapshot_id, role=role, base_model=settings.model, kind=kind)
    except DatasetError as exc:
        fail(str(exc))
    parent = None if fresh else active_version(engine, role)
    progress = Progress(TextColumn(f"[bold]train {kind} {role}[/]"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TimeRemainingColumn(), console=err)
    with progress:
        bar = progress.add_task("train", total=None)
        try:
            result = run_training_job(
                engine, kind=kind, role=role, rows=rows, config=config,
                adapters_root=settings.data_dir / "adapters", cache_dir=settings.cache_dir, parent=parent,
                dataset_snapshot_id=snapshot_id,
                progress=lambda step, total: progress.update(bar, completed=step, total=total),
            )
        except TrainingJobError as exc:
            fail(str(exc), code=1)
    row = {"adapter": result.adapter.name, "job": result.job_id, "dataset": snapshot_id, "rows": len(rows),
           "parent": parent.name if parent else None, **result.metrics}
    emit([row] if fmt != Format.table else [{"metric": k, "value": v} for k, v in row.items()], fmt,
         title="training job", console=out)
    if fmt == Format.table:
        err.print(f"published {result.adapter.name} as a candidate; promote it with "
                  f"`sparring adapters promote {result.adapter.name}`")


@app.command()
def deploy(
    role: Annotated[str, typer.Argument(help="Role whose newest candidate is gated and deployed.")],
    candidate: Annotated[str | None, typer.Option(help="A candidate version (default: the newest).")] = None,
    game: Annotated[str, typer.Option(help="Game the versions are evaluated on.")] = "math-reflection",
    tasks: Annotated[str, typer.Option(help="Held-out task source.")] = "arithmetic",
    eval_tasks: Annotated[int, typer.Option(min=1, help="Held-out tasks each version plays.")] = 64,
    margin: Annotated[float, typer.Option(min=0.0, help="How much worse than the active version is tolerated.")] = 0.0,
    turns: Annotated[int, typer.Option(min=1, help="math-reflection turns during evaluation.")] = 3,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Most tokens per model turn.")] = 160,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Episodes played at once.")] = 16,
    seat: Annotated[list[str] | None, typer.Option("--seat", "-s", help=SEAT_SPEC_HELP)] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Gate a candidate against the active version on held-out tasks (same seeds, greedy) and
    promote it only if it is not worse by more than --margin; otherwise mark it rejected.

    Examples:

    * `sparring deploy actor`
    * `sparring deploy critic --candidate critic@v4 --eval-tasks 200 --margin 0.01`
    """
    from graphs.context import GameOptions
    from graphs.games import UnknownGameError, get_game
    from graphs.policies.base import SamplingParams
    from graphs.tasks import load_tasks
    from graphs.tasks.base import TaskSourceError
    from training.deploy import GateError, LivePolicies, gate_and_deploy
    from training.registry import RegistryError, get_version, list_versions

    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    try:
        spec = get_game(game)
        seat_specs = parse_seat_specs(spec, seat or [])
        heldout = load_tasks(tasks, n=eval_tasks, seed=settings.seed, split="heldout")
        chosen = get_version(engine, candidate) if candidate else next(
            iter(list_versions(engine, role=role, status="candidate")), None)
    except (UnknownGameError, SeatSpecError, TaskSourceError, RegistryError) as exc:
        fail(str(exc))
    if chosen is None:
        fail(f"role {role!r} has no candidate version; train one with `sparring train sft --role {role}`")
    factory = PolicyFactory(settings, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens), engine)

    async def main():
        try:
            with err.status(f"evaluating {chosen.name} against the active {role} on {len(heldout)} held-out tasks…"):
                live = LivePolicies(await factory.policies(seat_specs))
                return await gate_and_deploy(
                    engine, spec, chosen, factory.model_backend(), live, heldout, seed=settings.seed,
                    options=GameOptions(turns=turns), margin=margin, concurrency=concurrency,
                )
        finally:
            await factory.aclose()

    try:
        result = asyncio.run(main())
    except (GateError, RegistryError) as exc:
        fail(str(exc))
    row = {"candidate": result.candidate, "baseline": result.baseline, "metric": result.metric,
           "candidate_value": result.candidate_value, "baseline_value": result.baseline_value,
           "margin": result.margin, "decision": "promoted" if result.promoted else "rejected"}
    emit([row], fmt, title=f"deploy {role}", console=out)


REPORT_METRICS = ("pass@turn-1", "pass@final-turn", "majority@N", "critic_accuracy")


@app.command()
def retrain(
    game: Annotated[str, typer.Option(help="Game played and trained on.")] = "math-reflection",
    roles: Annotated[str, typer.Option(help="Comma-separated learner roles, one adapter each.")] = "actor,critic",
    trainer: Annotated[str, typer.Option(help="sft (rejection sampling), dpo, kto or ppo.")] = "sft",
    every_episodes: Annotated[int, typer.Option(min=1, help="New training episodes per round.")] = 64,
    every_minutes: Annotated[float | None, typer.Option(help="Also end a round's play after T minutes.")] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Rounds to run.")] = 1,
    once: Annotated[bool, typer.Option(help="One round, then exit (for cron).")] = False,
    samples: Annotated[int, typer.Option(min=1, help="Episodes per task (siblings for group rows).")] = 4,
    tasks: Annotated[str, typer.Option(help="Task source (train split to play, heldout split to gate).")] = "arithmetic",
    eval_tasks: Annotated[int, typer.Option(min=1, help="Held-out tasks for the gate and the report.")] = 64,
    margin: Annotated[float, typer.Option(min=0.0, help="Gate tolerance against the active version.")] = 0.0,
    turns: Annotated[int, typer.Option(min=1, help="math-reflection: most actor answers.")] = 3,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature while playing.")] = 0.7,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Most tokens per model turn.")] = 160,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Episodes played at once.")] = 16,
    learning_rate: Annotated[float | None, typer.Option(help="Trainer learning rate (default: the trainer's).")] = None,
    epochs: Annotated[float | None, typer.Option(help="Trainer epochs per round.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Trainer steps per round (overrides epochs).")] = None,
    report: Annotated[bool, typer.Option(help="Evaluate before the first and after the last round.")] = True,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Play, build datasets since the last watermark, train each role, gate, deploy; repeat.

    A round whose step fails for a role (no new rows, a crashed trainer, a rejected candidate)
    is recorded and the loop goes on with the active adapters.

    Examples:

    * `sparring retrain --roles actor,critic --every-episodes 64 --rounds 3`
    * `sparring retrain --once --trainer dpo --roles critic`   (from cron)
    """
    from graphs.context import GameOptions
    from graphs.games import UnknownGameError, get_game
    from graphs.policies.base import SamplingParams
    from graphs.tasks import load_tasks
    from graphs.tasks.base import TaskSourceError
    from training.deploy import LivePolicies, evaluate
    from training.loop import RetrainConfig, retrain_round

    settings = settings_or_exit(database_url=db)
    train_options = {k: v for k, v in {"learning_rate": learning_rate, "num_train_epochs": epochs,
                                       "max_steps": max_steps}.items() if v is not None}
    try:
        spec = get_game(game)
        config = RetrainConfig(
            roles=tuple(r.strip() for r in roles.split(",") if r.strip()), trainer=trainer,
            every_episodes=every_episodes, every_minutes=every_minutes, samples=samples, tasks=tasks,
            eval_tasks=eval_tasks, margin=margin, concurrency=concurrency, train_options=train_options,
        )
        options = GameOptions(turns=turns)
        heldout = load_tasks(tasks, n=eval_tasks, seed=settings.seed, split="heldout")
        seat_specs = parse_seat_specs(spec, [])
    except (UnknownGameError, TaskSourceError, SeatSpecError, ValueError) as exc:
        fail(str(exc))
    engine = store_or_exit(settings)
    factory = PolicyFactory(settings, SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens), engine)
    total_rounds = 1 if once else rounds

    async def main():
        try:
            with err.status("loading models…"):
                live = LivePolicies(await factory.policies(seat_specs))
            common = {"seed": settings.seed, "options": options, "concurrency": concurrency}
            before = after = None
            if report:
                with err.status(f"evaluating the active adapters on {len(heldout)} held-out tasks…"):
                    before = await evaluate(engine, spec, heldout, live(), label="retrain: before", **common)
            outcomes = []
            for index in range(1, total_rounds + 1):
                outcomes.append(await retrain_round(
                    engine, spec, factory.model_backend(), live, config, round_index=index,
                    base_model=settings.model, device=settings.device, data_dir=settings.data_dir,
                    cache_dir=settings.cache_dir, seed=settings.seed, options=options,
                    say=lambda message: err.print(f"[dim]{message}[/]"),
                ))
            if report:
                with err.status(f"evaluating the new adapters on {len(heldout)} held-out tasks…"):
                    after = await evaluate(engine, spec, heldout, live(), label="retrain: after", **common)
            return outcomes, before, after
        finally:
            await factory.aclose()

    try:
        outcomes, before, after = asyncio.run(main())
    except KeyboardInterrupt:
        err.print("interrupted: every committed episode, dataset and adapter is kept")
        raise typer.Exit(130) from None
    rows = [{"round": o.round, "episodes": o.episodes, "role": r.role, "status": r.status, "rows": r.rows,
             "candidate": r.candidate, "detail": r.detail, "seconds": round(o.seconds)} for o in outcomes
            for r in o.roles]
    emit(rows, fmt, columns=["round", "episodes", "role", "status", "rows", "candidate", "detail", "seconds"],
         title="retrain rounds", console=out)
    if before is not None and after is not None:
        table = [{"metric": m, "before": before.get(m), "after": after.get(m)} for m in REPORT_METRICS
                 if m in before]
        emit(table, fmt, title=f"held-out {spec.name}, {len(heldout)} tasks, greedy", console=out)


def _registry_call(call, *args, **kwargs):
    from training.registry import RegistryError

    try:
        return call(*args, **kwargs)
    except RegistryError as exc:
        fail(str(exc))


def _adapter_row(record) -> dict:
    return {
        "name": record.name, "role": record.role, "status": str(record.status), "trainer": record.trainer,
        "base_model": record.base_model, "parent_id": record.parent_id, "dataset": record.dataset_snapshot_id,
        "created_at": record.created_at, "promoted_at": record.promoted_at, "path": str(record.path),
        "eval": record.eval,
    }


@adapters_app.command("list")
def adapters_list(
    role: Annotated[str | None, typer.Option(help="Only this role.")] = None,
    status: Annotated[str | None, typer.Option(help="candidate, active, retired or rejected.")] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """List adapter versions, newest first.

    Examples:

    * `sparring adapters list`
    * `sparring adapters list --role critic --status active --format json`
    """
    from training.registry import list_versions

    engine = store_or_exit(settings_or_exit(database_url=db))
    rows = [_adapter_row(r) for r in _registry_call(list_versions, engine, role=role, status=status)]
    emit(rows, fmt, columns=["name", "status", "trainer", "parent_id", "dataset", "created_at", "promoted_at"],
         title="adapters")


@adapters_app.command("show")
def adapters_show(
    name: Annotated[str, typer.Argument(help="Version name (role@vN) or id.")],
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Show one adapter version with its lineage and evaluation figures.

    Example: `sparring adapters show actor@v3`
    """
    from training.registry import get_version

    engine = store_or_exit(settings_or_exit(database_url=db))
    row = _adapter_row(_registry_call(get_version, engine, name))
    if fmt == Format.table:
        emit([{"field": k, "value": v} for k, v in row.items()], fmt, title=row["name"], console=out)
    else:
        emit([row], fmt)


@adapters_app.command("promote")
def adapters_promote(
    name: Annotated[str, typer.Argument(help="Candidate version to make active (role@vN).")],
    db: DbOption = None,
) -> None:
    """Make a candidate the active version of its role, by hand (the previous one is retired).

    `sparring deploy ROLE` promotes through the evaluation gate instead.

    Example: `sparring adapters promote critic@v4`
    """
    from training.registry import promote

    engine = store_or_exit(settings_or_exit(database_url=db))
    record = _registry_call(promote, engine, name, eval={"promoted_by": "hand"})
    err.print(f"{record.name} is now the active {record.role} adapter")


@adapters_app.command("rollback")
def adapters_rollback(
    role: Annotated[str, typer.Argument(help="Role whose active version is rolled back.")],
    to: Annotated[str | None, typer.Option(help="A retired version to go back to (default: the previous one).")] = None,
    db: DbOption = None,
) -> None:
    """Re-activate the previous version of a role and retire the current one.

    Examples:

    * `sparring adapters rollback actor`
    * `sparring adapters rollback actor --to actor@v2`
    """
    from training.registry import rollback

    engine = store_or_exit(settings_or_exit(database_url=db))
    record = _registry_call(rollback, engine, role, to=to)
    err.print(f"{record.name} is the active {record.role} adapter again")


@app.command()
def settings(fmt: FormatOption = Format.table) -> None:
    """Show the effective settings and where each can be changed.

    Example: `SPARRING_DEVICE=cuda sparring settings`
    """
    current = settings_or_exit()
    rows = [
        {"setting": name, "value": str(getattr(current, name)), "env": f"SPARRING_{name.upper()}",
         "help": field.description}
        for name, field in Settings.model_fields.items()
    ]
    emit(rows, fmt, title="settings")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
