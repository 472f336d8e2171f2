"""MessageReader: the server's side of the call socket reads messages ahead into a buffer of
its own — one recv for a small message or for two sent in one write — with the framing
`recv_message` reads three recvs at a time; it waits for input with poll, so the peer's
reads do not wake it."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import cast

import numpy as np
import pytest

from agentcanvas import wire
from agentcanvas.server.rpc_framing import (
    FramingError,
    MessageReader,
    pack,
    recv_message,
    send_message,
)


class _Counted:
    """A socket whose recv_into calls are counted (and that a reader can poll)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.recvs = sock, 0

    def recv_into(self, buffer: memoryview) -> int:
        self.recvs += 1
        return self.sock.recv_into(buffer)

    def gettimeout(self) -> float | None:
        return self.sock.gettimeout()

    def fileno(self) -> int:
        return self.sock.fileno()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    left, right = socket.socketpair()
    yield left, right
    left.close()
    right.close()


def _reader(sock: socket.socket, size: int = 64 * 1024) -> tuple[MessageReader, _Counted]:
    counted = _Counted(sock)
    return MessageReader(cast(socket.socket, counted), size), counted


def test_two_messages_in_one_write_take_one_recv(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    first, second = wire.encode({"id": 1}), wire.encode({"id": 2, "after": 1})
    left.sendall(b"".join(bytes(b) for b in [*pack(first), *pack(second)]))
    reader, counted = _reader(right)
    assert wire.decode(reader.recv()) == {"id": 1}
    assert wire.decode(reader.recv()) == {"id": 2, "after": 1}
    assert counted.recvs == 1


def test_big_and_small_messages_in_any_split(pair: tuple[socket.socket, socket.socket]) -> None:
    """A body larger than the buffer goes straight into its own; the peer writing a byte at
    a time changes nothing."""
    left, right = pair
    big = np.arange(40_000, dtype=np.int64)  # 320 KB: past the 64 KB buffer
    messages = [{"id": 1, "x": "a"}, {"id": 2, "arr": big}, {"id": 3, "x": "b" * 3000}]
    raw = b"".join(bytes(b) for m in messages for b in pack(wire.encode(m)))

    def trickle() -> None:  # the first 200 bytes one by one, then the rest at once
        for k in range(200):
            left.sendall(raw[k : k + 1])
        left.sendall(raw[200:])

    writer = threading.Thread(target=trickle)
    writer.start()
    reader, _ = _reader(right, size=8)  # raised to its least: a head of MAX_FRAMES fits
    got = [wire.decode(reader.recv()) for _ in messages]
    writer.join()
    assert got[0] == messages[0] and got[2] == messages[2]
    assert isinstance(got[1], dict) and np.array_equal(got[1]["arr"], big)


def test_the_streams_end_and_garbage(pair: tuple[socket.socket, socket.socket]) -> None:
    left, right = pair
    reader, _ = _reader(right)
    send_message(left, wire.encode({"id": 1}))
    whole = b"".join(bytes(b) for b in pack(wire.encode({"id": 2, "x": "cut short"})))
    left.sendall(whole[:-3])
    left.shutdown(socket.SHUT_WR)
    assert wire.decode(reader.recv()) == {"id": 1}
    with pytest.raises(EOFError):
        reader.recv()  # the second ended mid-body
    a, b = socket.socketpair()
    try:
        a.sendall(b"\0\0\0\0" + b"x" * 12)  # a message of 0 frames
        with pytest.raises(FramingError, match="0 frames"):
            MessageReader(b).recv()
    finally:
        a.close()
        b.close()


def test_what_is_left_moves_to_the_front_when_the_buffer_fills(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """Medium messages written back to back: a message that starts near the end of the
    buffer and does not fit there is finished after what was read moves to the front."""
    left, right = pair
    messages = [{"id": k, "x": "m" * (700 + 37 * k)} for k in range(300)]  # ~330 KB in all
    raw = b"".join(bytes(b) for m in messages for b in pack(wire.encode(m)))
    writer = threading.Thread(target=left.sendall, args=(raw,))
    writer.start()
    reader, counted = _reader(right, size=40_000)  # about forty messages a buffer
    got = [wire.decode(reader.recv()) for _ in messages]
    writer.join()
    assert got == messages
    assert counted.recvs < len(messages)  # read ahead: fewer recvs than messages


def _voluntary_switches(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc status")


def _echo_child_switches(sock: socket.socket, peer: socket.socket, messages: int) -> float:
    """A forked child echoes through a MessageReader; the parent sends a message, reads the
    echo and pauses 2 ms, ``messages`` times. The child's voluntary context switches (how
    often it went to sleep, i.e. was woken) per message."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            peer.close()
            reader = MessageReader(sock)
            while True:
                send_message(sock, reader.recv())
        except EOFError:
            pass
        except BaseException:
            code = 1
        os._exit(code)
    sock.close()
    try:
        send_message(peer, wire.encode({"id": -1}))  # warm: the child is in its loop
        recv_message(peer)
        time.sleep(0.01)
        before = _voluntary_switches(pid)
        for k in range(messages):
            send_message(peer, wire.encode({"id": k}))
            assert wire.decode(recv_message(peer)) == {"id": k}
            time.sleep(0.002)  # the child is asleep in its wait when the next one comes
        switches = _voluntary_switches(pid) - before
    finally:
        peer.close()
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return switches / messages


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc (Linux)")
def test_the_peers_reads_do_not_wake_a_waiting_reader() -> None:
    """A reader asleep in recv on a unix stream socket is woken when its peer reads what it
    was sent (one wait queue for both directions), for nothing: the server, once a round
    trip, at the cost of a cross-CPU wake-up in the caller's recv. Waiting with poll, the
    child sleeps once a message: woken by the message alone."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    per_message = _echo_child_switches(right, left, messages=60)
    assert per_message <= 1.3, f"{per_message:.2f} sleeps a message: woken by the peer's reads"
