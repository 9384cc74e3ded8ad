"""Who may read the store through the server.

Bound to a loopback address (the default, 127.0.0.1), the server answers this machine only and
needs no token; it then answers only requests whose ``Host`` is a loopback name (localhost,
127.0.0.1, [::1]) or one given with ``--allow-host``, so a web page that rebinds its own name
to 127.0.0.1 (DNS rebinding) reads nothing. Any other bind needs ``SPARRING_API_TOKEN``: every
request must then carry it, as ``Authorization: Bearer TOKEN`` (the scheme in any case;
programs) or in the cookie that opening any page with ``?token=TOKEN`` once sets (browsers),
which then redirects to the same path on this server, never elsewhere. Tokens are compared in
constant time. Every answer carries headers that keep pages from being framed or running
scripts from elsewhere; there is no CORS, so other sites' scripts cannot read the answers.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from urllib.parse import urlencode

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

TOKEN_SETTING = "SPARRING_API_TOKEN"
COOKIE = "sparring_token"
LOOPBACK_NAMES = ("localhost",)
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


class BindError(ValueError):
    """A bind the server refuses; the message says how to allow it."""


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse a bind other than loopback without a token (or with a weak one)."""
    if is_loopback(host):
        return
    if not token:
        raise BindError(
            f"binding {host} would let other machines read the logs: set {TOKEN_SETTING} first, e.g. "
            f"export {TOKEN_SETTING}=$(python -c 'import secrets; print(secrets.token_urlsafe(32))'), "
            "or bind 127.0.0.1 (the default)"
        )
    if len(token) < 16:
        raise BindError(f"{TOKEN_SETTING} is {len(token)} characters; use at least 16 (e.g. secrets.token_urlsafe(32))")


def same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def bearer(header: str) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header (the scheme in any case)."""
    scheme, _, credentials = header.strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


_LEADING_SLASHES = re.compile(r"^[/\\]+")


def local_path(path: str) -> str:
    """``path`` as a path on this server: leading slashes and backslashes collapse to one, so
    ``//evil.example/`` cannot become a redirect to another site."""
    return "/" + _LEADING_SLASHES.sub("", path)


def host_name(header: str) -> str:
    """The name of a ``Host`` header, without its port, in lower case."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class HostMiddleware(BaseHTTPMiddleware):
    """On a loopback bind: only requests to a loopback name or an allowed one (400 otherwise)."""

    def __init__(self, app: object, allowed: frozenset[str]) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.allowed = frozenset(name.lower() for name in allowed)

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        name = host_name(request.headers.get("host", ""))
        if is_loopback(name) or name in self.allowed:
            return await call_next(request)
        return JSONResponse(
            {"detail": f"this server answers only its loopback names (localhost, 127.0.0.1, [::1]), not Host "
                       f"{name[:100]!r}: another name reaching it is what a DNS-rebinding web page does. To open "
                       "it under that name, start it with `sparring serve --allow-host NAME`", "parameter": "Host"},
            status_code=400)


class TokenMiddleware(BaseHTTPMiddleware):
    """Every request must carry the token (header or cookie); ``?token=`` sets the cookie."""

    def __init__(self, app: object, token: str) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        offered = request.query_params.get("token")
        if offered is not None and same(offered, self.token):
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            response = RedirectResponse(local_path(request.url.path) + ("?" + urlencode(rest) if rest else ""), 303)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https")
            return response
        offered_header = bearer(request.headers.get("authorization", ""))
        if same(offered_header, self.token) or same(request.cookies.get(COOKIE), self.token):
            return await call_next(request)
        return JSONResponse(
            {"detail": f"this server needs its token ({TOKEN_SETTING}): send 'Authorization: Bearer TOKEN', "
                       "or open any page once with ?token=TOKEN"},
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )


class HeadersMiddleware(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response
