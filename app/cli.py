"""The `sparring` command line: play games, query what was logged, train, deploy, retrain."""

from __future__ import annotations

import typer

from app.commands import adapters, episodes, eval_cmd, play, retrain, settings_cmd, training, vllm_cmd

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
    settings_cmd.settings,
    vllm_cmd.vllm,
):
    app.command()(command)
app.command("eval")(eval_cmd.evaluate)
app.add_typer(episodes.episodes_app, name="episodes")
app.add_typer(training.datasets_app, name="datasets")
app.add_typer(adapters.adapters_app, name="adapters")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
