"""A real HTTP server on 127.0.0.1 that records every request and answers from a script.

For clients whose requests are the thing under test (the body ``agentcanvas submit`` sends,
its headers, its retries): each request is kept (method, path, headers, JSON body) and
answered by the next entry of ``replies``; an entry of :data:`DROP` reads the request and
closes the connection without a word, as a backend that died mid-request would.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from support.canned_http import QuietHandler, serving

__all__ = ["DROP", "Recorded", "Recording", "recording_server"]

DROP = None
"""A reply that is no reply: the connection is closed once the request is read."""


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Recording:
    """The server's URL and what it has received so far."""

    url: str
    requests: list[Recorded] = field(default_factory=list)


@contextmanager
def recording_server(
    replies: Sequence[tuple[int, Any] | None], repeat_last: bool = True
) -> Iterator[Recording]:
    """Serve ``replies`` in order ((status, JSON) or DROP), the last one again once they
    run out (``repeat_last``); yields the Recording."""
    lock = threading.Lock()
    recording = Recording(url="")

    class Handler(QuietHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            with lock:
                seen = len(recording.requests)
                recording.requests.append(
                    Recorded(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        json.loads(raw) if raw else None,
                    )
                )
            if seen < len(replies):
                reply = replies[seen]
            elif repeat_last and replies:
                reply = replies[-1]
            else:
                reply = (500, {"detail": "no reply scripted"})
            if reply is DROP:
                self.close_connection = True
                self.connection.close()
                return
            status, payload = reply
            self.send_body(status, json.dumps(payload).encode(), "application/json")

        do_GET = do_POST = _answer

    with serving(Handler, "recording-http") as url:
        recording.url = url
        yield recording
