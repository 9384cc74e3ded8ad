"""Who may read the store through the server.

Bound to a loopback address (the default, 127.0.0.1), the server answers this machine only and
needs no token. Any other bind needs ``SPARRING_API_TOKEN``: every request must then carry it,
as ``Authorization: Bearer TOKEN`` (programs) or in the cookie that opening any page with
``?token=TOKEN`` once sets (browsers). Tokens are compared in constant time. Every answer
carries headers that keep pages from being framed or running scripts from elsewhere; there is
no CORS, so other sites' scripts cannot read the answers.
"""

from __future__ import annotations

import hmac
import ipaddress
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


class TokenMiddleware(BaseHTTPMiddleware):
    """Every request must carry the token (header or cookie); ``?token=`` sets the cookie."""

    def __init__(self, app: object, token: str) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        offered = request.query_params.get("token")
        if offered is not None and same(offered, self.token):
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            response = RedirectResponse(request.url.path + ("?" + urlencode(rest) if rest else ""), 303)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https")
            return response
        header = request.headers.get("authorization", "")
        bearer = header[len("Bearer "):] if header.startswith("Bearer ") else None
        if same(bearer, self.token) or same(request.cookies.get(COOKIE), self.token):
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
