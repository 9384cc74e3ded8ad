"""Query and export what was logged: `sparring episodes list|show`, `sparring export`."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from app.commands.common import DbOption, FormatOption, engine_or_exit, err, fail, out, settings_or_exit, store_or_exit
from app.output import Format, dumps, emit
from app.terminal import literal, printable

episodes_app = typer.Typer(help="Query logged episodes.", no_args_is_help=True)


def _filter(engine, *, game: str | None, status: str | None, seat: str | None, run: str | None, **rest):
    """The EpisodeFilter of the options, each checked: a game, status or seat that does not
    exist would match nothing, silently, so it is an error that lists the valid values; a run
    is given by its id or a unique start of it."""
    from graphs.registry import game_registry
    from storage.logged import logged_games, logged_seats
    from storage.queries import EpisodeFilter, resolve_run_id
    from storage.records import EpisodeStatus

    games = game_registry()
    if game is not None and game not in games and game not in (logged := logged_games(engine)):
        fail(f"--game {game!r}: no such game; games: {', '.join(dict.fromkeys([*games, *logged]))}")
    statuses = [s.value for s in EpisodeStatus]
    if status is not None and status not in statuses:
        fail(f"--status {status!r}: no such status; statuses: {', '.join(statuses)}")
    seats = list(dict.fromkeys(s.name for g in games.values() if game in (None, g.name) for s in g.seats))
    if seat is not None and seat not in seats:  # a seat of a game the registry does not know (sparring gateway's)
        seats = list(dict.fromkeys([*seats, *logged_seats(engine, game)]))
    if seat is not None and seat not in seats:
        fail(f"--seat {seat!r}: no such seat{f' in {game}' if game else ''}; seats: {', '.join(seats)}")
    try:
        run_id = None if run is None else resolve_run_id(engine, run)
    except KeyError as exc:
        fail(f"--run: {exc.args[0]} (`sparring episodes list` shows runs' episodes; a play prints its run_id)")
    return EpisodeFilter(game=game, status=status, seat=seat, run_id=run_id, **rest)


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
    policy: Annotated[
        str | None,
        typer.Option(
            help="Only episodes with a turn of this policy, matched exactly: an adapter version (actor@v1), "
            "'base' (the model without adapter) or a policy label (scripted:calculator)."
        ),
    ] = None,
    run: Annotated[str | None, typer.Option(help="Only this run (its id or a unique start of it).")] = None,
    min_reward: Annotated[float | None, typer.Option(help="Reward at least this.")] = None,
    max_reward: Annotated[float | None, typer.Option(help="Reward at most this.")] = None,
    since: Annotated[str | None, typer.Option(help="Started at or after this ISO time.")] = None,
    sort: Annotated[
        str, typer.Option(help="Sort key, '-' for descending: started_at, reward, num_turns…")
    ] = "-started_at",
    limit: Annotated[int, typer.Option(min=1, help="Rows per page.")] = 20,
    page: Annotated[int, typer.Option(min=1, help="Page number (counted from --after when given).")] = 1,
    after: Annotated[
        str | None,
        typer.Option(help="Start after this episode id (keyset paging: deep pages cost what the first does)."),
    ] = None,
    count: Annotated[bool, typer.Option(help="Count every match (the slow part of a page on a large store).")] = True,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """List logged episodes with filters, sorting and paging.

    On a large store, page with `--after LAST_ID --no-count` (the caption prints the id to pass):
    it reads only the page asked for.

    Examples:

    * `sparring episodes list --game math-reflection --status failed`
    * `sparring episodes list --min-reward 1 --sort -finished_at --limit 50 --page 2`
    * `sparring episodes list --seat critic --format jsonl > episodes.jsonl`
    * `sparring episodes list --policy actor@v2 --status succeeded`
    * `sparring episodes list --game debate --no-count --after 3f2a9c0d4e5f...`
    """
    from storage.queries import list_episodes

    if min_reward is not None and max_reward is not None and min_reward > max_reward:
        fail(f"--min-reward {min_reward:g} is above --max-reward {max_reward:g}, so no episode could match; swap them")
    engine = engine_or_exit(db)
    flt = _filter(
        engine,
        game=game,
        status=status,
        seat=seat,
        run=run,
        policy=policy,
        min_reward=min_reward,
        max_reward=max_reward,
        since=_parse_since(since),
    )
    try:
        result = list_episodes(engine, flt, sort=sort, limit=limit, offset=(page - 1) * limit, after=after,
                               count=count)
    except (ValueError, KeyError) as exc:
        fail(str(exc.args[0]))
    pages = max(1, -(-result.total // limit)) if count else None
    if pages is not None and page > pages:
        fail(f"--page {page} is past the last page: {result.total} episode(s) match, {pages} page(s) of {limit}; "
             f"ask for a page from 1 to {pages}")
    if not result.items and page > 1:
        fail(f"--page {page} is past the last page: no episode matches there; ask for an earlier page")
    where = f"page {page}/{pages} · {result.total} matching" if count else f"page {page}"
    if result.items:
        where += f" · next: --after {result.items[-1]['id']}"
    rows = [{**row, "id": row["id"][:12] if fmt == Format.table else row["id"]} for row in result.items]
    if fmt == Format.table:  # task ids and error stages came from tasks and games: shown literally
        rows = [{k: printable(v) if isinstance(v, str) else v for k, v in row.items()} for row in rows]
    emit(
        rows,
        fmt,
        columns=["id", "game", "task_id", "status", "reward", "num_turns", "started_at", "error_stage"],
        title="episodes",
        caption=where,
    )


@episodes_app.command("show")
def episodes_show(
    episode_id: Annotated[str, typer.Argument(help="Episode id or a unique prefix of it.")],
    tokens: Annotated[
        bool, typer.Option(help="Also show each turn's completion tokens, decoded, beside their logprobs.")
    ] = False,
    prompts: Annotated[bool, typer.Option(help="Table: also print the messages each turn was prompted with.")] = False,
    db: DbOption = None,
    fmt: FormatOption = Format.table,
) -> None:
    """Show one episode turn by turn, with seats, prompts, rewards and judgments.

    `--format json` prints one object: the episode's columns, its task, and its turns with
    their prompt messages, response, token ids and logprobs (with `--tokens`, also
    `tokens`: [{id, text, logprob}]), its rewards and judgments.

    Examples:

    * `sparring episodes show 3f2a9c`
    * `sparring episodes show 3f2a9c --format json | jq .turns[0]`
    * `sparring episodes show 3f2a9c --tokens`
    """
    from storage.queries import get_episode

    settings = settings_or_exit(database_url=db)
    engine = store_or_exit(settings)
    try:
        episode = get_episode(engine, episode_id)
    except KeyError as exc:
        fail(exc.args[0])
    if tokens:
        _add_tokens(episode, settings)
    if fmt != Format.table:
        _write_json(dumps(episode))
        return
    _render_episode(episode, tokens, prompts)


def _write_json(text: str) -> None:
    """JSON out, a lone surrogate written as its JSON escape (which reads back as the same
    string) rather than failing to encode."""
    sys.stdout.write(text.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")


def _add_tokens(episode: dict, settings) -> None:
    """Give each turn its decoded tokens (``tokens``), loading the model's tokenizer only if a
    model turn has token ids."""
    from functools import cache

    from app.token_view import aligned_tokens, model_decoder

    @cache
    def decoder():
        with err.status(f"loading the tokenizer of {settings.model}…"):
            return model_decoder(settings.model, settings.cache_dir)

    for turn in episode.get("turns", []):
        turn["tokens"] = aligned_tokens(turn, decoder)


def _render_episode(episode: dict, tokens: bool, prompts: bool) -> None:
    """The episode as panels. Every text that came from a task or a model is shown literally
    (``app.terminal.literal``): never read as markup, control characters escaped."""
    from rich.panel import Panel

    task = episode.get("task") or {}
    out.print(
        Panel(
            Text.assemble(literal(task.get("question", ""), "bold"), "\n\nground truth: ", literal(task.get("answer"))),
            title=literal(f"episode {episode['id']} · {episode['game']} · {episode['status']} · reward "
                          f"{episode.get('reward')}"),
        )
    )
    if episode.get("error"):
        out.print(literal(f"error at {episode.get('error_stage')}: {episode['error']}", "red"))
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
        if prompts:
            for message in turn.get("messages") or []:
                out.print(literal(f"{message.get('role')}: {message.get('content')}", "dim"))
        out.print(Panel(literal(turn["response"] or ""), title=literal(header),
                        subtitle=literal(" ".join(extra)) if extra else None, title_align="left"))
        if tokens:
            _render_tokens(turn)
    for j in episode.get("judgments", []):
        out.print(Panel(literal(j["rationale"]),
                        title=literal(f"judgment by {j['judge_seat']}: winner {j['winner_seat'] or 'tie'}")))
    episode_rewards = rewards_by_turn.get(None)
    if episode_rewards:
        out.print(literal("episode rewards: " + " ".join(episode_rewards)))


def _render_tokens(turn: dict) -> None:
    """The turn's tokens, one row each: position, id, the decoded text (whitespace shown as
    escapes) and its logprob."""
    from rich.table import Table

    if not turn["tokens"]:
        out.print(Text("no token ids were logged for this turn", style="dim"))
        return
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="dim")
    for column in ("#", "id", "token", "logprob"):
        table.add_column(column, justify="left" if column == "token" else "right")
    for i, token in enumerate(turn["tokens"]):
        logprob = "-" if token["logprob"] is None else f"{token['logprob']:.3f}"
        table.add_row(str(i), str(token["id"]), literal(json.dumps(token["text"], ensure_ascii=False)), logprob)
    out.print(table)


def export(
    path: Annotated[Path, typer.Argument(help="Output file (.jsonl or .parquet).")],
    level: Annotated[str, typer.Option(help="'episodes' (nested turns) or 'turns' (one flat row per turn).")] = "turns",
    game: Annotated[str | None, typer.Option(help="Only this game.")] = None,
    status: Annotated[str | None, typer.Option(help="Only this status.")] = None,
    seat: Annotated[str | None, typer.Option(help="Only episodes with a turn from this seat.")] = None,
    run: Annotated[str | None, typer.Option(help="Only this run (its id or a unique start of it).")] = None,
    since: Annotated[str | None, typer.Option(help="Started at or after this ISO time.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the file if it exists.")] = False,
    db: DbOption = None,
) -> None:
    """Export logged episodes or turns to JSONL or Parquet (format from the file suffix). An
    existing file is kept unless --force is given.

    Examples:

    * `sparring export turns.parquet --game math-reflection`
    * `sparring export episodes.jsonl --level episodes --status succeeded --force`
    """
    from storage.export import export as export_rows

    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        fail(f"{path}: use a .jsonl or .parquet file name")
    if level not in ("episodes", "turns"):
        fail(f"--level {level!r}: use 'episodes' or 'turns'")
    if path.exists() and not force:
        fail(f"{path} exists already: pass --force to overwrite it, or give another file name")
    engine = engine_or_exit(db)
    flt = _filter(engine, game=game, status=status, seat=seat, run=run, since=_parse_since(since))
    with err.status(f"exporting {level} to {path}…"):
        count = export_rows(engine, flt, path, fmt=suffix[1:], level=level)
    err.print(f"wrote {count} {level} to {path}")
