"""The per-call path to a node-set server: a stream socket, msgpack + raw array frames.

The server listens on one socket (`RpcServer`: an abstract unix socket
``ipc://@agentcanvas-...`` on Linux, else ``tcp://127.0.0.1:PORT``; advertised as ``"call"``
by ``/health`` and ``call_endpoint`` by ``/manifest``) and gives every connection its own
thread, which answers its requests in order. A client (`RpcClient`) keeps a small pool of
connections, one request in flight on each — two when a request is sent with the one that
follows it (`RpcClient.request_then`: an episode's panel request and its opening call). A
request is one message of wire frames (`agentcanvas.wire`)::

    [wire header {"id", "op", "args"}, array frames...]  ->  [wire header {"id", "ok" | "err"}, ...]

framed on the stream as ``u32 n | u64 len_1 .. len_n | frame_1 .. frame_n`` (little endian;
`pack`), the way ``multiprocessing.connection`` (Gymnasium's ``AsyncVectorEnv`` pipes) frames
its messages, with one length per frame so arrays travel as their own frames, never copied
on the way out. ``op`` is one of the server's handlers (``call``, ``evict``,
``panel_episode``); the headers are `protocol.RpcRequest` and `protocol.RpcReply`, and a
client decodes a reply straight into the struct of its op's reply (one pass, no dict).

Why not a messaging library: this path was ZeroMQ (DEALER/ROUTER) until issue 13 measured
its cost. libzmq moves every message through I/O threads on both sides — six thread
wake-ups per round trip where a pipe has two — and a blocking ping-pong cost 141–169 µs
against 14–40 µs on a unix socket (same machine, same run). No library we know has a
thread-free path, and the framing above is three fields; the sockets are the standard
library's (asyncio transports in the client, blocking sockets in the server).

Where a request runs, on the server: on the connection's thread when the op has a *direct*
handler that takes it (a replicated node set's synchronous nodes and its panel: one caller,
so no thread hop between the socket and the simulator), otherwise on the event loop (the
async handler: batched and async nodes, and every op of a shared node set, as before).

Every request has a finite deadline, and errors name the server::

    no answer within the deadline    -> ServerTimeoutError  "... did not answer OP within T s"
    the connection dropped / refused -> ServerDiedError     "... is unreachable (...)"
    the handler raised               -> UserInputError (bad input) / RemoteError (type, message)
    an answer that does not fit      -> ProtocolError       "... answered OP with a reply that
                                                             does not fit: <field>"

A dead server is noticed at once, not at the deadline: its connections close (end of
stream, or a refused connect), which ends the wait.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import secrets
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

import msgspec

from agentcanvas import envsettings, wire
from agentcanvas.errors import (
    ProtocolError,
    RemoteError,
    ServerDiedError,
    ServerError,
    ServerTimeoutError,
    UserInputError,
    WireError,
)
from agentcanvas.server import protocol

__all__ = [
    "ON_LOOP",
    "DirectHandler",
    "FramingError",
    "Handler",
    "RpcClient",
    "RpcServer",
    "blocking_connection",
    "encode",
    "error_reply",
    "pack",
    "recv_message",
    "send_message",
]

log = logging.getLogger("agentcanvas.server")

MAX_IDLE_CONNECTIONS = 64
SCRATCH_BYTES = 256 * 1024  # a client connection's read buffer
MAX_FRAMES = 4096  # frames of one message (a header and its arrays); its head fits SCRATCH
MAX_MESSAGE_BYTES = 1 << 34  # 16 GiB: past it a length field is garbage, not a message
_COUNT = struct.Struct("<I")
_IOV_MAX = 1024  # buffers one sendmsg takes (Linux's IOV_MAX)

Handler = Callable[[dict[str, Any]], Coroutine[Any, Any, Any]]
DirectHandler = Callable[[dict[str, Any]], Any]
ON_LOOP: Any = object()  # a direct handler's answer: "not here, on the event loop"
Reply = TypeVar("Reply")
Then = TypeVar("Then")

_REQUESTS = wire.Decoder(protocol.RpcRequest)
_reply_decoders: dict[Any, wire.Decoder[Any]] = {}


class FramingError(WireError):
    """Bytes on a call socket that are not a framed message (the stream is out of step)."""


def _replies(kind: type[Reply]) -> wire.Decoder[protocol.RpcReply[Reply]]:
    """The decoder of rpc replies carrying ``kind``, built once per kind."""
    decoder = _reply_decoders[kind] = wire.Decoder(protocol.rpc_reply(kind))
    return decoder


def _use_ipc() -> bool:
    """Abstract unix sockets (Linux) unless ``AGENTCANVAS_CALL_TRANSPORT=tcp``."""
    return sys.platform.startswith("linux") and envsettings.CALL_TRANSPORT.get() == "ipc"


def error_reply(exc: BaseException) -> protocol.RpcError:
    """How a server reports a handler's exception: type, message, and 400 for bad input."""
    status = 400 if isinstance(exc, UserInputError) else 500
    return protocol.RpcError(type(exc).__name__, str(exc), status)


# --- framing --------------------------------------------------------------------------------


def encode(obj: object) -> list[wire.Buffer]:
    """`wire.encode`, refusing a message of more than MAX_FRAMES frames (WireError), which
    the other side could not read."""
    frames = wire.encode(obj)
    if len(frames) > MAX_FRAMES:
        raise WireError(
            f"{len(frames) - 1} arrays of {wire.INLINE_MAX_BYTES} bytes or more in "
            f"one message (at most {MAX_FRAMES - 1})"
        )
    return frames


def pack(frames: Sequence[wire.Buffer]) -> list[wire.Buffer]:
    """The buffers that put ``frames`` on a stream as one message (the frames uncopied)."""
    sizes = [memoryview(f).nbytes for f in frames]
    head = _COUNT.pack(len(sizes)) + struct.pack(f"<{len(sizes)}Q", *sizes)
    return [head, *frames]


def _lengths(count: int, raw: bytes) -> list[int]:
    lengths = list(struct.unpack(f"<{count}Q", raw))
    if sum(lengths) > MAX_MESSAGE_BYTES:
        raise FramingError(f"a message of {sum(lengths)} bytes (limit {MAX_MESSAGE_BYTES})")
    return lengths


def _count(raw: bytes) -> int:
    (count,) = _COUNT.unpack(raw)
    if not 1 <= count <= MAX_FRAMES:
        raise FramingError(f"a message of {count} frames (1 to {MAX_FRAMES})")
    return int(count)


def _split(body: bytearray, lengths: list[int]) -> list[memoryview]:
    view, frames, at = memoryview(body), [], 0
    for length in lengths:
        frames.append(view[at : at + length])
        at += length
    return frames


def _recv_exactly(sock: socket.socket, n: int) -> bytearray:
    """``n`` bytes; EOFError when the stream ends first (at a message boundary or not)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        read = sock.recv_into(view[got:])
        if read == 0:
            raise EOFError("the peer closed the connection")
        got += read
    return buf


def recv_message(sock: socket.socket) -> list[memoryview]:
    """One message from a blocking socket (EOFError at its end, FramingError for garbage)."""
    count = _count(bytes(_recv_exactly(sock, _COUNT.size)))
    lengths = _lengths(count, bytes(_recv_exactly(sock, 8 * count)))
    return _split(_recv_exactly(sock, sum(lengths)), lengths)


def send_message(sock: socket.socket, frames: Sequence[wire.Buffer]) -> None:
    """One message to a blocking socket, in one ``sendmsg`` when the kernel takes it all
    (at most IOV_MAX buffers a call)."""
    buffers = [memoryview(b).cast("B") for b in pack(frames)]
    while buffers:
        sent = sock.sendmsg(buffers[:_IOV_MAX])
        while buffers and sent >= buffers[0].nbytes:
            sent -= buffers[0].nbytes
            buffers.pop(0)
        if buffers and sent:
            buffers[0] = buffers[0][sent:]


# --- server ---------------------------------------------------------------------------------


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


def _nodelay(sock: socket.socket) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


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
                _nodelay(sock)
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
        try:
            while True:
                try:
                    frames = recv_message(sock)
                except FramingError as exc:  # the stream is out of step: answer, then drop it
                    bad = UserInputError(f"not an rpc message: {exc}")
                    send_message(sock, wire.encode({"id": None, "err": error_reply(bad)}))
                    return
                reply, succeeded = self._answer(frames, succeeded)
                send_message(sock, reply)
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
            return wire.encode({"id": request_id, "err": error_reply(exc)}), None

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


# --- client ---------------------------------------------------------------------------------


class _Died(Exception):
    """The connection was refused or dropped."""


class _Channel(asyncio.BufferedProtocol):
    """One connection to the server; reads messages in place. Requests on it are answered
    in the order they were sent (the server serves a connection in one thread), so the
    answers wait in a queue: usually one, two when a request was sent with the next
    (`RpcClient.request_then`).

    `dead` is set (with what happened) when the connection is lost; a request waiting then
    fails at once.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.dead: str | None = None
        self._answers: collections.deque[asyncio.Future[list[memoryview]]] = collections.deque()
        self._scratch = bytearray(SCRATCH_BYTES)  # reads land here until a body outgrows it
        self._filled = 0
        self._body: bytearray | None = None  # a message too big for the scratch, filling in
        self._lengths: list[int] = []
        self._got = 0

    # Reading: each recv lands in the scratch buffer, where whole messages are cut out (one
    # recv per small message); a message bigger than the scratch gets a buffer of its own
    # and is read straight into it (no copy of a big array).
    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return memoryview(self._body)[self._got :]
        return memoryview(self._scratch)[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._body is not None:
                self._got += nbytes
                if self._got == len(self._body):
                    body, self._body = self._body, None
                    self._deliver(_split(body, self._lengths))
                return
            self._filled += nbytes
            self._cut_messages()
        except FramingError as exc:
            self._fail(f"sent bytes that are not a message ({exc})")

    def _cut_messages(self) -> None:
        """Deliver every whole message in the scratch buffer; start a big one's own buffer."""
        view, at = memoryview(self._scratch), 0
        try:
            while self._filled - at >= _COUNT.size:
                count = _count(bytes(view[at : at + _COUNT.size]))
                head = _COUNT.size + 8 * count
                if self._filled - at < head:
                    break
                lengths = _lengths(count, bytes(view[at + _COUNT.size : at + head]))
                size = sum(lengths)
                have = self._filled - at - head
                if have >= size:  # whole: copied out, so the scratch can be reused
                    body = bytearray(view[at + head : at + head + size])
                    at += head + size
                    self._deliver(_split(body, lengths))
                    continue
                if head + size > len(self._scratch):  # read the rest straight into its body
                    self._body, self._lengths, self._got = bytearray(size), lengths, have
                    self._body[:have] = view[at + head : self._filled]
                    at = self._filled
                break
        finally:
            rest = self._filled - at
            if at and rest:
                self._scratch[:rest] = bytes(view[at : self._filled])
            self._filled = rest
            view.release()

    def _deliver(self, frames: list[memoryview]) -> None:
        if not self._answers:  # an answer nobody asked for: the connection is out of step
            self._fail("sent an answer to no request")
            return
        answer = self._answers.popleft()
        if not answer.done():
            answer.set_result(frames)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail("connection closed" if exc is None else f"disconnected: {exc}")

    def eof_received(self) -> bool:
        self._fail("disconnected")
        return False

    def _fail(self, what: str) -> None:
        if self.dead is None:
            self.dead = what
        while self._answers:
            answer = self._answers.popleft()
            if not answer.done():
                answer.set_exception(_Died())
        if self.transport is not None:
            self.transport.close()

    def usable(self) -> bool:
        return self.dead is None and self.transport is not None and not self.transport.is_closing()

    def idle(self) -> bool:
        """Open, with no answer still to come: fit for the pool."""
        return self.usable() and not self._answers

    def send(self, *messages: list[wire.Buffer]) -> list[asyncio.Future[list[memoryview]]]:
        """Send the messages in one write; their answers' futures, in the same order."""
        if not self.usable():
            raise _Died()
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        answers = [loop.create_future() for _ in messages]
        self._answers.extend(answers)
        self.transport.writelines([chunk for frames in messages for chunk in pack(frames)])
        return answers

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def _answer_within(
    answer: asyncio.Future[list[memoryview]], timeout_s: float
) -> list[memoryview]:
    if answer.done():  # it came while nobody waited (the second of `request_then`)
        return answer.result()
    async with asyncio.timeout(timeout_s):
        return await answer


def _address(endpoint: str) -> tuple[socket.AddressFamily, Any]:
    """The socket family and address of an ``ipc://`` or ``tcp://`` endpoint."""
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://") :]
        return socket.AF_UNIX, "\0" + path[1:] if path.startswith("@") else path
    host, _, port = endpoint[len("tcp://") :].rpartition(":")
    return socket.AF_INET, (host, int(port))


def blocking_connection(endpoint: str, timeout_s: float | None = None) -> socket.socket:
    """A plain blocking socket to a call endpoint (benches, tests, foreign peers): speak to
    it with `send_message` / `recv_message`."""
    family, address = _address(endpoint)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    sock.connect(address)
    _nodelay(sock)
    return sock


async def _connect(endpoint: str) -> _Channel:
    loop = asyncio.get_running_loop()
    try:
        family, address = _address(endpoint)
        if family == socket.AF_UNIX:
            _, channel = await loop.create_unix_connection(_Channel, address)
        else:
            _, channel = await loop.create_connection(_Channel, *address)
            transport = channel.transport
            sock = transport.get_extra_info("socket") if transport is not None else None
            if sock is not None:
                _nodelay(sock)
    except (OSError, ValueError) as exc:
        raise _Died(f"connection refused ({type(exc).__name__})") from exc
    return channel


class Pending(Generic[Then]):
    """The answer to the second request of `RpcClient.request_then`, not claimed yet.

    `value` waits for it (within its own deadline) and decodes it, exactly as `request`
    would have; `drain` waits for it and drops it; `abandon` drops it at once. Either way
    the connection goes back to the pool once it is in step, else it is closed.

    Dropping an answer that has not come yet means the server may still be running the
    request: `drain` is for when nothing may overlap it (the next episode on a replicated
    server), `abandon` for when the connection is lost or the run is being cancelled anyway.
    """

    def __init__(
        self,
        client: RpcClient,
        channel: _Channel,
        answer: asyncio.Future[list[memoryview]],
        request_id: int,
        what: str,
        reply: type[Then],
    ) -> None:
        self._client, self._channel, self._answer = client, channel, answer
        self._id, self._what, self._reply = request_id, what, reply
        self.claimed = False

    async def value(self, timeout_s: float) -> Then:
        if self.claimed:
            raise RuntimeError(f"the answer to {self._what} was claimed already")
        self.claimed = True
        return await self._client._settle(
            self._channel, self._answer, self._id, self._what, timeout_s, self._reply
        )

    async def drain(self, timeout_s: float) -> str | None:
        """Wait for the answer and drop it; None once it came (the connection is pooled
        again), else why it did not — no answer within ``timeout_s``, or the connection was
        lost — when the request may still be running on the server (closed connection)."""
        if self.claimed:
            return None
        self.claimed = True
        try:
            await _answer_within(self._answer, timeout_s)
        except TimeoutError:
            self._channel.close()
            return f"no answer within {timeout_s:g} s"
        except _Died:
            self._channel.close()
            return f"the connection was lost ({self._channel.dead or 'gone'})"
        except BaseException:
            self._channel.close()
            raise
        self._client._give_back(self._channel)
        return None

    def abandon(self) -> None:
        """Drop the answer: the connection is pooled again if the answer is in (nothing more
        to come on it), else closed (an answer still on its way would be out of step)."""
        if self.claimed:
            return
        self.claimed = True
        if self._answer.done() and not self._answer.cancelled():
            self._answer.exception()  # retrieved: no "never retrieved" warning
            self._client._give_back(self._channel)
        else:
            self._answer.cancel()
            self._channel.close()


class RpcClient:
    """Requests to one server's call endpoint; `where` names the server in every error."""

    def __init__(self, endpoint: str, where: str) -> None:
        if not endpoint.startswith(("tcp://", "ipc://")):
            raise ServerError(f"{where}: {endpoint!r} is not a tcp:// or ipc:// endpoint")
        self.endpoint, self.where = endpoint, where
        self._ids = itertools.count(1)
        self._idle: list[_Channel] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def request(
        self, op: str, args: dict[str, Any], what: str, timeout_s: float, reply: type[Reply]
    ) -> Reply:
        """Send ``op(args)`` and return the handler's value as ``reply`` (a msgspec type: see
        `protocol`); errors as in the module doc."""
        request_id, frames = self._encode(op, args, what)
        channel = await self._channel(what, timeout_s)
        (answer,) = self._send(channel, frames)
        return await self._settle(channel, answer, request_id, what, timeout_s, reply)

    async def request_then(
        self,
        first: tuple[str, dict[str, Any], str, type[Reply]],
        then: tuple[str, dict[str, Any], str, type[Then]],
        timeout_s: float,
    ) -> tuple[Reply, Pending[Then]]:
        """Send two requests, each ``(op, args, what, reply)``, in one write on one
        connection, and return the first's value with the second still to come: the server
        runs them one after the other, so the second costs no round trip of its own when it
        is claimed (`Pending.value`). Errors of the first as in `request`; the second's are
        the caller's when it claims it. The second runs only if the first succeeded (it is
        sent ``after`` it); when the server refuses the first, the second's answer (that it
        was not run) is drained before the first's error is raised."""
        first_id, first_frames = self._encode(first[0], first[1], first[2])
        then_id, then_frames = self._encode(then[0], then[1], then[2], after=first_id)
        channel = await self._channel(first[2], timeout_s)
        answer, later = self._send(channel, first_frames, then_frames)
        pending = Pending(self, channel, later, then_id, then[2], then[3])
        try:
            value = await self._settle(
                channel, answer, first_id, first[2], timeout_s, first[3], keep=True
            )
        except (UserInputError, RemoteError) as exc:  # refused in step: the second's answer
            why = await pending.drain(timeout_s)  # (not run) comes next: read it
            if why is not None:
                raise ServerTimeoutError(
                    f"{self.where}: {then[2]} after {first[2]} failed ({exc}): {why}"
                ) from exc
            raise
        except BaseException:
            pending.abandon()  # the connection is lost or out of step, or we are cancelled
            raise
        return value, pending

    def _encode(
        self, op: str, args: dict[str, Any], what: str, after: int | None = None
    ) -> tuple[int, list[wire.Buffer]]:
        request_id = next(self._ids)
        header: dict[str, Any] = {"id": request_id, "op": op, "args": args}
        if after is not None:
            header["after"] = after
        try:
            return request_id, encode(header)
        except WireError as exc:
            raise UserInputError(f"cannot send {what} to {self.where}: {exc}") from exc

    async def _channel(self, what: str, timeout_s: float) -> _Channel:
        """A pooled connection, else a new one (its connect within the deadline)."""
        channel = self._idle_channel()
        if channel is not None:
            return channel
        try:
            async with asyncio.timeout(timeout_s):
                return await _connect(self.endpoint)
        except _Died as exc:
            raise ServerDiedError(f"{self.where} is unreachable ({exc})") from exc
        except TimeoutError as exc:
            raise ServerTimeoutError(
                f"{self.where} did not accept a connection for {what} within {timeout_s:g} s"
            ) from exc

    def _send(
        self, channel: _Channel, *messages: list[wire.Buffer]
    ) -> list[asyncio.Future[list[memoryview]]]:
        try:
            return channel.send(*messages)
        except _Died as exc:
            channel.close()
            raise ServerDiedError(
                f"{self.where} is unreachable ({channel.dead or 'gone'})"
            ) from exc

    async def _settle(
        self,
        channel: _Channel,
        answer: asyncio.Future[list[memoryview]],
        request_id: int,
        what: str,
        timeout_s: float,
        reply: type[Reply],
        *,
        keep: bool = False,
    ) -> Reply:
        """Wait for ``answer`` and decode it; the connection goes back to the pool when it
        is in step and idle (``keep``: an answer is still to come on it; its owner decides)."""
        try:
            frames = await _answer_within(answer, timeout_s)
        except TimeoutError as exc:
            channel.close()  # its answer may still come: the connection is no longer in step
            raise ServerTimeoutError(
                f"{self.where} did not answer {what} within {timeout_s:g} s"
            ) from exc
        except _Died as exc:
            death = channel.dead or "gone"
            channel.close()
            raise ServerDiedError(f"{self.where} is unreachable ({death})") from exc
        except BaseException:
            channel.close()  # cancelled mid-request: its state is unknown
            raise
        try:
            value = self._value(frames, request_id, what, reply)
        except ProtocolError:
            channel.close()  # not our answer: the connection is out of step
            raise
        except BaseException:
            if not keep:
                self._give_back(channel)  # the server's own error, answered in step
            raise
        if not keep:
            self._give_back(channel)
        return value

    def _value(
        self, frames: list[memoryview], request_id: int, what: str, reply: type[Reply]
    ) -> Reply:
        decoder: wire.Decoder[protocol.RpcReply[Reply]]
        decoder = _reply_decoders.get(reply) or _replies(reply)
        try:
            decoded = decoder.decode(frames)
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

    def _idle_channel(self) -> _Channel | None:
        """A pooled connection of this event loop that is still open, or None."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections belong to the loop that made them
            self.close()
            self._loop = loop
        while self._idle:
            channel = self._idle.pop()
            if channel.usable():
                return channel
            channel.close()
        return None

    def _give_back(self, channel: _Channel) -> None:
        if channel.idle() and len(self._idle) < MAX_IDLE_CONNECTIONS:
            self._idle.append(channel)
        else:
            channel.close()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for channel in idle:
            with contextlib.suppress(RuntimeError):  # RuntimeError: its event loop is closed
                channel.close()
