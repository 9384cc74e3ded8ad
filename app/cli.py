"""The `sparring` command line: play games, query what was logged, train, deploy, retrain."""

from __future__ import annotations

from typing import Annotated

import typer

from app import quiet
from app.commands import ratings as ratings_cmd
from app.commands import (
    adapters, episodes, eval_cmd, gateway_cmd, play, report, retrain, runs, serve, settings_cmd, training, verifier_cmd,
    vllm_cmd,
)
from app.commands import jobs as jobs_cmd
from app.commands.game_help import game_help_command
from app.help_format import SparringGroup

app = typer.Typer(
    help="sparring: train language-model agents by letting them play games and debates.\n\n"
    "Every turn is logged to SQL (SPARRING_DATABASE_URL, default sqlite:///sparring.db).\n\n"
    "Example: `sparring play math-reflection -n 4 --seat actor=scripted:calculator --seat "
    "critic=scripted:always-correct`",
    no_args_is_help=True,
    cls=SparringGroup,
    rich_markup_mode=None,  # click's plain help, laid out by app.help_format: nothing cut at 80 columns
)
GAME_COMMANDS = {play.play, eval_cmd.evaluate, retrain.retrain, training.deploy}
"""commands that play a game: with one named, their --help shows that game (app.commands.game_help)"""
for name, command in (
    ("games", play.games), ("play", play.play), ("export", episodes.export), ("train", training.train),
    ("deploy", training.deploy), ("retrain", retrain.retrain), ("report", report.report), ("serve", serve.serve),
    ("settings", settings_cmd.settings), ("vllm", vllm_cmd.vllm), ("eval", eval_cmd.evaluate),
    ("gateway", gateway_cmd.gateway),
):
    app.command(name, cls=game_help_command(command) if command in GAME_COMMANDS else None)(command)
app.command("eval-verifier")(verifier_cmd.eval_verifier)
app.command("ratings")(ratings_cmd.ratings)
app.add_typer(episodes.episodes_app, name="episodes")
app.add_typer(training.datasets_app, name="datasets")
app.add_typer(adapters.adapters_app, name="adapters")
app.add_typer(jobs_cmd.jobs_app, name="jobs")
app.add_typer(runs.runs_app, name="runs")


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        typer.echo(f"sparring {version('sparring')}")
        raise typer.Exit()


@app.callback()
def start(
    ctx: typer.Context,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Show library warnings and progress bars here instead of in "
                     "SPARRING_DATA_DIR/sparring.log."),
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print sparring's version and exit."),
    ] = False,
) -> None:
    """Set the console up once, before a command runs (library noise to the log file)."""
    if isinstance(ctx.obj, quiet.StartUp) and not verbose and (log := quiet.log_path()) is not None:
        quiet.quiet_console(log)


def main() -> None:
    app(obj=quiet.StartUp())


if __name__ == "__main__":
    main()
