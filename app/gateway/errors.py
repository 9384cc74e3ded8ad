"""Errors in OpenAI's format: ``{"error": {"message", "type", "code", "param"}}``.

Every refusal of the gateway is a ``GatewayError``; its message says what was wrong and how to
fix it. Errors a client should not retry carry ``x-should-retry: false`` (the ``openai``
client otherwise retries a 409); a 503 (the store is unreachable) leaves retrying to the client.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from starlette.exceptions import HTTPException as StarletteHTTPException

from storage.engine import DatabaseError, driver_message

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               409: "conflict_error", 413: "invalid_request_error", 499: "client_closed_request",
               503: "service_unavailable"}


class GatewayError(Exception):
    """A request the gateway refuses: its HTTP status, message and machine-readable code."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def error_body(status: int, message: str, code: str, param: str | None = None) -> dict[str, dict[str, str | None]]:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"), "code": code,
                      "param": param}}


def error_response(status: int, message: str, code: str, param: str | None = None) -> JSONResponse:
    headers = {} if status >= 500 else {"x-should-retry": "false"}
    return JSONResponse(error_body(status, message, code, param), status_code=status, headers=headers)


async def gateway_error(_request: Request, exc: GatewayError) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.code, exc.param)


async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """A body that is not JSON, or JSON that is not the request: the first problem, by field."""
    first = exc.errors()[0]
    if first.get("type") == "json_invalid":
        return error_response(400, "the request body is not valid JSON: send a JSON object "
                              f"({first.get('ctx', {}).get('error', 'parse error')})", "invalid_json")
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "body"
    return error_response(400, f"{where}: {first['msg']}", "invalid_request", where)


async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """Starlette's own refusals (an unknown path, a wrong method) in the same format."""
    return error_response(exc.status_code, str(exc.detail), "not_found" if exc.status_code == 404 else "http_error")


def store_unreachable(exc: Exception) -> GatewayError:
    """503: the store cannot be reached or written (the driver's error, never the SQL or its parameters)."""
    cause = exc.__cause__ if isinstance(exc, DatabaseError) and exc.__cause__ is not None else exc
    return GatewayError(503, f"the store (database) is unreachable ({driver_message(cause)}): this request is not "
                        "logged, and nothing answered before is lost. Retry once the database is back: the gateway "
                        "reconnects by itself", "store_unavailable")


async def database_error(_request: Request, exc: Exception) -> JSONResponse:
    """A read of the store failed: 503, and the next request tries again."""
    return await gateway_error(_request, store_unreachable(exc))


HANDLERS: dict[type[Exception], Any] = {GatewayError: gateway_error, RequestValidationError: invalid_request,
            StarletteHTTPException: http_error, DBAPIError: database_error, DatabaseError: database_error}
