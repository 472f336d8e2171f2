"""A limit on request bodies, enforced before anything parses them (413 past it).

A declared ``Content-Length`` over the limit is refused without reading; otherwise the body is
read up to the limit and replayed to the app, so a chunked body cannot slip past it either.
"""

from __future__ import annotations

from typing import Final

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["MAX_BODY_BYTES", "BodyLimitMiddleware"]

MAX_BODY_BYTES: Final = 1 << 20  # 1 MiB: a start request is well under 1 KiB


class BodyLimitMiddleware:
    """Answer 413 to an HTTP request whose body is larger than ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send, f"{int(declared)} bytes declared")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, f"more than {self.max_bytes} bytes sent")
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        await self.app(scope, _replay([{"type": "http.request", "body": body}], receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, seen: str) -> None:
        detail = f"body: too large ({seen}); the limit is {self.max_bytes} bytes"
        response = JSONResponse({"detail": detail}, status_code=413)
        await response(scope, receive, send)


def _replay(messages: list[Message], then: Receive) -> Receive:
    """A receive() that hands out ``messages``, then the server's own (the disconnect)."""
    pending = list(messages)

    async def receive() -> Message:
        return pending.pop(0) if pending else await then()

    return receive
