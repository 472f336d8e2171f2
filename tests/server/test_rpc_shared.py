"""The call socket's shared memory (`server.rpc_shared`): a reply's arrays handed over in the
connection's memory file, on a real `RpcServer` (its connection threads, a unix socket).

The raw tests speak the protocol by hand on a blocking socket, so they see what the server
puts on the stream and in the slots; the others go through `RpcClient`.
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import gc
import os
import socket
import struct
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio

from agentcanvas import wire
from agentcanvas.errors import ConfigError, ProtocolError
from agentcanvas.server import protocol, rpc_channel, rpc_client, rpc_framing, rpc_shared
from agentcanvas.server.rpc_client import RpcClient
from agentcanvas.server.rpc_server import RpcServer

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(60)]

MEMFD_NAME = "agentcanvas-rpc"


def _array(args: dict[str, Any]) -> dict[str, Any]:
    """``n`` bytes, every one ``k`` (a uint8 array); ``count`` of them."""
    n, k, count = int(args["n"]), int(args["k"]), int(args.get("count", 1))
    return {"xs": [np.full(n, (k + i) % 256, dtype=np.uint8) for i in range(count)]}


def _digest(args: dict[str, Any]) -> dict[str, Any]:
    """What the server received: each array's length and the sum of its bytes, and the
    length of ``blob`` (bytes inline in the header)."""
    return {
        "sums": [[int(x.size), int(x.sum(dtype=np.int64))] for x in args["xs"]],
        "blob": len(args.get("blob", b"")),
    }


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def endpoint() -> AsyncIterator[str]:
    server = RpcServer({}, direct={"array": _array, "digest": _digest})
    assert server.endpoint.startswith("ipc://")
    serving = asyncio.create_task(server.serve())
    yield server.endpoint
    serving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await serving


def _request(request_id: int, n: int, k: int, count: int = 1) -> list[wire.Buffer]:
    return wire.encode({"id": request_id, "op": "array", "args": {"n": n, "k": k, "count": count}})


def _attach(sock: socket.socket, fd: int, slot_bytes: int) -> None:
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))]
    sock.sendmsg([rpc_shared.attach_message(slot_bytes)], ancillary)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        more = sock.recv(n - len(data))
        assert more, "the server closed the connection"
        data += more
    return data


def _raw_reply(sock: socket.socket, mapped: bool = True) -> tuple[int | None, list[int], bytes]:
    """One reply as the stream carries it: its slot (None: streamed), its frames' lengths,
    and every byte after its head (all frames when streamed, the header alone in a slot);
    ``mapped``: whether the connection's memory is mapped (every reply then says so)."""
    (word,) = struct.unpack("<I", _recv_exactly(sock, 4))
    slot = None
    if word & rpc_shared.SHARED:
        slot = 1 if word & rpc_shared.SHARED_SLOT else 0
    assert bool(word & rpc_shared.MAPPED) is mapped
    count = word & ~rpc_shared.REPLY_FLAGS
    lengths = list(struct.unpack(f"<{count}Q", _recv_exactly(sock, 8 * count)))
    rest = _recv_exactly(sock, lengths[0] if slot is not None else sum(lengths))
    return slot, lengths, rest


def _nothing_more(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        sock.recv(1)
    except BlockingIOError:
        return True
    finally:
        sock.setblocking(True)
    return False


def _memfds_open() -> int:
    """How many descriptors of this process are connections' memory files (a map holds one
    of its own: Python's mmap keeps a duplicate)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += MEMFD_NAME in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    return count


async def _memfds_come_to(n: int) -> int:
    """`_memfds_open` once it is ``n`` (a connection's thread closes its map when it ends,
    a moment after the socket), or what it is after 5 s."""
    for _ in range(100):
        gc.collect()
        if _memfds_open() == n:
            break
        await asyncio.sleep(0.05)
    return _memfds_open()


@pytest.fixture
def raw(endpoint: str) -> Iterator[socket.socket]:
    sock = rpc_framing.blocking_connection(endpoint, timeout_s=10.0)
    yield sock
    sock.close()


async def test_big_replies_take_the_two_slots_in_turn_and_stream_only_their_header(
    raw: socket.socket,
) -> None:
    """Three replies of 100 KB: slots 0, 1, 0; the stream carries the header alone; the
    slot holds the array's bytes; no descriptor stays open on either side."""
    slots, fd = rpc_shared.SharedSlots.create()
    _attach(raw, fd, slots.slot_bytes)
    os.close(fd)
    n = 100_000
    for request_id, expected_slot in zip((1, 2, 3), (0, 1, 0), strict=True):
        rpc_framing.send_message(raw, _request(request_id, n, request_id))
        slot, lengths, header = await asyncio.to_thread(_raw_reply, raw)
        assert slot == expected_slot and lengths[1:] == [n] and len(header) == lengths[0]
        assert _nothing_more(raw)
        base = slot * slots.slot_bytes
        assert bytes(slots.view[base : base + n]) == bytes([request_id]) * n
        (xs,) = wire.decode([header, slots.view[base : base + n]])["ok"].values()  # type: ignore[union-attr]
        assert xs[0].tobytes() == bytes([request_id]) * n
    # the server closed the descriptor it received: what is open is the two maps' own
    assert await _memfds_come_to(2) == 2
    raw.close()
    del slots
    assert await _memfds_come_to(0) == 0  # the connection's end unmapped the server's side


@pytest.mark.parametrize(
    ("n", "count", "why"),
    [
        (rpc_shared.MIN_BYTES - 1, 1, "under MIN_BYTES"),
        (rpc_shared.SLOT_BYTES + 1, 1, "bigger than a slot"),
        (rpc_shared.SLOT_BYTES // 3, 3, "three that fit a slot only unaligned"),
    ],
)
async def test_replies_under_the_threshold_or_over_a_slot_are_streamed(
    raw: socket.socket, n: int, count: int, why: str
) -> None:
    slots, fd = rpc_shared.SharedSlots.create()
    _attach(raw, fd, slots.slot_bytes)
    os.close(fd)
    rpc_framing.send_message(raw, _request(1, n, 7, count))
    slot, lengths, rest = await asyncio.to_thread(_raw_reply, raw)
    assert slot is None, why
    assert lengths[1:] == [n] * count and len(rest) == sum(lengths)


async def test_several_arrays_of_one_reply_share_its_slot_each_aligned(
    raw: socket.socket,
) -> None:
    slots, fd = rpc_shared.SharedSlots.create()
    _attach(raw, fd, slots.slot_bytes)
    os.close(fd)
    n = 40_001  # not a multiple of 64: the next array starts at the next boundary
    rpc_framing.send_message(raw, _request(1, n, 10, count=3))
    slot, lengths, header = await asyncio.to_thread(_raw_reply, raw)
    assert slot == 0 and lengths[1:] == [n] * 3
    offsets = rpc_shared.shared_offsets(lengths[1:], slots.slot_bytes)
    assert offsets == [0, 40_064, 80_128]
    frames = slots.frames(0, lengths[1:])
    assert frames is not None
    xs = wire.decode([header, *frames])["ok"]["xs"]  # type: ignore[index]
    assert [x.tobytes() for x in xs] == [bytes([10 + i]) * n for i in range(3)]


@pytest.mark.parametrize("sealed", [False, True])
async def test_a_memory_file_the_server_cannot_trust_leaves_the_replies_streamed(
    raw: socket.socket, sealed: bool
) -> None:
    """Unsealed (its sender could still shrink it under the server's map: SIGBUS on the
    next write), or sealed but smaller than its two slots: the server streams, and closes
    the descriptor."""
    fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096 if sealed else 2 * rpc_shared.SLOTS * rpc_shared.SLOT_BYTES)
    if sealed:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, rpc_shared.SEALS)
    _attach(raw, fd, rpc_shared.SLOT_BYTES)
    os.close(fd)
    rpc_framing.send_message(raw, _request(1, 100_000, 3))
    slot, lengths, rest = await asyncio.to_thread(_raw_reply, raw, False)
    assert slot is None and len(rest) == sum(lengths)
    assert await _memfds_come_to(0) == 0


async def test_the_client_s_memory_file_cannot_change_size() -> None:
    _slots, fd = rpc_shared.SharedSlots.create()
    try:
        for size in (0, 8 * rpc_shared.SLOT_BYTES):
            with pytest.raises(PermissionError):
                os.ftruncate(fd, size)
    finally:
        os.close(fd)


@pytest.mark.parametrize("head", [b"\x00\x00", struct.pack("<I", rpc_shared.ATTACH)])
async def test_a_descriptor_with_a_first_message_cut_short_is_closed(
    endpoint: str, head: bytes
) -> None:
    """Two bytes, or an attach's first word alone, with a descriptor, then the end: the
    connection ends and the descriptor is closed."""
    sock = rpc_framing.blocking_connection(endpoint, timeout_s=10.0)
    fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC)
    sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    os.close(fd)
    sock.shutdown(socket.SHUT_WR)
    assert await asyncio.to_thread(sock.recv, 1) == b""  # the server ended the connection
    sock.close()
    assert await _memfds_come_to(0) == 0


async def test_a_descriptor_sent_with_a_request_is_closed_and_the_request_answered(
    raw: socket.socket,
) -> None:
    fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC)
    request = b"".join(bytes(b) for b in rpc_framing.pack(_request(1, 100_000, 3)))
    raw.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    os.close(fd)
    slot, lengths, rest = await asyncio.to_thread(_raw_reply, raw, False)
    assert slot is None and lengths[1:] == [100_000] and len(rest) == sum(lengths)
    assert await _memfds_come_to(0) == 0


async def test_an_attach_after_the_first_message_is_garbage(raw: socket.socket) -> None:
    rpc_framing.send_message(raw, _request(1, 10, 3))
    await asyncio.to_thread(_raw_reply, raw, False)
    raw.sendall(rpc_shared.attach_message(rpc_shared.SLOT_BYTES))
    reply = await asyncio.to_thread(rpc_framing.recv_message, raw)
    err = wire.decode(reply)["err"]  # type: ignore[index]
    assert "not an rpc message" in err["message"] and "frames" in err["message"]


async def test_the_client_decodes_arrays_it_owns_and_later_replies_leave_them_alone(
    endpoint: str,
) -> None:
    """Through `RpcClient`: the connection attached its memory; each decoded array owns
    aligned, writable memory, so the replies that reuse its slot never change it."""
    client = RpcClient(endpoint, "test server")
    try:
        first = await client.request("array", {"n": 200_000, "k": 1}, "array", 10.0, Any)
        channel = client.pool._idle[0]
        assert channel.shared is not None
        for k in range(2, 6):
            later = await client.request("array", {"n": 200_000, "k": k}, "array", 10.0, Any)
            assert later["xs"][0].tobytes() == bytes([k]) * 200_000
        (x,) = first["xs"]
        assert x.tobytes() == bytes([1]) * 200_000
        assert x.flags.owndata and x.flags.writeable and x.flags.aligned
    finally:
        client.close()


async def test_two_replies_outstanding_each_keep_their_slot(endpoint: str) -> None:
    """`request_then`: the second reply is written while the first waits undecoded."""
    client = RpcClient(endpoint, "test server")
    try:
        for _ in range(3):  # so either slot may come first
            first, pending = await client.request_then(
                ("array", {"n": 300_000, "k": 20}, "first", Any),
                ("array", {"n": 300_000, "k": 40}, "second", Any),
                10.0,
            )
            second = await pending.value(10.0)
            assert first["xs"][0].tobytes() == bytes([20]) * 300_000
            assert second["xs"][0].tobytes() == bytes([40]) * 300_000
    finally:
        client.close()


async def test_a_connection_with_shared_memory_refuses_a_third_message_outstanding(
    endpoint: str,
) -> None:
    channel = await rpc_channel.connect(endpoint)
    try:
        assert channel.shared is not None
        with pytest.raises(RuntimeError, match="more messages outstanding than"):
            channel.send(*(_request(i, 10, 0) for i in range(3)))
    finally:
        channel.close()


async def test_turned_off_the_arrays_are_streamed(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCANVAS_CALL_SHARED_MEMORY", "0")
    assert not rpc_shared.usable()
    client = RpcClient(endpoint, "test server")
    try:
        out = await client.request("array", {"n": 200_000, "k": 9}, "array", 10.0, Any)
        assert out["xs"][0].tobytes() == bytes([9]) * 200_000
        assert client.pool._idle[0].shared is None
    finally:
        client.close()
    monkeypatch.setenv("AGENTCANVAS_CALL_SHARED_MEMORY", "yes")
    with pytest.raises(ConfigError, match="AGENTCANVAS_CALL_SHARED_MEMORY"):
        rpc_shared.usable()


async def test_a_client_attaches_only_to_a_server_of_protocol_2_2_or_later(
    endpoint: str,
) -> None:
    """An older server reads an attach as garbage (see above): a client told the server's
    version (`protocol.attaches_memory`) does not send one."""
    assert [protocol.attaches_memory(v) for v in ("2.1", "2.2", "2.10", "3.0", "1.9")] == [
        False,
        True,
        True,
        True,
        False,
    ]
    for attaches in (False, True):
        client = RpcClient(endpoint, "test server", attaches=attaches)
        try:
            out = await client.request("array", {"n": 200_000, "k": 4}, "array", 10.0, Any)
            assert out["xs"][0].tobytes() == bytes([4]) * 200_000
            assert (client.pool._idle[0].shared is not None) is attaches
        finally:
            client.close()


async def test_a_request_s_big_arrays_go_through_the_request_slots(endpoint: str) -> None:
    """Through `RpcClient`: a request with a 300 KB array leaves the array in a request slot
    (the server reads it there), two requests sent together take both request slots, and
    a request whose header alone is bigger than the server's read buffer still arrives."""
    client = RpcClient(endpoint, "test server")
    try:
        x = np.arange(300_000, dtype=np.int64).astype(np.uint8)
        sums = [[300_000, int(x.sum(dtype=np.int64))]]
        assert (await client.request("digest", {"xs": [x]}, "digest", 10.0, Any))["sums"] == sums
        channel = client.pool._idle[0]
        shared = channel.shared
        assert shared is not None and channel.mapped  # the first went streamed: no answer yet
        base = rpc_shared.SLOTS * shared.slot_bytes  # the first request slot
        assert bytes(shared.view[base : base + 100]) == bytes(100)  # never written
        assert (await client.request("digest", {"xs": [x]}, "digest", 10.0, Any))["sums"] == sums
        assert bytes(shared.view[base : base + x.size]) == x.tobytes()
        ys = [np.full(100_000, v, dtype=np.uint8) for v in (3, 5)]
        first, pending = await client.request_then(
            ("digest", {"xs": [ys[0]]}, "first", Any),
            ("digest", {"xs": [ys[1]], "blob": b"b" * 200_000}, "second", Any),
            10.0,
        )
        second = await pending.value(10.0)
        assert first["sums"] == [[100_000, 300_000]]
        assert second["sums"] == [[100_000, 500_000]] and second["blob"] == 200_000
    finally:
        client.close()


async def test_a_server_that_did_not_map_the_memory_gets_every_request_streamed(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server could not map the file (here: it says so for any): its replies never say
    MAPPED, so the client streams every request, big ones too, and they all succeed."""
    monkeypatch.setattr(rpc_shared.SharedSlots, "received", classmethod(lambda *a: None))
    client = RpcClient(endpoint, "test server")
    try:
        x = np.full(200_000, 2, dtype=np.uint8)
        for _ in range(3):
            out = await client.request("digest", {"xs": [x]}, "digest", 10.0, Any)
            assert out["sums"] == [[200_000, 400_000]]
        channel = client.pool._idle[0]
        assert channel.shared is not None and not channel.mapped
        base = rpc_shared.SLOTS * channel.shared.slot_bytes
        assert bytes(channel.shared.view[base : base + 100]) == bytes(100)
    finally:
        client.close()


async def test_the_client_names_the_server_s_refusal_of_what_it_could_not_read() -> None:
    err = {"type": "UserInputError", "message": "not an rpc message: X", "status": 400}
    frames = [memoryview(bytes(f)) for f in wire.encode({"id": None, "err": err})]
    with pytest.raises(ProtocolError, match="the server refused it: not an rpc message: X"):
        rpc_client._decoded(frames, (7, "/call/x", Any), "test server")


async def test_a_request_in_a_slot_is_refused_without_an_attach_or_past_its_slot(
    endpoint: str,
) -> None:
    """A flagged request on a connection that attached nothing, or one whose arrays overrun
    their slot: an error reply naming it, and the connection ends."""
    for attached in (False, True):
        sock = rpc_framing.blocking_connection(endpoint, timeout_s=10.0)
        try:
            if attached:
                slots, fd = rpc_shared.SharedSlots.create()
                _attach(sock, fd, slots.slot_bytes)
                os.close(fd)
            header = bytes(_request(1, 10, 0)[0])
            sock.sendall(_flagged(header, [rpc_shared.SLOT_BYTES + 1], 0))
            reply = await asyncio.to_thread(rpc_framing.recv_message, sock)
            err = wire.decode(reply)["err"]  # type: ignore[index]
            assert "not an rpc message" in err["message"]
            assert await asyncio.to_thread(sock.recv, 1) == b""  # dropped
        finally:
            sock.close()


def _fed(channel: rpc_channel.Channel, data: bytes) -> list[list[bytes]]:
    got: list[list[bytes]] = []
    channel._deliver = lambda frames: got.append([bytes(f) for f in frames])  # type: ignore[method-assign]
    buf = channel.get_buffer(-1)
    buf[: len(data)] = data
    channel.buffer_updated(len(data))
    return got


def _flagged(header: bytes, lengths: list[int], slot: int) -> bytes:
    flags = rpc_shared.SHARED | (rpc_shared.SHARED_SLOT if slot else 0)
    count = 1 + len(lengths)
    return struct.pack(f"<I{count}Q", count | flags, len(header), *lengths) + header


async def test_the_client_reads_a_reply_s_arrays_from_the_slot_it_names() -> None:
    slots, fd = rpc_shared.SharedSlots.create()
    os.close(fd)
    assert slots.put([b"a" * 70_000, b"b" * 100], [70_000, 100]) == 0
    assert slots.put([b"c" * 50_000], [50_000]) == 1
    channel = rpc_channel.Channel(slots)
    got = _fed(channel, _flagged(b"h0", [70_000, 100], 0) + _flagged(b"h1", [50_000], 1))
    assert got == [[b"h0", b"a" * 70_000, b"b" * 100], [b"h1", b"c" * 50_000]]
    assert channel.dead is None


@pytest.mark.parametrize("shared", [False, True])
async def test_a_reply_in_a_slot_it_cannot_read_drops_the_connection(shared: bool) -> None:
    """No memory attached, or arrays that overrun the slot: the stream is not ours."""
    slots = None
    if shared:
        slots, fd = rpc_shared.SharedSlots.create()
        os.close(fd)
    channel = rpc_channel.Channel(slots)
    got = _fed(channel, _flagged(b"h", [rpc_shared.SLOT_BYTES + 1], 1))
    assert got == []
    assert channel.dead is not None and "cannot read" in channel.dead


async def test_offsets_in_a_slot_are_aligned_and_refuse_what_does_not_fit() -> None:
    assert rpc_shared.shared_offsets([1, 64, 65, 0, 3], 1000) == [0, 64, 128, 256, 256]
    assert rpc_shared.shared_offsets([1000], 1000) == [0]
    assert rpc_shared.shared_offsets([1001], 1000) is None
    assert rpc_shared.shared_offsets([500, 500], 1000) is None  # 500 -> 512, then 1012


async def test_protocol_reply_kinds_still_decode_from_a_slot() -> None:
    """A `protocol.CallReply` whose array lies in a slot decodes to an array of its own."""
    slots, fd = rpc_shared.SharedSlots.create()
    os.close(fd)
    obs = np.arange(64 * 64 * 3, dtype=np.uint8).reshape(64, 64, 3)
    frames = wire.encode({"id": 5, "ok": {"outputs": {"obs": obs}}})
    lengths = [memoryview(f).nbytes for f in frames[1:]]
    slot = slots.put(frames[1:], lengths)
    assert slot is not None
    views = slots.frames(slot, lengths)
    assert views is not None
    decoded = wire.Decoder(protocol.rpc_reply(protocol.CallReply)).decode([frames[0], *views])
    got = decoded.ok.outputs["obs"]  # type: ignore[union-attr]
    slots.view[slot * slots.slot_bytes] = 255  # the slot's next use
    assert got.tobytes() == obs.tobytes() and got.flags.owndata
