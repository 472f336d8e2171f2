"""WebSocketClient: one WebSocket client of the backend, owning its socket and its outbox.

Events are broadcast from synchronous code (the scheduler's tick, a runner's callback), which
must never wait for a slow client: :meth:`WebSocketClient.offer` queues an event without
blocking and says when the outbox is full — the client stopped reading, and is dropped by
the caller. The connection's own task sends what is queued, in order (:meth:`pump`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final, Protocol

__all__ = ["OUTBOX_SIZE", "Socket", "WebSocketClient"]

log = logging.getLogger(__name__)
OUTBOX_SIZE: Final = 10_000
"""Events queued for one client at most; beyond, it has stopped reading."""


class Socket(Protocol):
    """What a client needs of its connection (Starlette's WebSocket is one)."""

    async def send_text(self, data: str) -> None: ...


class WebSocketClient:
    """A connected client: its socket, and the events still to be sent to it."""

    def __init__(self, socket: Socket, max_queued: int = OUTBOX_SIZE) -> None:
        self.socket = socket
        self._outbox: asyncio.Queue[str] = asyncio.Queue(maxsize=max_queued)

    @property
    def pending(self) -> int:
        """Events queued and not sent yet."""
        return self._outbox.qsize()

    def offer(self, text: str) -> bool:
        """Queue ``text`` for the client without waiting; False when its outbox is full."""
        try:
            self._outbox.put_nowait(text)
        except asyncio.QueueFull:
            return False
        return True

    async def pump(self) -> None:
        """Send the queued events in order until cancelled, or until the connection fails
        (logged: the client went away while an event was on its way)."""
        try:
            while True:
                await self.socket.send_text(await self._outbox.get())
        except Exception as exc:  # the connection went away under us
            log.info("WebSocket client gone while sending: %s: %s", type(exc).__name__, exc)
