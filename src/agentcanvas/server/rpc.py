"""The per-call path to a node-set server: ZeroMQ ROUTER/DEALER, msgpack + raw array frames.

The server binds one ROUTER socket (`RpcServer`: an abstract unix socket
``ipc://@agentcanvas-...`` on Linux, else ``tcp://127.0.0.1:PORT``; advertised as ``"call"``
by ``/health``) and serves every request in its own task, so a shared server (a batched
model) takes requests from many clients at once. A client (`RpcClient`) keeps a small
pool of DEALER sockets, one request in flight on each. A request is one multipart message::

    [wire header {"id", "op", "args"}, array frames...]  ->  [wire header {"id", "ok" | "err"}, ...]

with ``op`` one of the server's handlers (``call``, ``evict``, ``panel_episode``); the headers
are `protocol.RpcRequest` and `protocol.RpcReply`, and a client decodes a reply straight into
the struct of its op's reply (one pass, no dict). Arrays travel as their own frames, never
copied on the way out (`agentcanvas.wire`).

Every request has a finite deadline, and errors name the server::

    no answer within the deadline    -> ServerTimeoutError  "... did not answer OP within T s"
    the connection dropped / refused -> ServerDiedError     "... is unreachable (...)"
    the handler raised               -> UserInputError (bad input) / RemoteError (type, message)
    an answer that does not fit      -> ProtocolError       "... answered OP with a reply that
                                                             does not fit: <field>"

A dead server is noticed at once, not at the deadline: each DEALER has a ZeroMQ socket monitor
whose ``DISCONNECTED`` / ``CONNECT_RETRIED`` events end the wait.

Sockets are plain (synchronous) pyzmq sockets wired into the asyncio loop by their FDs and
``EVENTS`` (pyzmq's documented event-loop integration), not ``zmq.asyncio``: on one CPU that
halves a round trip (``bench/rpc.py``; zmq.asyncio's per-message bookkeeping cost ~150 µs there).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import zmq
import zmq.utils.monitor

from agentcanvas import envsettings, wire
from agentcanvas.errors import (
    RemoteError,
    ServerDiedError,
    ServerError,
    ServerTimeoutError,
    UserInputError,
    WireError,
)
from agentcanvas.server import protocol

__all__ = ["Handler", "RpcClient", "RpcServer", "error_reply"]

log = logging.getLogger("agentcanvas.server")

MAX_IDLE_SOCKETS = 64
_DEATH_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CLOSED
_EVENT_NAMES: dict[int, str] = {
    zmq.EVENT_DISCONNECTED: "disconnected",
    zmq.EVENT_CONNECT_RETRIED: "connection refused",
    zmq.EVENT_CLOSED: "connection closed",
}

Handler = Callable[[dict[str, Any]], Awaitable[Any]]
Reply = TypeVar("Reply")

_REQUESTS = wire.Decoder(protocol.RpcRequest)
_reply_decoders: dict[Any, wire.Decoder[Any]] = {}


def _replies(kind: type[Reply]) -> wire.Decoder[protocol.RpcReply[Reply]]:
    """The decoder of rpc replies carrying ``kind``, built once per kind."""
    decoder = _reply_decoders[kind] = wire.Decoder(protocol.rpc_reply(kind))
    return decoder


def _readable(sock: zmq.Socket[Any]) -> bool:
    """Whether a message waits (the FD only signals edges; EVENTS tells the state)."""
    return bool(int(sock.getsockopt(zmq.EVENTS)) & zmq.POLLIN)


def _use_ipc() -> bool:
    """Abstract unix sockets (Linux) unless ``AGENTCANVAS_CALL_TRANSPORT=tcp``."""
    return sys.platform.startswith("linux") and envsettings.CALL_TRANSPORT.get() == "ipc"


def error_reply(exc: BaseException) -> protocol.RpcError:
    """How a server reports a handler's exception: type, message, and 400 for bad input."""
    status = 400 if isinstance(exc, UserInputError) else 500
    return protocol.RpcError(type(exc).__name__, str(exc), status)


# --- server ---------------------------------------------------------------------------------


class RpcServer:
    """A ROUTER socket; `serve` answers requests until cancelled.

    The endpoint is an abstract unix socket (``ipc://@agentcanvas-...``, Linux: no file to
    clean up) or, with ``AGENTCANVAS_CALL_TRANSPORT=tcp`` or elsewhere, ``tcp://HOST:PORT``.
    """

    def __init__(self, handlers: dict[str, Handler], host: str = "127.0.0.1") -> None:
        self.handlers = handlers
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        if _use_ipc():
            self.endpoint = f"ipc://@agentcanvas-{os.getpid()}-{secrets.token_hex(6)}"
            self._socket.bind(self.endpoint)
        else:
            port = self._socket.bind_to_random_port(f"tcp://{host}")
            self.endpoint = f"tcp://{host}:{port}"
        self._tasks: asyncio.TaskGroup | None = None

    async def serve(self) -> None:
        """Receive requests and answer each in its own task; returns only by cancellation."""
        loop = asyncio.get_running_loop()
        fd = self._socket.fileno()
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                loop.add_reader(fd, self._drain)
                self._drain()
                await loop.create_future()  # until cancelled
        finally:
            self._tasks = None
            loop.remove_reader(fd)
            self._socket.close(linger=0)
            self._context.term()

    def _drain(self) -> None:
        """Take every waiting request (the socket's FD is edge-triggered: drain it all)."""
        while self._tasks is not None and _readable(self._socket):
            frames = self._socket.recv_multipart(zmq.NOBLOCK, copy=False)
            self._tasks.create_task(self._answer(frames))

    async def _answer(self, frames: list[zmq.Frame]) -> None:
        """One request; never raises (the TaskGroup must not end), logs nothing itself."""
        identity, request_id = frames[0], None
        try:
            try:
                request = _REQUESTS.decode([f.buffer for f in frames[1:]])
            except WireError as exc:
                raise UserInputError(f"not an rpc request: {exc}") from exc
            request_id = request.id
            handler = self.handlers.get(request.op)
            if handler is None:
                raise UserInputError(f"unknown op {request.op!r}")
            result = await handler(request.args)
            try:
                out = wire.encode({"id": request_id, "ok": result})
            except WireError:  # name the bad value's path inside the result, not our envelope
                wire.encode(result)
                raise
        except Exception as exc:
            if not isinstance(exc, UserInputError):
                log.error("rpc %s failed", request_id, exc_info=exc)
            out = wire.encode({"id": request_id, "err": error_reply(exc)})
        with contextlib.suppress(zmq.ZMQError):  # the client went away: nobody to answer
            self._socket.send_multipart([identity, *out], zmq.NOBLOCK, copy=False)
        self._drain()  # a send may have consumed the FD's edge for waiting requests


# --- client ---------------------------------------------------------------------------------


class _Died(Exception):
    """The monitor saw the connection drop or refused."""


class _Channel:
    """One DEALER socket and its monitor, wired into the event loop by their FDs.

    `dead` completes when the monitor reports the connection dropped or refused. ZeroMQ FDs
    are edge-triggered, so every callback drains what is there and every send re-checks.
    """

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> None:
        self.loop = asyncio.get_running_loop()
        self.socket = context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.monitor = self.socket.get_monitor_socket(_DEATH_EVENTS)
        self.dead: asyncio.Future[list[bytes]] = self.loop.create_future()
        self._answer: asyncio.Future[list[zmq.Frame]] | None = None
        self._fds = (self.socket.fileno(), self.monitor.fileno())
        self.loop.add_reader(self._fds[0], self._on_socket)
        self.loop.add_reader(self._fds[1], self._on_monitor)
        self.socket.connect(endpoint)

    def usable(self) -> bool:
        self._on_monitor()
        return not self.dead.done()

    async def exchange(self, frames: list[wire.Buffer], timeout_s: float) -> list[zmq.Frame]:
        """Send, then wait for the answer, the connection's death or the deadline."""
        answer = self._answer = self.loop.create_future()
        try:
            self.socket.send_multipart(frames, zmq.NOBLOCK, copy=False)
        except zmq.Again as exc:  # no pipe to the server: it is not there
            raise _Died() from exc
        self._on_socket()
        self._on_monitor()
        done, _ = await asyncio.wait(
            (answer, self.dead), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        self._answer = None
        if answer in done:
            reply: list[zmq.Frame] = answer.result()
            return reply
        answer.cancel()
        if self.dead.done():
            raise _Died()
        raise TimeoutError()

    def _on_socket(self) -> None:
        while _readable(self.socket):
            frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            if self._answer is not None and not self._answer.done():
                self._answer.set_result(frames)  # else: a late answer nobody waits for

    def _on_monitor(self) -> None:
        while _readable(self.monitor):
            event = self.monitor.recv_multipart(zmq.NOBLOCK)
            if not self.dead.done():
                self.dead.set_result(event)

    def death(self) -> str:
        """What the monitor reported, e.g. ``disconnected``."""
        with contextlib.suppress(Exception):
            event = zmq.utils.monitor.parse_monitor_message(self.dead.result())
            code = int(event["event"])
            return _EVENT_NAMES.get(code, str(code))
        return "gone"

    def close(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(RuntimeError):  # RuntimeError: its event loop is closed
                self.loop.remove_reader(fd)
        self.dead.cancel()
        with contextlib.suppress(zmq.ZMQError):
            self.socket.disable_monitor()
        self.monitor.close(linger=0)
        self.socket.close(linger=0)


class RpcClient:
    """Requests to one server's call endpoint; `where` names the server in every error."""

    def __init__(self, endpoint: str, where: str) -> None:
        if not endpoint.startswith(("tcp://", "ipc://")):
            raise ServerError(f"{where}: {endpoint!r} is not a tcp:// or ipc:// endpoint")
        self.endpoint, self.where = endpoint, where
        self._ids = itertools.count(1)
        self._idle: list[_Channel] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._context: zmq.Context[zmq.Socket[bytes]] | None = None

    async def request(
        self, op: str, args: dict[str, Any], what: str, timeout_s: float, reply: type[Reply]
    ) -> Reply:
        """Send ``op(args)`` and return the handler's value as ``reply`` (a msgspec type: see
        `protocol`); errors as in the module doc."""
        request_id = next(self._ids)
        try:
            frames = wire.encode({"id": request_id, "op": op, "args": args})
        except WireError as exc:
            raise UserInputError(f"cannot send {what} to {self.where}: {exc}") from exc
        channel = self._take()
        try:
            answer = await channel.exchange(frames, timeout_s)
        except TimeoutError as exc:
            channel.close()  # its answer may still come: the socket is no longer in step
            raise ServerTimeoutError(
                f"{self.where} did not answer {what} within {timeout_s:g} s"
            ) from exc
        except _Died as exc:
            death = channel.death()
            channel.close()
            raise ServerDiedError(f"{self.where} is unreachable ({death})") from exc
        except BaseException:
            channel.close()  # cancelled mid-request: its state is unknown
            raise
        self._give_back(channel)
        return self._value(answer, request_id, what, reply)

    def _value(
        self, frames: list[zmq.Frame], request_id: int, what: str, reply: type[Reply]
    ) -> Reply:
        decoder: wire.Decoder[protocol.RpcReply[Reply]]
        decoder = _reply_decoders.get(reply) or _replies(reply)
        try:
            decoded = decoder.decode([f.buffer for f in frames])
        except WireError as exc:
            raise protocol.not_fitting(self.where, what, str(exc)) from exc
        if decoded.id != request_id:
            raise protocol.not_fitting(
                self.where, what, f"the reply to request {decoded.id}, not {request_id}"
            )
        if decoded.err is not msgspec.UNSET:
            raise self._failure(decoded.err, what)
        if decoded.ok is msgspec.UNSET:
            raise protocol.not_fitting(self.where, what, "neither `ok` nor `err`")
        return decoded.ok

    def _failure(self, err: protocol.RpcError, what: str) -> ServerError | UserInputError:
        if err.status == 400:
            return UserInputError(
                f"{what}: {err.message}"
                if err.type == "UserInputError"
                else f"{what}: {err.type}: {err.message}"
            )
        return RemoteError(
            f"{self.where} failed {what}: {err.type}: {err.message}", err.type, err.message
        )

    def _take(self) -> _Channel:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # sockets belong to the loop that made them
            self.close()
            self._loop, self._context = loop, zmq.Context.instance()
        while self._idle:
            channel = self._idle.pop()
            if channel.usable():
                return channel
            channel.close()
        assert self._context is not None
        return _Channel(self._context, self.endpoint)

    def _give_back(self, channel: _Channel) -> None:
        if channel.usable() and len(self._idle) < MAX_IDLE_SOCKETS:
            self._idle.append(channel)
        else:
            channel.close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for channel in idle:
            channel.close()
