"""`sparring games` and `sparring play`: run games and log every turn."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from app import api
from app.commands.common import DbOption, FormatOption, RayOption, err, fail, out, settings_or_exit
from app.commands.game_options import NONE_GIVEN, GameOptionValues, with_game_options
from app.interrupts import exit_when_stopped
from app.output import Format, emit
from app.progress import progress as progress_display
from app.wiring import SEAT_SPEC_HELP

if TYPE_CHECKING:
    from app.settings import Settings


def games(fmt: FormatOption = Format.table) -> None:
    """List the games, their seats and options (json: also their gate metrics and rewards).

    Example: `sparring games`
    """
    from graphs.options import cli_flag, option_fields
    from graphs.registry import game_registry

    rows = [
        {"game": g.name, "seats": ", ".join(f"{s.name} ({s.kind})" for s in g.seats),
         "options": ", ".join(cli_flag(name) for name in option_fields(g.options)) or "-",
         "description": g.description, "tasks": g.tasks.default, "task_specs": g.tasks.accepted,
         "gate_metrics": {seat: gate.name for seat, gate in g.gate_metrics.items()}, "rewards": dict(g.rewards)}
        for g in game_registry().values()
    ]
    emit(rows, fmt, columns=["game", "seats", "description", "options", "tasks"], title="games")


@with_game_options()
def play(
    game: Annotated[str | None, typer.Argument(
        metavar="GAME", help="Game to play; `sparring games` lists them, and `sparring play GAME --help` shows its "
                             "seats, bots, options and metrics.", show_default=False)] = None,
    game_option: Annotated[str | None, typer.Option(
        "--game", help="The game, named as eval, retrain and deploy name it (instead of GAME).",
        show_default=False)] = None,
    episodes: Annotated[int, typer.Option("--episodes", "-n", min=1, help="Episodes to play.")] = 16,
    concurrency: Annotated[int, typer.Option("--concurrency", "-c", min=1, help="Episodes played at once.")] = 16,
    game_options: GameOptionValues = NONE_GIVEN,
    tasks: Annotated[
        str | None,
        typer.Option(help="Task source (default: the game's own; math games: 'arithmetic', 'arithmetic:1-3', a "
                          "GSM8K/MATH .jsonl file, or 'hf:ID'; `sparring games` lists each game's).",
                     show_default=False),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            help="Split the episodes are logged under; dataset builds read 'train' only. arithmetic: 'train' "
            "(default) or 'heldout' problems. A task file: 'eval' by default (evaluation data, never trained "
            "on); pass 'train' to train on its episodes.",
            show_default=False,
        ),
    ] = None,
    samples: Annotated[int, typer.Option(min=1, help="Episodes per task (several samples of one task).")] = 1,
    seat: Annotated[list[str] | None, typer.Option("--seat", "-s", metavar="SEAT=SPEC", help=SEAT_SPEC_HELP)] = None,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature (0 = greedy).")] = 0.7,
    top_p: Annotated[float, typer.Option(min=0.0, max=1.0, help="Nucleus sampling mass.")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Most tokens a model turn may generate.")] = 160,
    timeout: Annotated[
        float | None,
        typer.Option(help="Seconds (> 0) before an episode is marked timeout; default none.", show_default=False),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed for task choice and sampling (default: settings).")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            "-w",
            min=1,
            help="Processes that play the episodes, each with its own models and --concurrency, e.g. -w 4; "
            "episode i keeps task i and seed SEED+i whatever the number. Default 1; with --ray, as many as "
            "the cluster holds.",
            show_default=False,
        ),
    ] = None,
    ray: RayOption = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Play GAME on N tasks, logging every turn, reward and judgment.

    Examples:

    * `sparring play math-reflection --episodes 32 --concurrency 16 --turns 3`
    * `sparring play debate -n 8 --rounds 2 --seat debater_b=scripted:stubborn`
    * `sparring play math-reflection --tasks examples/gsm8k_sample.jsonl -n 20 --temperature 0`
    * `sparring play math-reflection -n 1024 -c 32 --workers 4`  (4 processes, one store)
    * `sparring play math-reflection -n 4096 --ray 10.0.0.5:6379 --db postgresql+psycopg://me@10.0.0.5/sparring`
    * `sparring play negotiation --help`  (the game's seats, bots, options and metrics)
    * `sparring play --game debate -n 8`  (the game named as eval, retrain and deploy name it)
    """
    if game is not None and game_option is not None and game != game_option:
        fail(f"GAME {game!r} and --game {game_option!r} name two games; name one, either way")
    game = game or game_option
    if game is None:
        fail("name the game to play: `sparring play GAME` or `sparring play --game GAME` (`sparring games` lists "
             "them)")
    if timeout is not None and not timeout > 0:
        fail(f"--timeout must be a positive number of seconds, got {timeout:g}; leave it out for no time limit")
    bar = _Bar(game, episodes, transient=fmt != Format.table)
    try:
        with exit_when_stopped("interrupted: finished episodes are kept, running ones are marked failed"), bar:
            result = api.play(
                game, episodes=episodes, seats=seat or [], tasks=tasks, split=split, samples=samples,
                options=game_options.given, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                concurrency=concurrency, timeout_s=timeout, seed=seed, workers=workers, ray=ray, database_url=db,
                progress=bar,
            )
    except api.InputError as exc:
        fail(str(exc))
    except api.RunError as exc:
        fail(str(exc), code=1)
    _print_summary(result.summary, fmt)
    _report_failures(result, fmt, db=db)


def _report_failures(result: api.PlayResult, fmt: Format, *, db: str | None) -> None:
    """Exit 1 naming what was not played or did not succeed; warn about what was played again."""
    summary, see = result.summary, f"see `sparring episodes list --run {result.run_id} --status failed`"
    if result.unplayed or result.worker_errors:
        fail(f"{'; '.join(result.worker_errors + result.workers_lost)}. {result.unplayed} episode(s) were not "
             f"played ({see}).", code=1)
    if result.workers_lost:
        err.print(f"[yellow]{'; '.join(result.workers_lost)}[/]. The unfinished episodes were played again "
                  f"({summary['replayed']} replayed); the cut ones are marked failed", highlight=False)
    if result.workers_died:
        fail(f"{'; '.join(result.workers_died)}. The others finished. What a dead worker finished is kept, its "
             f"running episodes are marked failed and the episodes it had not started were not played ({see}).",
             code=1)
    if result.first_failure is None:
        return
    bad = result.episodes - result.succeeded
    spec = result.seats.get(result.failed_seat or "")
    first = f"{result.first_failure}{_hint(result.failed_seat, spec, settings_or_exit(database_url=db))}"
    if result.succeeded == 0:
        fail(f"no episode succeeded ({bad} of {result.episodes} did not); the first failure: {first} ({see})", 1)
    if fmt == Format.table:
        err.print(f"[yellow]{bad} episode(s) did not succeed[/]; first: {first}  ({see})")


class _Bar:
    """The command's progress (``api.PlayProgress``): "loading models…" until the first episodes
    or workers start, then one bar for all the episodes, whichever process plays them."""

    def __init__(self, game: str, total: int, *, transient: bool) -> None:
        self.done = {"ok": 0, "bad": 0}
        self.progress = progress_display(
            TextColumn(f"[bold]{game}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ok {task.fields[ok]} failed {task.fields[bad]}{task.fields[note]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=transient,
        )
        self.total = total
        self.task = None
        """the bar, added when the first episodes or workers start (a line printer prints it at once)"""
        self.loading = err.status("loading models…")

    def __enter__(self) -> _Bar:
        self.loading.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.loading.stop()
        if self.task is not None:  # a bar never started is not drawn (a refused command prints its error only)
            self.progress.stop()

    def _start(self) -> None:
        if self.task is None:
            self.loading.stop()
            self.task = self.progress.add_task("play", total=self.total, ok=0, bad=0, note="")
            self.progress.start()

    def planned(self, episodes: int) -> None:
        self.total = episodes

    def warn(self, text: str) -> None:
        err.print(f"[yellow]{escape(text)}[/]", highlight=False)

    def loaded(self) -> None:
        self._start()

    def episode(self, succeeded: bool) -> None:
        self._start()
        self.done["ok" if succeeded else "bad"] += 1
        self.progress.update(self.task, advance=1, **self.done)

    def counts(self, succeeded: int, failed: int) -> None:
        self._start()
        self.done.update(ok=succeeded, bad=failed)
        self.progress.update(self.task, completed=succeeded + failed, **self.done)

    def note(self, text: str) -> None:
        self._start()
        self.progress.update(self.task, note=f"  {text}")


def _hint(seat: str | None, spec: str | None, settings: Settings) -> str:
    """What to check when a seat's turn failed, for seats whose error cannot know it: an
    ``openai:`` seat calls the hosted API of the settings, which no vLLM server fixes."""
    if not spec or not spec.startswith("openai:"):
        return ""
    key = "set" if settings.openai_api_key or os.environ.get("OPENAI_API_KEY") else "not set"
    return (
        f". The {seat} seat plays {spec}, a model of the OpenAI-compatible API at SPARRING_OPENAI_BASE_URL "
        f"({settings.openai_base_url}): check that URL and the key, SPARRING_OPENAI_API_KEY or OPENAI_API_KEY "
        f"({key}); `sparring vllm` serves only 'model' seats"
    )


def _print_summary(summary: dict[str, Any], fmt: Format) -> None:
    if fmt == Format.table:
        rows = [{"metric": k, "value": v} for k, v in summary.items()]
        emit(rows, fmt, title="play summary", console=out)
    else:
        emit([summary], fmt)
