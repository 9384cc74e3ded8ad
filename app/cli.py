"""The `sparring` command line: play games, query what was logged, train, deploy, retrain."""

from __future__ import annotations

from typing import Annotated

import typer

from app import quiet
from app.commands import ratings as ratings_cmd
from app.commands import (
    adapters, episodes, eval_cmd, play, report, retrain, serve, settings_cmd, training, verifier_cmd, vllm_cmd,
)
from app.commands import jobs as jobs_cmd

app = typer.Typer(
    help="sparring: train language-model agents by letting them play games and debates.\n\n"
    "Every turn is logged to SQL (SPARRING_DATABASE_URL, default sqlite:///sparring.db).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
for command in (
    play.games,
    play.play,
    episodes.export,
    training.train,
    training.deploy,
    retrain.retrain,
    report.report,
    serve.serve,
    settings_cmd.settings,
    vllm_cmd.vllm,
):
    app.command()(command)
app.command("eval")(eval_cmd.evaluate)
app.command("eval-verifier")(verifier_cmd.eval_verifier)
app.command("ratings")(ratings_cmd.ratings)
app.add_typer(episodes.episodes_app, name="episodes")
app.add_typer(training.datasets_app, name="datasets")
app.add_typer(adapters.adapters_app, name="adapters")
app.add_typer(jobs_cmd.jobs_app, name="jobs")


@app.callback()
def start(
    ctx: typer.Context,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Show library warnings and progress bars here instead of in "
                     "SPARRING_DATA_DIR/sparring.log."),
    ] = False,
) -> None:
    """Set the console up once, before a command runs (library noise to the log file)."""
    if isinstance(ctx.obj, quiet.StartUp) and not verbose:
        quiet.quiet_console(quiet.log_path())


def main() -> None:
    app(obj=quiet.StartUp())


if __name__ == "__main__":
    main()
