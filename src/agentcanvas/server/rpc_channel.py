"""The call socket's client connections: `Channel` (one connection) and `ChannelPool`.

A channel reads framed messages (`rpc_framing`) in place and hands each to the request
waiting for it; a pool keeps a client's idle channels for its next requests. `RpcClient`
(`rpc_client`) sends through them. Errors here name the server (``where``)::

    the connection dropped / refused -> ServerDiedError    "... is unreachable (...)"
    no connection within the deadline -> ServerTimeoutError "... did not accept a connection ..."

A dead server is noticed at once, not at the deadline: its connections close (end of
stream, or a refused connect), which fails the requests waiting on them (`ChannelLost`).
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextlib
import os
import socket

from agentcanvas import wire
from agentcanvas.errors import ServerDiedError, ServerTimeoutError
from agentcanvas.server import rpc_shared
from agentcanvas.server.rpc_framing import (
    COUNT,
    FramingError,
    endpoint_address,
    frame_count,
    frame_lengths,
    pack,
    packed,
    set_nodelay,
    split_frames,
)

__all__ = [
    "MAX_IDLE_CONNECTIONS",
    "SCRATCH_BYTES",
    "Channel",
    "ChannelLost",
    "ChannelPool",
    "answer_within",
    "connect",
]

MAX_IDLE_CONNECTIONS = 64
SCRATCH_BYTES = 256 * 1024  # a connection's read buffer

Answer = asyncio.Future[list[memoryview]]


class ChannelLost(Exception):
    """The connection was refused or dropped (the pool's callers turn it into
    ServerDiedError naming the server)."""


class Channel(asyncio.BufferedProtocol):
    """One connection to the server; reads messages in place. Requests on it are answered
    in the order they were sent (the server serves a connection in one thread), so the
    answers wait in a queue: usually one, two when a request was sent with the next
    (`RpcClient.request_then`).

    `dead` is set (with what happened) when the connection is lost; a request waiting then
    fails at once.
    """

    def __init__(self, shared: rpc_shared.SharedSlots | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.dead: str | None = None
        self.shared = shared  # the memory this connection attached (`rpc_shared`), if any
        self.mapped = False  # whether the server said it mapped it (requests may use it)
        self._answers: collections.deque[Answer] = collections.deque()
        self._scratch = bytearray(SCRATCH_BYTES)  # reads land here until a body outgrows it
        self._filled = 0
        self._body: bytearray | None = None  # a message too big for the scratch, filling in
        self._lengths: list[int] = []
        self._slot: int | None = None  # the big message's slot, when its arrays are in one
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
                    self._deliver(self._frames(body, self._lengths, self._slot))
                return
            self._filled += nbytes
            self._cut_messages()
        except FramingError as exc:
            self._fail(f"sent bytes that are not a message ({exc})")

    def _cut_messages(self) -> None:
        """Deliver every whole message in the scratch buffer; start a big one's own buffer."""
        scratch, filled, at = self._scratch, self._filled, 0
        try:
            while filled - at >= COUNT.size:
                word, flags = frame_count(scratch, at, rpc_shared.REPLY_FLAGS)
                if flags & rpc_shared.MAPPED:  # the server mapped this connection's memory
                    self.mapped = self.shared is not None
                slot = rpc_shared.slot_of(flags)  # where its arrays are, when in a reply slot
                head = COUNT.size + 8 * word
                if filled - at < head:
                    break
                lengths = frame_lengths(word, scratch, at + COUNT.size)
                size = sum(lengths) if slot is None else lengths[0]  # what the stream carries
                have = filled - at - head
                if have >= size:  # whole: copied out (a slice), so the scratch can be reused
                    body = scratch[at + head : at + head + size]
                    at += head + size
                    self._deliver(
                        [memoryview(body)] if word == 1 else self._frames(body, lengths, slot)
                    )
                    continue
                if head + size > len(scratch):  # read the rest straight into its body
                    self._body, self._lengths, self._got = bytearray(size), lengths, have
                    self._slot = slot
                    self._body[:have] = scratch[at + head : filled]
                    at = filled
                break
        finally:
            rest = filled - at
            if at and rest:
                scratch[:rest] = scratch[at:filled]
            self._filled = rest

    def _frames(self, body: bytearray, lengths: list[int], slot: int | None) -> list[memoryview]:
        """A message's frames: all cut from its body, or its header from the body and its
        arrays viewed in the shared memory's ``slot`` (FramingError when they cannot be)."""
        if slot is None:
            return split_frames(body, lengths)
        arrays = self.shared.frames(slot, lengths[1:]) if self.shared is not None else None
        if arrays is None:
            raise FramingError("a reply in shared memory that this connection cannot read")
        return [memoryview(body), *arrays]

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
                answer.set_exception(ChannelLost())
        if self.transport is not None:
            self.transport.close()

    def usable(self) -> bool:
        return self.dead is None and self.transport is not None and not self.transport.is_closing()

    def idle(self) -> bool:
        """Open, with no answer still to come: fit for the pool."""
        return self.usable() and not self._answers

    def send(self, *messages: list[wire.Buffer]) -> list[Answer]:
        """Send the messages in one write; their answers' futures, in the same order."""
        if not self.usable():
            raise ChannelLost()
        assert self.transport is not None
        if self.shared is not None and len(self._answers) + len(messages) > rpc_shared.SLOTS:
            raise RuntimeError("more messages outstanding than a connection has slots")
        loop = asyncio.get_running_loop()
        answers = [loop.create_future() for _ in messages]
        self._answers.extend(answers)
        shared = self.shared if self.mapped else None
        chunks: list[wire.Buffer] = []
        for frames in messages:  # big arrays through the request slots, once mapped
            if shared is not None and len(frames) > 1:
                chunks += packed(frames, shared, requests=True)[0]
            else:
                chunks += pack(frames)
        self.transport.writelines(chunks)
        return answers

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def answer_within(answer: Answer, timeout_s: float) -> list[memoryview]:
    """The answer's frames once it came (TimeoutError past ``timeout_s``, ChannelLost when
    the connection was lost first).

    The deadline is a timer that fails the answer itself, not ``asyncio.timeout`` around
    the wait: the same outcome for the caller (a cancel of the waiting task cancels the
    answer either way) at a third of the cost on every call (no current-task lookup, no
    rescheduling, no cancel bookkeeping on the way out)."""
    if answer.done():  # it came while nobody waited (the second of `request_then`)
        return answer.result()
    timer = asyncio.get_running_loop().call_later(timeout_s, _expire, answer)
    try:
        return await answer
    finally:
        timer.cancel()
        if answer.done() and not answer.cancelled():
            answer.exception()  # retrieved, also when a cancel overtook the expiry's wake-up


def _expire(answer: Answer) -> None:
    if not answer.done():
        answer.set_exception(TimeoutError())


async def connect(endpoint: str, shared: bool = True) -> Channel:
    """A new connection to a call endpoint (ChannelLost when refused); on a unix socket with
    ``shared``, with shared memory for its messages' big arrays (`rpc_shared`)."""
    loop = asyncio.get_running_loop()
    try:
        family, address = endpoint_address(endpoint)
        if family == socket.AF_UNIX and shared:
            channel = await _connect_shared(loop, address)
        elif family == socket.AF_UNIX:
            _, channel = await loop.create_unix_connection(Channel, address)
        else:
            _, channel = await loop.create_connection(Channel, *address)
            transport = channel.transport
            sock = transport.get_extra_info("socket") if transport is not None else None
            if sock is not None:
                set_nodelay(sock)
    except (OSError, ValueError) as exc:
        raise ChannelLost(f"connection refused ({type(exc).__name__})") from exc
    return channel


async def _connect_shared(loop: asyncio.AbstractEventLoop, address: str) -> Channel:
    """A unix connection whose first message attaches a new memory file (sent with it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, address)
        shared: rpc_shared.SharedSlots | None = None
        try:
            slots, fd = rpc_shared.SharedSlots.create()
        except (OSError, ValueError):  # no memory file to be had: the arrays are streamed
            pass
        else:
            try:  # 12 bytes on a new connection: the kernel takes them at once
                ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
                attach = rpc_shared.attach_message(slots.slot_bytes)
                if sock.sendmsg([attach], ancillary) != len(attach):
                    raise OSError("the attach did not go in one write")
                shared = slots
            finally:
                os.close(fd)
        _, channel = await loop.create_unix_connection(lambda: Channel(shared), sock=sock)
    except BaseException:
        sock.close()
        raise
    return channel


class ChannelPool:
    """The idle connections of one client to one endpoint, all of one event loop (a
    connection belongs to the loop that made it); ``where`` names the server in errors."""

    def __init__(self, endpoint: str, where: str, shared: bool = False) -> None:
        self.endpoint, self.where = endpoint, where
        self.shared = shared  # whether new connections attach shared memory (`rpc_shared`)
        self._idle: list[Channel] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def idle(self) -> int:
        """How many connections wait in the pool."""
        return len(self._idle)

    async def take(self, what: str, timeout_s: float) -> Channel:
        """A pooled connection, else a new one (its connect within the deadline)."""
        channel = self._idle_channel()
        if channel is not None:
            return channel
        try:
            async with asyncio.timeout(timeout_s):
                return await connect(self.endpoint, self.shared)
        except ChannelLost as exc:
            raise ServerDiedError(f"{self.where} is unreachable ({exc})") from exc
        except TimeoutError as exc:
            raise ServerTimeoutError(
                f"{self.where} did not accept a connection for {what} within {timeout_s:g} s"
            ) from exc

    def give_back(self, channel: Channel) -> None:
        """Pool the connection if it is open and in step with no answer to come, else
        close it."""
        if channel.idle() and len(self._idle) < MAX_IDLE_CONNECTIONS:
            self._idle.append(channel)
        else:
            channel.close()

    def _idle_channel(self) -> Channel | None:
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

    def close(self) -> None:
        """Close the idle connections (those in use close when their request ends)."""
        idle, self._idle = self._idle, []
        for channel in idle:
            with contextlib.suppress(RuntimeError):  # RuntimeError: its event loop is closed
                channel.close()
