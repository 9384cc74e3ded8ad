"""`sparring gateway`: an OpenAI-compatible server over sparring's policies that logs every call as a turn."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from app.commands.common import (
    DbOption, api_token_for, clean_up_stale_work, err, settings_or_exit, store_or_exit,
)
from app.commands.settings_cmd import mask_url
from app.gateway import MAX_BODY_BYTES, MAX_TOKENS
from storage.redact import redact


def gateway(
    host: Annotated[str, typer.Option(help="Address to bind. Other than loopback needs SPARRING_API_TOKEN.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8766,
    game: Annotated[str, typer.Option("--game", help="The game name the logged episodes get (your agent's game: "
                                      "filter, export and build datasets by it).")] = "external",
    max_tokens: Annotated[int, typer.Option(min=1, help="Most tokens one request may ask to generate (at most the "
                                            "model's context, less the prompt); a request asking more is "
                                            "refused.")]
    = MAX_TOKENS,
    max_body_bytes: Annotated[int, typer.Option(min=1024, help="Largest request body accepted, in bytes.")]
    = MAX_BODY_BYTES,
    db: DbOption = None,
) -> None:
    """Serve sparring's policies to your own agents through the OpenAI API, and log every call
    as a turn of an episode of --game: LangGraph, LangChain or plain `openai` code only changes
    its base_url.

    Model names: `base` (the base model), `ROLE` (the role's active adapter, following deploys),
    `ROLE@vN` (one version); GET /v1/models lists them. A call names its episode and seat with
    the headers X-Sparring-Episode and X-Sparring-Seat (or metadata.episode_id / metadata.seat);
    POST /v1/episodes opens an episode, /v1/episodes/ID/rewards, /judgments and /end score and
    end it. Episodes not ended when the gateway stops are marked failed as interrupted.
    Responses carry token ids (prompt_token_ids, choices[].token_ids) and, when asked, logprobs.
    Refused by name (400): fields it does not serve (n>1, tools, response_format JSON...) and
    replies that do not fit the model's context; a client that goes away cancels its generation;
    while the database is unreachable requests get 503, and succeed again once it is back.
    Bound to 127.0.0.1 by default; another address needs SPARRING_API_TOKEN, which clients send
    as their api_key. Manual: docs/gateway.md.

    Examples:

    * `sparring gateway`   (then OpenAI(base_url="http://127.0.0.1:8766/v1", api_key="none"))
    * `sparring gateway --game code-review --port 9000 --db sqlite:///agents.db`
    * `export SPARRING_API_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')`, then
      `sparring gateway --host 0.0.0.0`
    * `curl -s http://127.0.0.1:8766/v1/models | jq '.data[].id'`
    """
    import uvicorn

    from app.gateway.app import create_app, gateway_session
    from app.wiring import PolicyFactory
    from graphs.policies.base import SamplingParams

    settings = settings_or_exit(database_url=db)
    token = api_token_for(host)
    engine = store_or_exit(settings)
    clean_up_stale_work(engine)
    factory = PolicyFactory(settings, SamplingParams(), engine)
    shown = f"[{host}]" if ":" in host else host
    config = {"host": host, "port": port}
    with gateway_session(engine, factory, game=game, max_tokens=max_tokens, config=config) as served:
        app = create_app(served, token=token, host=host, max_body_bytes=max_body_bytes)
        err.print(f"gateway for {escape(settings.model)} logging game {escape(game)} into "
                  f"{escape(redact(mask_url(settings.database_url)))} at http://{shown}:{port}/v1 (Ctrl-C stops)",
                  highlight=False)
        uvicorn.run(app, host=host, port=port, log_level="warning")
