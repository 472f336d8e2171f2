"""Request guards: Host/Origin checks against DNS rebinding, and a token off loopback."""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
MIN_TOKEN_LENGTH = 12
TOKEN_RULE = (
    f"at least {MIN_TOKEN_LENGTH} characters, printable ASCII without spaces "
    "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(24))'`)"
)


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot guard the API (``TOKEN_RULE``), or None when it can: a blank or
    short token, or one with spaces (``?token=+++`` decodes to spaces), is refused."""
    if len(token) < MIN_TOKEN_LENGTH:
        return f"it has {len(token)} characters"
    bad = sorted({c for c in token if not ("!" <= c <= "~")})
    if bad:
        return f"it contains {', '.join(repr(c) for c in bad)}"
    return None


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def _hostname(value: str) -> str:
    if value.startswith("["):
        return value.split("]")[0] + "]"
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class GuardMiddleware:
    """Refuse requests whose Host or Origin is not ours, and (off loopback) without the token."""

    def __init__(self, app: ASGIApp, allowed_hosts: set[str], token: str | None) -> None:
        self.app = app
        self.allowed_hosts = {h.lower() for h in allowed_hosts} | LOOPBACK_HOSTS
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        conn = HTTPConnection(scope)
        problem = self._problem(conn)
        if problem is None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": problem})
            return
        response: Response = JSONResponse({"detail": problem}, status_code=403)
        await response(scope, receive, send)

    def _problem(self, conn: HTTPConnection) -> str | None:
        host = _hostname(conn.headers.get("host", "")).lower()
        if host not in self.allowed_hosts:
            return f"Host {host!r} is not allowed (DNS rebinding guard)"
        origin = conn.headers.get("origin")
        if origin is not None and not self._own_origin(origin, conn.headers.get("host", "")):
            return f"Origin {origin!r} is not allowed (only this backend's own page)"
        if self.token is not None and not self._token_ok(conn):
            return "missing or wrong token (Authorization: Bearer <token> or ?token=)"
        return None

    def _own_origin(self, origin: str, host_header: str) -> bool:
        """One of our names on the port this request came to ("null" is never ours)."""
        try:  # urlsplit raises ValueError on a malformed origin ("http://[bad")
            parts = urlsplit(origin)
            name = (parts.hostname or "").lower()
            origin_port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return False
        if name not in self.allowed_hosts and f"[{name}]" not in self.allowed_hosts:
            return False
        _, _, host_port = host_header.rpartition(":")
        return host_port.isdigit() and int(host_port) == origin_port

    def _token_ok(self, conn: HTTPConnection) -> bool:
        assert self.token is not None
        given = conn.query_params.get("token") or ""
        auth = conn.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:]
        return hmac.compare_digest(given.encode(), self.token.encode())
