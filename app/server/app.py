"""The FastAPI application: routes, security middleware and the errors every route shares.

Errors: a malformed parameter is a 400 naming it, an unknown id a 404 with a message, a
database that cannot be reached a 503 with the cause (the next request tries again, so the
server recovers by itself when the database is back). /api answers JSON, pages answer HTML.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from app.server import api, pages
from app.server.filters import BadParameter
from app.server.plots import Plots
from app.server.security import HeadersMiddleware, HostMiddleware, TokenMiddleware, is_loopback
from app.server.store import Store, StoreUnavailable, unavailable


def create_app(database_url: str, *, token: str | None = None, host: str = "127.0.0.1",
               allowed_hosts: tuple[str, ...] = ()) -> FastAPI:
    """The viewer over the store at ``database_url``; with ``token``, every request must carry it.
    ``host``: the address it is bound to; on a loopback one, only requests naming a loopback
    host or one of ``allowed_hosts`` are answered (see app.server.security)."""
    store, plots = Store(database_url), Plots()

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        store.dispose()
        shutil.rmtree(plots.root, ignore_errors=True)

    app = FastAPI(
        title="sparring",
        summary="Read-only API over sparring's logs: episodes, turns, runs, adapter lineage, datasets, evaluations.",
        openapi_url="/api/openapi.json",
        docs_url=None,  # Swagger UI would load its scripts from a CDN: /docs is a page of its own (app.server.pages)
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.store, app.state.plots, app.state.decoder = store, plots, cache(_model_decoder)
    app.include_router(api.router)
    app.include_router(pages.router)
    pages.mount_static(app)
    app.add_middleware(HeadersMiddleware)
    if token:
        app.add_middleware(TokenMiddleware, token=token)
    if is_loopback(host):
        app.add_middleware(HostMiddleware, allowed=frozenset(allowed_hosts))
    app.add_exception_handler(BadParameter, _bad_parameter)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StoreUnavailable, _unavailable)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    return app


def _answer(request: Request, status: int, detail: str, **extra: str) -> Response:
    if request.url.path.startswith("/api"):
        return JSONResponse({"detail": detail, **extra}, status_code=status)
    return pages.error_page(request, status, detail)


async def _bad_parameter(request: Request, exc: BadParameter) -> Response:
    return _answer(request, 400, str(exc), parameter=exc.name)


async def _invalid(request: Request, exc: RequestValidationError) -> Response:
    first = exc.errors()[0]
    name = str(first["loc"][-1]) if first.get("loc") else "request"
    given = f" (got {first['input']!r})" if first.get("input") is not None else ""
    return _answer(request, 400, f"{name}: {first['msg']}{given}", parameter=name)


async def _unavailable(request: Request, exc: StoreUnavailable) -> Response:
    return _answer(request, 503, str(exc))


async def _database_error(request: Request, exc: DBAPIError) -> Response:
    return _answer(request, 503, str(unavailable(exc)))


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    return _answer(request, exc.status_code, str(exc.detail))


def _model_decoder():  # noqa: ANN202 (app.token_view.Decode)
    """The configured model's token decoder, loaded the first time a token view asks for it."""
    from app.settings import load_settings
    from app.token_view import model_decoder

    settings = load_settings()
    return model_decoder(settings.model, settings.cache_dir)
