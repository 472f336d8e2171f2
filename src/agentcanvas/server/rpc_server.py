"""The call socket's serving side: `RpcServer` answers framed requests (`rpc_framing`).

The server listens on one socket (an abstract unix socket ``ipc://@agentcanvas-...`` on
Linux, else ``tcp://127.0.0.1:PORT``; advertised as ``"call"`` by ``/health`` and
``call_endpoint`` by ``/manifest``) and gives every connection its own thread, which answers
its requests in order. ``op`` is one of the server's handlers (``call``, ``evict``,
``panel_episode``).

Where a request runs: on the connection's thread when the op has a *direct* handler that
takes it (a replicated node set's synchronous nodes and its panel: one caller, so no thread
hop between the socket and the simulator), otherwise on the event loop (the async handler:
batched and async nodes, and every op of a shared node set).

A handler's exception is answered as ``{"id", "err": protocol.RpcError}`` (its type, message
and status: `protocol.status_of`); the server lives on. A request sent ``after`` another
runs only if that one succeeded on the same connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from agentcanvas import envsettings, wire
from agentcanvas.errors import UserInputError, WireError
from agentcanvas.server import protocol
from agentcanvas.server.rpc_framing import (
    FramingError,
    MessageReader,
    encode,
    send_message,
    set_nodelay,
)

__all__ = ["ON_LOOP", "DirectHandler", "Handler", "RpcServer"]

log = logging.getLogger("agentcanvas.server")

Handler = Callable[[dict[str, Any]], Coroutine[Any, Any, Any]]
DirectHandler = Callable[[dict[str, Any]], Any]
ON_LOOP: Any = object()  # a direct handler's answer: "not here, on the event loop"

_REQUESTS = wire.Decoder(protocol.RpcRequest)


def _use_ipc() -> bool:
    """Abstract unix sockets (Linux) unless ``AGENTCANVAS_CALL_TRANSPORT=tcp``."""
    return sys.platform.startswith("linux") and envsettings.CALL_TRANSPORT.get() == "ipc"


def _listen(host: str) -> tuple[socket.socket, str]:
    if _use_ipc():
        name = f"agentcanvas-{os.getpid()}-{secrets.token_hex(6)}"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind("\0" + name)
        endpoint = f"ipc://@{name}"
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((host, 0))
        endpoint = f"tcp://{host}:{sock.getsockname()[1]}"
    sock.listen(128)
    return sock, endpoint


class RpcServer:
    """The call socket; `serve` answers requests until cancelled.

    ``handlers`` run on the event loop; ``direct`` handlers (by op) run on the connection's
    thread and may answer `ON_LOOP` to hand a request to the op's event-loop handler.
    """

    def __init__(
        self,
        handlers: dict[str, Handler],
        host: str = "127.0.0.1",
        direct: dict[str, DirectHandler] | None = None,
    ) -> None:
        self.handlers = handlers
        self.direct = dict(direct or {})
        self._listener, self.endpoint = _listen(host)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False

    async def serve(self) -> None:
        """Accept connections (each on its own thread); returns only by cancellation."""
        self._loop = asyncio.get_running_loop()
        accepting = threading.Thread(target=self._accept, name="rpc-accept", daemon=True)
        accepting.start()
        try:
            await self._loop.create_future()  # until cancelled
        finally:
            self.close()

    def close(self) -> None:
        """Stop accepting and end every connection: each is shut down here and closed by
        its own thread (never a descriptor another thread may still be using)."""
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        for sock in (self._listener, *connections):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError as exc:
                if self._closed:
                    return
                log.warning("rpc accept failed (%s); accepting on", exc)  # EMFILE, say
                time.sleep(0.05)
                continue
            try:
                with self._lock:
                    if self._closed:
                        sock.close()
                        return
                    self._connections.add(sock)
                set_nodelay(sock)
                threading.Thread(
                    target=self._serve_connection, args=(sock,), name="rpc-conn", daemon=True
                ).start()
            except Exception:  # that connection is lost; the server accepts on
                log.exception("rpc connection setup failed")
                with self._lock:
                    self._connections.discard(sock)
                sock.close()

    def _serve_connection(self, sock: socket.socket) -> None:
        succeeded: int | None = None  # the id of the last request, if it succeeded
        reader = MessageReader(sock, attach=sock.family == socket.AF_UNIX)
        try:
            while True:
                try:
                    frames = reader.recv()
                except FramingError as exc:  # the stream is out of step: answer, then drop it
                    bad = UserInputError(f"not an rpc message: {exc}")
                    send_message(sock, wire.encode({"id": None, "err": protocol.rpc_error(bad)}))
                    return
                reply, succeeded = self._answer(frames, succeeded)
                send_message(sock, reply, reader.shared)
        except (EOFError, OSError):  # the client went away, or we are closing
            return
        finally:
            with self._lock:
                self._connections.discard(sock)
            sock.close()

    def _answer(
        self, frames: list[memoryview], succeeded: int | None
    ) -> tuple[list[wire.Buffer], int | None]:
        """One request's reply, and its id if it succeeded; never raises for what the request
        or its handler did. ``succeeded``: the id of the connection's previous request if it
        succeeded (a request ``after`` another runs only then)."""
        request_id = None
        try:
            try:
                request = _REQUESTS.decode(frames)
            except WireError as exc:
                raise UserInputError(f"not an rpc request: {exc}") from exc
            request_id = request.id
            if request.after is not None and request.after != succeeded:
                raise UserInputError(f"not run: request {request.after} before it failed")
            result = self._run(request.op, request.args)
            try:
                return encode({"id": request_id, "ok": result}), request_id
            except WireError:  # name the bad value's path inside the result, not our envelope
                encode(result)
                raise
        except Exception as exc:
            if not isinstance(exc, UserInputError):
                log.error("rpc %s failed", request_id, exc_info=exc)
            return wire.encode({"id": request_id, "err": protocol.rpc_error(exc)}), None

    def _run(self, op: str, args: dict[str, Any]) -> Any:
        direct = self.direct.get(op)
        if direct is not None:
            result = direct(args)
            if result is not ON_LOOP:
                return result
        handler = self.handlers.get(op)
        if handler is None:
            raise UserInputError(f"unknown op {op!r}")
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(handler(args), self._loop).result()
