"""The call socket's shared memory: big arrays handed over in place, not streamed.

On a unix socket (``ipc://``: client and server on one host) a client's connection brings
a memory file of its own (``memfd``), sent once with the connection's first message (an
*attach*: ``u32 ATTACH | u64 slot_bytes``, the descriptor riding along as ``SCM_RIGHTS``),
sealed at its size (a server maps only a file whose size nobody can change any more). Both
ends map it: four slots, two for replies (the server writes them) and two for requests (the
client writes them). When a message's array frames (`agentcanvas.wire`: arrays of
``INLINE_MAX_BYTES`` or more) come to ``MIN_BYTES`` or more and fit a slot, its sender
copies them into the next slot of its side and streams only the header, its count flagged
``SHARED`` (and ``SHARED_SLOT`` for the second slot)::

    u32 n | SHARED [| SHARED_SLOT] | u64 len_1 .. len_n | frame_1      (frames 2..n: the slot)

A server that mapped the file says so on every reply (``MAPPED`` in its count): the client
puts a request's arrays in a slot only after that (the first request is streamed; a server
that could not map the file, or an older one, never says it, and gets them all streamed).
The receiver decodes the arrays out of the slot (`wire` copies every decoded array into
memory of its own): the server decodes a request before it runs it, the client a reply
before its connection takes another request. Two slots a side because at most two requests
(and so two replies) are ever outstanding on a connection (a request sent with the one that
follows it, `RpcClient.request_then`); a connection takes its next request only once both
answers are in and decoded or dropped, by which time the server has decoded both requests.
This is what ``AsyncVectorEnv(shared_memory=True)`` does for its observations: one copy in,
one copy out, no kernel copies of the array on the way.

Anything else travels on the stream as before: a message with less than ``MIN_BYTES`` of
arrays (measured, `bench/rpc.py`: a 12 KB array streamed costs 1-3 µs less, 48 KB the same,
96 KB 8 µs more, two 224x224x3 images 60-70 µs more), one bigger than a slot, a
connection that did not attach (TCP, a foreign peer, ``AGENTCANVAS_CALL_SHARED_MEMORY=0``,
a system without ``memfd_create``), a server that could not map the file.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import logging
import mmap
import os
import socket
import struct
from collections.abc import Sequence

from agentcanvas import envsettings, wire

__all__ = [
    "ATTACH",
    "MAPPED",
    "REPLY_FLAGS",
    "SHARED",
    "SHARED_FLAGS",
    "SHARED_SLOT",
    "SLOT_BYTES",
    "SharedSlots",
    "attach_message",
    "close_fds",
    "fds_of",
    "shared_offsets",
    "slot_of",
    "usable",
]

log = logging.getLogger("agentcanvas.server")

SHARED = 1 << 31  # a message whose array frames lie in the connection's shared memory...
SHARED_SLOT = 1 << 30  # ... in the second slot of its side
ATTACH = 1 << 29  # a connection's first message: its shared memory (no frames, no answer)
MAPPED = 1 << 28  # on a reply: the server mapped the connection's memory (requests may use it)
SHARED_FLAGS = SHARED | SHARED_SLOT
REPLY_FLAGS = SHARED | SHARED_SLOT | MAPPED
SLOT_BYTES = 1 << 20  # 1 MiB a slot: two 224x224x3 images fit; bigger replies are streamed
MIN_BYTES = 32 * 1024  # smaller arrays are streamed: cheaper than the slot's bookkeeping
SLOTS = 2  # each way: replies in slots 0 and 1, requests in slots 2 and 3 of the file
ALIGN = 64  # each frame starts on a cache line (any dtype's alignment)
_SLOT_BYTES = struct.Struct("<Q")
ANCILLARY_BYTES = socket.CMSG_SPACE(4 * 4)  # room for a few descriptors on the first read
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL  # a file of fixed size


def usable() -> bool:
    """Whether this process's connections attach shared memory (Linux ``memfd_create``,
    not turned off by ``AGENTCANVAS_CALL_SHARED_MEMORY=0``)."""
    return hasattr(os, "memfd_create") and envsettings.CALL_SHARED_MEMORY.get() == "1"


def slot_of(flags: int) -> int | None:
    """The slot a message's arrays are in, by its count's flags; None when it streams them."""
    if not flags & SHARED:
        return None
    return 1 if flags & SHARED_SLOT else 0


def shared_offsets(lengths: Sequence[int], slot_bytes: int) -> list[int] | None:
    """Where each frame of ``lengths`` starts in a slot (every one on an ALIGN boundary), or
    None when they do not all fit ``slot_bytes``."""
    offsets, at = [], 0
    for length in lengths:
        offsets.append(at)
        at += length
        if at > slot_bytes:
            return None
        at = -(-at // ALIGN) * ALIGN
    return offsets


def attach_message(slot_bytes: int) -> bytes:
    """The bytes of an attach (its descriptor is sent with them)."""
    return struct.pack("<I", ATTACH) + _SLOT_BYTES.pack(slot_bytes)


def close_fds(fds: Sequence[int]) -> None:
    """Close descriptors that came with a message."""
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def fds_of(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The descriptors that came with a ``recvmsg`` (SCM_RIGHTS)."""
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.extend(array.array("i", data[: len(data) - len(data) % 4]))
    return fds


class SharedSlots:
    """The slots of one connection's memory file (two for replies, two for requests), mapped
    by the client that made it and by the server it was sent to."""

    def __init__(self, fd: int, slot_bytes: int) -> None:
        self.slot_bytes = slot_bytes
        self._map = mmap.mmap(fd, 2 * SLOTS * slot_bytes)  # ValueError / OSError: cannot map
        self.view = memoryview(self._map)
        self._next = [0, 0]  # the slot each side fills next: replies, requests

    @classmethod
    def create(cls, slot_bytes: int = SLOT_BYTES) -> tuple[SharedSlots, int]:
        """A new memory file, mapped, and its descriptor (the caller sends, then closes it);
        OSError when the system refuses one."""
        fd = os.memfd_create("agentcanvas-rpc", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, 2 * SLOTS * slot_bytes)  # pages are allocated when first written
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)  # its size is fixed for good
            return cls(fd, slot_bytes), fd
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def received(cls, fds: list[int], head: bytes) -> SharedSlots | None:
        """The server's side of an attach: the memory file sent with it, mapped; None (and
        the descriptors closed) when it cannot be used."""
        try:
            (slot_bytes,) = _SLOT_BYTES.unpack(head)
            if len(fds) != 1 or not 0 < slot_bytes <= 1 << 32:
                log.warning(
                    "rpc: an attach with %d descriptors, %d-byte slots", len(fds), slot_bytes
                )
                return None
            try:
                # A file whose size its sender could still change could be cut under the
                # map (the server's next write past its end: SIGBUS): only a sealed one.
                if fcntl.fcntl(fds[0], fcntl.F_GET_SEALS) & SEALS != SEALS:
                    log.warning("rpc: a connection's memory file is not sealed; streamed")
                    return None
                if os.fstat(fds[0]).st_size < 2 * SLOTS * slot_bytes:
                    log.warning("rpc: a connection's memory file is too small; streamed")
                    return None
                return cls(fds[0], slot_bytes)
            except (OSError, ValueError) as exc:
                log.warning("rpc: cannot map a connection's shared memory (%s)", exc)
                return None
        finally:
            close_fds(fds)  # the map keeps the memory

    def put(
        self, arrays: Sequence[wire.Buffer], lengths: Sequence[int], requests: bool = False
    ) -> int | None:
        """Copy a reply's array frames (``lengths`` bytes each; a request's with
        ``requests``) into the next slot of their side; the slot (0 or 1), or None when they
        do not fit one (the message is streamed)."""
        offsets = shared_offsets(lengths, self.slot_bytes)
        if offsets is None:
            return None
        slot = self._next[requests]
        self._next[requests] = 1 - slot
        base = (SLOTS * requests + slot) * self.slot_bytes
        for data, at, length in zip(arrays, offsets, lengths, strict=True):
            self.view[base + at : base + at + length] = memoryview(data).cast("B")
        return slot

    def frames(
        self, slot: int, lengths: Sequence[int], requests: bool = False
    ) -> list[memoryview] | None:
        """The array frames of a reply in ``slot`` (a request's with ``requests``), views of
        the slot, or None when they do not fit it (a message that is not what it says)."""
        base = (SLOTS * requests + slot) * self.slot_bytes
        if len(lengths) == 1:  # the usual reply: one array
            return [self.view[base : base + lengths[0]]] if lengths[0] <= self.slot_bytes else None
        offsets = shared_offsets(lengths, self.slot_bytes)
        if offsets is None:
            return None
        return [
            self.view[base + at : base + at + n] for at, n in zip(offsets, lengths, strict=True)
        ]
