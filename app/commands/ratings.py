"""`sparring ratings`: the ladder of every policy that played rated games, and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from app.commands.common import DbOption, FormatOption, err, fail, out, settings_or_exit, store_or_exit
from app.commands.settings_cmd import mask_url
from app.output import Format, emit

NOTHING_CODE = 1
PLOT = "ratings.png"
"""beside the store, as retrain's learning curve (store.db -> store-ratings.png)"""


def ratings(
    game: Annotated[str | None, typer.Option(help="Only this game (default: a ladder per game).")] = None,
    reference: Annotated[str | None, typer.Option(
        help="The fixed opponent each policy's score is measured against (default: the most-played).",
        show_default=False)] = None,
    plot: Annotated[Path | None, typer.Option(
        help="Where to draw the ladder (PNG; default: beside the store).", show_default=False)] = None,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Rate every adapter version and bot from the games it won, tied and lost.

    A rated game is a judgment that names a winner (debate's judge, a rubric judge's
    preference), or a tie between an episode's two non-judge seats. Ratings are one
    Bradley-Terry fit on the Elo scale (a ladder averages 1500; +400 = 10:1 odds), with 95%
    intervals. Ratings from gate matches alone are biased (each version met its
    predecessor), so each policy's score against one fixed --reference opponent (wins plus
    half the ties, Wilson 95% interval) comes beside them. Exits 1 when no game is rated yet.

    Examples:

    * `sparring ratings`
    * `sparring ratings --game debate --reference scripted:stubborn --plot ladder.png`
    * `sparring ratings --format jsonl | jq -c 'select(.games >= 20)'`
    """
    from evaluation.ladder_plot import ladder_plot
    from evaluation.ratings import RatingsError, ladders
    from evaluation.report import figure_path
    from graphs.registry import UnknownGameError, get_game

    settings = settings_or_exit(database_url=db)
    try:
        if game is not None:
            get_game(game)
        found = ladders(store_or_exit(settings), game, reference)
    except (UnknownGameError, RatingsError) as exc:
        fail(str(exc))
    if not found:
        where = f"of {game} " if game else ""
        err.print(
            f"no rated games {where}in this store ({mask_url(settings.database_url)}): a rated game is a judgment "
            "that names a winner, or a tie between two players. Make some with `sparring play debate -n 32 --seat "
            "debater_b=scripted:stubborn` (rules judge each debate), then play other versions or bots "
            "against the same opponents.",
            highlight=False,
        )
        raise typer.Exit(NOTHING_CODE)
    path = plot or figure_path(settings.database_url, settings.data_dir, PLOT)
    if fmt != Format.table:
        emit([row for ladder in found for row in ladder.rows()], fmt)
    for ladder in found if fmt == Format.table else []:
        against = ladder.reference or f"{reference} (no {ladder.game} game)"
        emit(ladder.table(), fmt, columns=["player", "rating", "95% interval", "W-T-L", "vs reference"],
             title=f"{ladder.game}: {ladder.games} rated games", console=out,
             caption=f"vs reference: score against {against} (ties half) [95%] n")
    ladder_plot(found, path, "ratings: Bradley-Terry on the Elo scale, 95% intervals")
    err.print(f"ladder plot: {path}", highlight=False)
