"""A tiny real HTTP server on 127.0.0.1 that answers each route with a canned reply.

For clients that must meet a server saying something ours never would (another protocol
version, a reply of the wrong shape): it listens on a real loopback port, in a thread.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Canned", "QuietHandler", "canned_server", "serving"]

SHUTDOWN_POLL_S = 0.02  # how soon serve_forever notices shutdown (its default is 0.5 s)
JOIN_TIMEOUT_S = 10.0


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers with :meth:`send_body`."""

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], name: str) -> Iterator[str]:
    """``handler`` served on a free loopback port in a thread; yields the URL; stopped and
    joined at the end."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": SHUTDOWN_POLL_S},
        name=name,
        daemon=True,
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=JOIN_TIMEOUT_S)


@dataclass(frozen=True)
class Canned:
    """One route's reply: a JSON value (or raw bytes) with a status."""

    body: Any
    status: int = 200

    def encoded(self) -> tuple[bytes, str]:
        if isinstance(self.body, bytes):
            return self.body, "text/plain"
        return json.dumps(self.body).encode(), "application/json"


@contextmanager
def canned_server(replies: dict[str, Canned]) -> Iterator[str]:
    """Serve ``replies`` (route -> reply, any method; 404 elsewhere); yields the URL."""

    class Handler(QuietHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            canned = replies.get(self.path, Canned({"detail": "Not Found"}, 404))
            body, content_type = canned.encoded()
            self.send_body(canned.status, body, content_type)

        do_GET = do_POST = _answer

    with serving(Handler, "canned-http") as url:
        yield url
