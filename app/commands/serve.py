"""`sparring serve`: the web viewer and JSON API over the store."""

from __future__ import annotations

from typing import Annotated

import typer

from rich.markup import escape

from app.commands.common import DbOption, api_token_for, err, settings_or_exit
from app.commands.settings_cmd import mask_url
from storage.redact import redact


def serve(
    host: Annotated[str, typer.Option(help="Address to bind. Other than loopback needs SPARRING_API_TOKEN.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8765,
    db: DbOption = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="Another name this server may be reached by on a loopback bind (repeatable); "
        "requests naming any other host than localhost or a loopback address are refused.",
        show_default=False)] = None,
) -> None:
    """Browse the logs in a web browser, or read them as JSON: episodes (filters, full-text
    search, live updates), each episode turn by turn, two policies compared on one task, the
    lineage of adapter versions and the learning curves. Read-only.

    The API is under /api (described at /docs; schema: /api/openapi.json). Bound to 127.0.0.1
    by default, where it answers only requests to localhost or a loopback address (or a name
    given with --allow-host): a web page cannot read it by rebinding its own name. To bind
    another address, set SPARRING_API_TOKEN (16+ characters): programs send it as
    `Authorization: Bearer TOKEN`, browsers open any page once with `?token=TOKEN`.

    Examples:

    * `sparring serve`   (then open http://127.0.0.1:8765)
    * `sparring serve --port 9000 --db postgresql+psycopg://me@db:5432/sparring`
    * `SPARRING_API_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))') sparring serve --host 0.0.0.0`
    * `curl -s 'http://127.0.0.1:8765/api/episodes?status=failed&q=division' | jq '.items[].id'`
    """
    import uvicorn

    from app.server.app import create_app

    settings = settings_or_exit(database_url=db)
    token = api_token_for(host)
    app = create_app(settings.database_url, token=token, host=host, allowed_hosts=tuple(allow_host or ()))
    try:
        app.state.store.engine()
    except Exception as exc:  # the server still starts: pages answer 503 with the cause until the database is back
        err.print(f"[yellow]warning:[/] {escape(redact(str(exc)))}", highlight=False)
    shown = f"[{host}]" if ":" in host else host
    err.print(f"serving {escape(redact(mask_url(settings.database_url)))} at http://{shown}:{port} (Ctrl-C stops)",
              highlight=False)
    uvicorn.run(app, host=host, port=port, log_level="warning")
