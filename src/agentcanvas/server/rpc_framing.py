"""The call socket's framing: messages of wire frames on a byte stream, and its endpoints.

A node-set server answers per-call requests on one stream socket (`rpc_server.RpcServer`);
a proxy calls it through `rpc_client.RpcClient`. Both speak what this module defines. A
message is a list of wire frames (`agentcanvas.wire`)::

    [wire header {"id", "op", "args"}, array frames...]  ->  [wire header {"id", "ok" | "err"}, ...]

framed on the stream as ``u32 n | u64 len_1 .. len_n | frame_1 .. frame_n`` (little endian;
`pack`), the way ``multiprocessing.connection`` (Gymnasium's ``AsyncVectorEnv`` pipes) frames
its messages, with one length per frame so arrays travel as their own frames, never copied
on the way out. The headers are `protocol.RpcRequest` and `protocol.RpcReply`.

An endpoint is ``ipc://@NAME`` (an abstract unix socket, Linux) or ``tcp://HOST:PORT``. On
a unix socket the big arrays of requests and replies go through the connection's shared
memory instead of the stream (`rpc_shared`: flags in the count, an attach as the
connection's first message).

Why not a messaging library: this path was ZeroMQ (DEALER/ROUTER) until measured. libzmq
moves every message through I/O threads on both sides — six thread wake-ups per round trip
where a pipe has two — and no library we know has a thread-free path. The framing above is
three fields; the sockets are the standard library's (asyncio transports in the client,
blocking sockets in the server).
"""

from __future__ import annotations

import select
import socket
import struct
from collections.abc import Sequence
from typing import Any

from agentcanvas import wire
from agentcanvas.errors import WireError
from agentcanvas.server import rpc_shared

__all__ = [
    "COUNT",
    "MAX_FRAMES",
    "MAX_MESSAGE_BYTES",
    "FramingError",
    "MessageReader",
    "blocking_connection",
    "encode",
    "endpoint_address",
    "frame_count",
    "frame_lengths",
    "pack",
    "packed",
    "recv_message",
    "send_message",
    "set_nodelay",
    "split_frames",
]

MAX_FRAMES = 4096  # frames of one message (a header and its arrays); its head fits a read
MAX_MESSAGE_BYTES = 1 << 34  # 16 GiB: past it a length field is garbage, not a message
COUNT = struct.Struct("<I")  # the frame count that starts every message
_IOV_MAX = 1024  # buffers one sendmsg takes (Linux's IOV_MAX)


class FramingError(WireError):
    """Bytes on a call socket that are not a framed message (the stream is out of step)."""


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
    return [_head(0, [memoryview(f).nbytes for f in frames]), *frames]


_HEADS: dict[int, struct.Struct] = {}  # by frame count


def _head(flags: int, sizes: list[int]) -> bytes:
    """A message's count (with `rpc_shared` ``flags``) and frame lengths."""
    head = _HEADS.get(len(sizes))
    if head is None:
        head = _HEADS[len(sizes)] = struct.Struct(f"<I{len(sizes)}Q")
    return head.pack(len(sizes) | flags, *sizes)


def frame_count(raw: wire.Buffer, offset: int = 0, accepted: int = 0) -> tuple[int, int]:
    """The frame count at a message's start (at ``offset`` in ``raw``) and the `rpc_shared`
    flags beside it; FramingError for a flag not in ``accepted`` (shared memory this
    connection has not set up) or a count out of range."""
    (word,) = COUNT.unpack_from(raw, offset)
    flags, count = word & rpc_shared.REPLY_FLAGS, word & ~rpc_shared.REPLY_FLAGS
    if flags & ~accepted:
        raise FramingError(
            f"a message flagged for shared memory this connection has not ({word:#x})"
        )
    if not 1 <= count <= MAX_FRAMES:
        raise FramingError(f"a message of {count} frames (1 to {MAX_FRAMES})")
    return count, flags


_LENGTHS: dict[int, struct.Struct] = {}  # by frame count (at most MAX_FRAMES of them)


def frame_lengths(count: int, raw: wire.Buffer, offset: int = 0) -> list[int]:
    """The ``count`` frame lengths after the count, at ``offset`` in ``raw`` (FramingError
    past MAX_MESSAGE_BYTES)."""
    lengths_of = _LENGTHS.get(count)
    if lengths_of is None:
        lengths_of = _LENGTHS[count] = struct.Struct(f"<{count}Q")
    lengths = list(lengths_of.unpack_from(raw, offset))
    if sum(lengths) > MAX_MESSAGE_BYTES:
        raise FramingError(f"a message of {sum(lengths)} bytes (limit {MAX_MESSAGE_BYTES})")
    return lengths


def split_frames(body: bytearray, lengths: list[int]) -> list[memoryview]:
    """A message's body cut into its frames (views, no copy)."""
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
    count, _ = frame_count(bytes(_recv_exactly(sock, COUNT.size)))
    lengths = frame_lengths(count, bytes(_recv_exactly(sock, 8 * count)))
    return split_frames(_recv_exactly(sock, sum(lengths)), lengths)


class MessageReader:
    """Messages from one blocking socket, read ahead into a buffer of its own: a small
    message (or two sent in one write) costs one ``recv`` where `recv_message` makes three
    (count, lengths, body); a body that outgrows the buffer is read straight into its own.
    EOFError at the stream's end, FramingError for garbage, as `recv_message`.

    On a blocking socket, each read (the attach's first one apart) waits with ``poll`` for
    input, then reads: a thread asleep in ``recv`` on a unix stream socket is woken whenever
    the peer reads what it was sent (the socket's one wait queue serves both directions;
    `poll` waits for input alone), so a server asleep in ``recv`` after its reply was woken
    for nothing once a round trip, and the caller paid for the cross-CPU wake-up in its own
    ``recv`` (measured in docs/cluster.md, "Head cost"). A socket with a timeout already
    polls."""

    def __init__(self, sock: socket.socket, size: int = 64 * 1024, attach: bool = False) -> None:
        self.sock = sock
        self._input: select.poll | None = None  # waits for input alone (blocking socket)
        if sock.gettimeout() is None and hasattr(select, "poll"):
            self._input = select.poll()
            self._input.register(sock, select.POLLIN)
        self._buf = bytearray(max(size, COUNT.size + 8 * MAX_FRAMES))  # a head always fits
        self._start = self._end = 0  # the bytes read and not used yet
        # ``attach``: the stream may start with an attach (`rpc_shared`), whose descriptor
        # the first read takes; `shared` is then the connection's mapped memory.
        self.shared: rpc_shared.SharedSlots | None = None
        self._first_read = self._first_message = attach
        self._fds: list[int] = []

    def recv(self) -> list[memoryview]:
        """The next message."""
        if self._first_message:
            self._first_message = False
            try:
                self._have(COUNT.size)
                self._attach()
            finally:
                rpc_shared.close_fds(self._fds)  # what came without an attach, or too short
                self._fds = []
        self._have(COUNT.size)
        start = self._start
        accepted = rpc_shared.SHARED_FLAGS if self.shared is not None else 0
        count, flags = frame_count(self._buf, start, accepted)
        slot = rpc_shared.slot_of(flags)  # where its arrays are, when in a request slot
        head = COUNT.size + 8 * count
        self._have(head)
        start = self._start
        lengths = frame_lengths(count, self._buf, start + COUNT.size)
        arrays: list[memoryview] | None = None
        if slot is not None:  # the stream carries the header alone
            arrays = self.shared.frames(slot, lengths[1:], requests=True) if self.shared else None
            if arrays is None:
                raise FramingError("a request in shared memory that does not fit its slot")
        size = sum(lengths) if arrays is None else lengths[0]
        if head + size <= len(self._buf):
            self._have(head + size)
            start = self._start
            body = self._buf[start + head : start + head + size]  # a slice is a copy
            self._start = start + head + size
        else:
            body = bytearray(size)  # a big one: what is here, then the rest straight into it
            got = self._end - self._start - head
            body[:got] = self._buf[self._start + head : self._end]
            self._start = self._end = 0
            view = memoryview(body)
            while got < size:
                read = self._read(view[got:])
                if read == 0:
                    raise EOFError("the peer closed the connection")
                got += read
        return split_frames(body, lengths) if arrays is None else [memoryview(body), *arrays]

    def _attach(self) -> None:
        """Map the memory of an attach at the stream's start (`rpc_shared`); the caller
        closes whatever descriptors this leaves."""
        (word,) = COUNT.unpack_from(self._buf, self._start)
        if word != rpc_shared.ATTACH:
            return
        self._have(COUNT.size + 8)
        head = bytes(self._buf[self._start + COUNT.size : self._start + COUNT.size + 8])
        self._start += COUNT.size + 8
        fds, self._fds = self._fds, []
        self.shared = rpc_shared.SharedSlots.received(fds, head)

    def _read(self, view: memoryview) -> int:
        """Bytes into ``view`` (0 at the stream's end), read once ``poll`` says input is
        there (class docstring: no wake-up when the peer reads)."""
        if self._input is not None:
            self._input.poll()  # at once when input is there
        return self.sock.recv_into(view)

    def _have(self, n: int) -> None:
        """At least ``n`` unused bytes in the buffer (n fits it); EOFError at the end."""
        if self._end - self._start >= n:
            return
        if self._start + n > len(self._buf):  # move what is left to the front
            rest = self._end - self._start
            self._buf[:rest] = self._buf[self._start : self._end]
            self._start, self._end = 0, rest
        view = memoryview(self._buf)
        try:
            if self._first_read:  # the descriptor of an attach comes with its bytes
                self._first_read = False
                read, ancillary, _, _ = self.sock.recvmsg_into(
                    [view[self._end :]], rpc_shared.ANCILLARY_BYTES, socket.MSG_CMSG_CLOEXEC
                )
                self._fds = rpc_shared.fds_of(ancillary)
                if read == 0:
                    raise EOFError("the peer closed the connection")
                self._end += read
            while self._end - self._start < n:
                read = self._read(view[self._end :])
                if read == 0:
                    raise EOFError("the peer closed the connection")
                self._end += read
        finally:
            view.release()


def packed(
    frames: Sequence[wire.Buffer],
    shared: rpc_shared.SharedSlots | None = None,
    requests: bool = False,
) -> tuple[list[wire.Buffer], int]:
    """The buffers that put ``frames`` on a stream as one message, and their size in bytes;
    with ``shared`` (the connection's memory), its array frames go through the next slot of
    the sender's side (``requests``: the client's) when they come to `rpc_shared.MIN_BYTES`
    and fit one."""
    sizes = [memoryview(f).nbytes for f in frames]
    slot = None
    if shared is not None and len(sizes) > 1 and sum(sizes) - sizes[0] >= rpc_shared.MIN_BYTES:
        slot = shared.put(frames[1:], sizes[1:], requests)
    mapped = rpc_shared.MAPPED if shared is not None and not requests else 0  # a reply: say so
    if slot is None:
        return [_head(mapped, sizes), *frames], 4 + 8 * len(sizes) + sum(sizes)
    flags = mapped | rpc_shared.SHARED | (rpc_shared.SHARED_SLOT if slot else 0)
    return [_head(flags, sizes), frames[0]], 4 + 8 * len(sizes) + sizes[0]


def send_message(
    sock: socket.socket,
    frames: Sequence[wire.Buffer],
    shared: rpc_shared.SharedSlots | None = None,
) -> None:
    """One message to a blocking socket, in one ``sendmsg`` when the kernel takes it all
    (at most IOV_MAX buffers a call). With ``shared`` (the connection's memory: a reply),
    its array frames go through the memory when they fit a slot (`packed`)."""
    buffers, total = packed(frames, shared)
    sent = sock.sendmsg(buffers[:_IOV_MAX])
    if sent == total:  # the usual case: all of it at once
        return
    views = [memoryview(b).cast("B") for b in buffers]
    while True:
        while views and sent >= views[0].nbytes:
            sent -= views[0].nbytes
            views.pop(0)
        if not views:
            return
        if sent:
            views[0] = views[0][sent:]
        sent = sock.sendmsg(views[:_IOV_MAX])


def set_nodelay(sock: socket.socket) -> None:
    """TCP_NODELAY on a TCP socket (a request is one write: never wait to coalesce it)."""
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def endpoint_address(endpoint: str) -> tuple[socket.AddressFamily, Any]:
    """The socket family and address of an ``ipc://`` or ``tcp://`` endpoint."""
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://") :]
        return socket.AF_UNIX, "\0" + path[1:] if path.startswith("@") else path
    host, _, port = endpoint[len("tcp://") :].rpartition(":")
    return socket.AF_INET, (host, int(port))


def blocking_connection(endpoint: str, timeout_s: float | None = None) -> socket.socket:
    """A plain blocking socket to a call endpoint (benches, tests, foreign peers): speak to
    it with `send_message` / `recv_message`."""
    family, address = endpoint_address(endpoint)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    sock.connect(address)
    set_nodelay(sock)
    return sock
