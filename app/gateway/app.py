"""The gateway's FastAPI application, and the session that logs what it serves.

``gateway_session`` opens one run for the gateway process (its episodes belong to it) and the
Ledger it writes through; when it closes, the episodes no client ended are marked failed as
interrupted ones (error_stage "interrupted") and the run is finished (failed when the block
raised). ``create_app`` serves a Gateway behind the Guard (host, token, body size); its shutdown
closes the model backends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from fastapi import FastAPI
from sqlalchemy import Engine

from app.gateway import MAX_BODY_BYTES, SPLIT, episodes_api, openai_api
from app.gateway.book import Book
from app.gateway.errors import HANDLERS
from app.gateway.guard import Guard
from app.gateway.ledger import Ledger
from app.gateway.naming import ModelNames
from app.gateway.service import Gateway
from app.server.security import is_loopback
from app.wiring import PolicyFactory
from graphs.policies.base import Backend
from storage.models import RunStatus
from storage.records import RunRecord


@contextmanager
def gateway_session(engine: Engine, factory: PolicyFactory, *, game: str, max_tokens: int,
                    config: dict[str, object] | None = None, split: str = SPLIT) -> Iterator[Gateway]:
    """A Gateway logging into ``engine`` under a run of its own, for as long as the block runs;
    ``max_tokens``: the most a request may ask to generate, bounded by the model's context (the
    model is loaded here, not on the first request); ``split``: that of the episodes opened
    without one."""
    context = model_context(factory.model_backend())
    run = RunRecord.new(game, {"gateway": True, **(config or {})}, factory.settings.seed)
    with Ledger(engine) as ledger:
        ledger.recorder.start_run(run)
        book = Book(ledger, game=game, run_id=run.id, split=split)
        status = RunStatus.INTERRUPTED
        try:
            limit = min(max_tokens, context) if context else max_tokens
            yield Gateway(ModelNames(factory, engine), book, limit, context)
            status = RunStatus.FINISHED
        except Exception:
            status = RunStatus.FAILED
            raise
        finally:
            interrupted = book.close()
            ledger.recorder.finish_run(run.id, status, {"episodes_not_ended": interrupted})


def model_context(backend: Backend) -> int | None:
    """How many tokens the backend's model reads at most, when it is a local model that says."""
    config = getattr(getattr(backend, "model", None), "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) else None


def create_app(gateway: Gateway, *, token: str | None = None, host: str = "127.0.0.1",
               max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """The gateway's app; with ``token``, every request must carry it (see app.gateway.guard)."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await gateway.names.factory.aclose()

    app = FastAPI(title="sparring gateway", summary="OpenAI-compatible API over sparring's policies; every call is "
                  "a logged turn (docs/gateway.md).", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.gateway = gateway
    app.include_router(openai_api.router)
    app.include_router(episodes_api.router)
    for kind, handler in HANDLERS.items():
        app.add_exception_handler(kind, handler)
    app.add_middleware(Guard, token=token, loopback=is_loopback(host), max_body_bytes=max_body_bytes)
    return app
