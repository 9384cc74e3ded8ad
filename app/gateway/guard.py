"""Who may call the gateway, and how large a request may be, checked before any route runs.

The viewer's rules (``app.server.security``): on a loopback bind (the default) only requests
naming a loopback host are answered, so a web page that rebinds its name to 127.0.0.1 reads
nothing; any other bind needs ``SPARRING_API_TOKEN``, which every request then carries as
``Authorization: Bearer TOKEN`` (what the ``openai`` client sends as its ``api_key``). There is
no CORS. A body above ``max_body_bytes`` is refused (413) before it is parsed: it is read here,
up to the limit, and handed on whole.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.gateway.errors import error_response
from app.server.security import HEADERS, TOKEN_SETTING, bearer, host_name, is_loopback, same


class Guard:
    """Pure ASGI middleware (a streamed answer passes through untouched)."""

    def __init__(self, app: ASGIApp, *, token: str | None, loopback: bool, max_body_bytes: int) -> None:
        self.app, self.token, self.loopback, self.max_body_bytes = app, token, loopback, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + [
                    (name.lower().encode(), value.encode()) for name, value in HEADERS.items()]
            await send(message)

        headers = Headers(scope=scope)
        refusal, body = self._refusal(headers), b""
        if refusal is None:
            body, refusal = await self._body(headers, receive)
        if refusal is not None:
            await refusal(scope, receive, secured)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: a disconnect
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, secured)

    def _refusal(self, headers: Headers) -> JSONResponse | None:
        name = host_name(headers.get("host", ""))
        if self.loopback and not is_loopback(name):
            return error_response(400, f"this gateway answers only its loopback names (localhost, 127.0.0.1, [::1]), "
                                  f"not Host {name[:100]!r}, as a DNS-rebinding web page would send; to be reached "
                                  f"by other names, bind another address with {TOKEN_SETTING} set", "host_refused")
        if self.token and not same(bearer(headers.get("authorization", "")), self.token):
            return error_response(401, f"this gateway needs its token ({TOKEN_SETTING}): send 'Authorization: "
                                  "Bearer TOKEN' (the openai client's api_key)", "invalid_api_key")
        return None

    async def _body(self, headers: Headers, receive: Receive) -> tuple[bytes, JSONResponse | None]:
        too_large = error_response(413, f"the request body is larger than this gateway's limit of "
                                   f"{self.max_body_bytes} bytes: send a shorter conversation, or start the "
                                   "gateway with a larger --max-body-bytes", "body_too_large")
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            return b"", too_large if declared.isdigit() else error_response(
                400, f"Content-Length {declared[:40]!r} is not a number of bytes", "invalid_request")
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client left before sending its body: the route sees an empty one
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return b"", too_large
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks), None
