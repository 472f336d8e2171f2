"""The call socket (`server.rpc_*`) against real auto_host children: where a request runs, big
messages, and a server whose connection thread hangs.

Two workspace node sets with the same nodes: ``tsock`` (replicated: its synchronous nodes and
panel run on the connection's thread) and ``tsock_shared`` (shared: every op through the event
loop, its synchronous nodes on the daemon threads: it is user code). Each node answers the name
of the thread it ran on.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import struct
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import pytest_asyncio

from agentcanvas.errors import RemoteError, ServerTimeoutError, UserInputError
from agentcanvas.nodes.base import CallContext
from agentcanvas.server import protocol, rpc_channel, rpc_client, rpc_framing
from agentcanvas.server.launcher import LocalProcessLauncher, ProcessServer
from agentcanvas.server.opening import OpeningCall
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(90)]

CTX = CallContext("sock", 0)
SOURCE = '''
"""{name}: nodes that say which thread ran them."""
import threading
import time

from agentcanvas.nodes.base import NodeSet
from agentcanvas.nodes.manifest import PortSpec

import numpy as np


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.active = 0
        self.most = 0


NODESET = NodeSet(name="{name}", parallelism="{parallelism}", state_factory=State)
OUT = [PortSpec(name="thread", type="str")]
OVERLAP = [PortSpec(name="most", type="int")]


def _overlap(state):
    with state.lock:
        state.active += 1
        state.most = max(state.most, state.active)
    time.sleep(0.3)
    with state.lock:
        state.active -= 1
        return {{"most": state.most}}


@NODESET.node("overlap_plain", outputs=OVERLAP)
def overlap_plain(inputs, config, state, ctx):
    return _overlap(state)


@NODESET.node("overlap_blocking", outputs=OVERLAP, blocking=True)
def overlap_blocking(inputs, config, state, ctx):
    return _overlap(state)


@NODESET.node("many", inputs=[PortSpec(name="n", type="int")],
              outputs=[PortSpec(name="xs", type="list")])
def many(inputs, config, state, ctx):
    return {{"xs": [np.full(256, k, dtype=np.int32) for k in range(inputs["n"])]}}


@NODESET.node("plain", outputs=OUT)
def plain(inputs, config, state, ctx):
    return {{"thread": threading.current_thread().name}}


@NODESET.node("blocking", outputs=OUT, blocking=True)
def blocking(inputs, config, state, ctx):
    return {{"thread": threading.current_thread().name}}


@NODESET.node("later", outputs=OUT)
async def later(inputs, config, state, ctx):
    return {{"thread": threading.current_thread().name}}


@NODESET.node("echo", inputs=[PortSpec(name="x", type="array")],
              outputs=[PortSpec(name="x", type="array"), PortSpec(name="total", type="int")])
def echo(inputs, config, state, ctx):
    return {{"x": inputs["x"][::-1].copy(), "total": int(inputs["x"].sum(dtype="int64"))}}


@NODESET.node("note", inputs=[PortSpec(name="tag", type="str")],
              outputs=[PortSpec(name="seen", type="list")])
def note(inputs, config, state, ctx):
    state.seen = [*getattr(state, "seen", []), inputs["tag"]]
    if inputs["tag"] == "slow":
        time.sleep(0.3)
    if inputs["tag"] == "raise":
        raise ValueError("asked to raise")
    return {{"seen": state.seen}}


@NODESET.node("hang", outputs=OUT, blocking=True)
def hang(inputs, config, state, ctx):
    time.sleep(3600)
    return {{"thread": "never"}}
'''


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("call_socket")
    for name, parallelism in (("tsock", "replicated"), ("tsock_shared", "shared")):
        package = root / "graph_nodes" / name
        package.mkdir(parents=True)
        source = SOURCE.format(name=name, parallelism=parallelism)
        (package / "__init__.py").write_text(textwrap.dedent(source))
    return root


async def _launch(workspace: Path, name: str) -> tuple[ProcessServer, RemoteNodeSet]:
    server = await LocalProcessLauncher(env={"AGENTCANVAS_HOME": str(workspace)}).launch(name, 0)
    assert isinstance(server, ProcessServer)
    remote = RemoteNodeSet(name, server.url, await fetch_manifest(server.url), timeout_s=10.0)
    return server, remote


@contextlib.asynccontextmanager
async def _served(workspace: Path, name: str) -> AsyncIterator[tuple[ProcessServer, RemoteNodeSet]]:
    server, remote = await _launch(workspace, name)
    try:
        yield server, remote
    finally:
        await remote.close()
        await server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def replicated(workspace: Path) -> AsyncIterator[RemoteNodeSet]:
    async with _served(workspace, "tsock") as (_, remote):
        yield remote


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(workspace: Path) -> AsyncIterator[RemoteNodeSet]:
    async with _served(workspace, "tsock_shared") as (_, remote):
        yield remote


async def _thread(remote: RemoteNodeSet, node: str) -> str:
    thread: str = (await remote.call(node, {}, {}, CTX))["thread"]
    return thread


async def test_a_replicated_node_set_runs_its_calls_on_the_connection_thread(
    replicated: RemoteNodeSet,
) -> None:
    assert await _thread(replicated, "plain") == "rpc-conn"
    assert await _thread(replicated, "blocking") == "rpc-conn"  # no hop to a pool thread
    assert await _thread(replicated, "later") == "MainThread"  # async: on the event loop


async def test_a_shared_node_set_runs_only_its_async_calls_on_the_event_loop(
    shared: RemoteNodeSet,
) -> None:
    # A user's plain function runs on a daemon thread, blocking or not: the loop is every
    # caller's (tests/server/test_shared_slow_node.py).
    assert (await _thread(shared, "plain")).startswith("agentcanvas-blocking-")
    assert (await _thread(shared, "blocking")).startswith("agentcanvas-blocking-")
    assert await _thread(shared, "later") == "MainThread"


@pytest.mark.parametrize("megabytes", [0, 24])
async def test_messages_larger_than_a_socket_buffer_round_trip_bit_exactly(
    replicated: RemoteNodeSet, shared: RemoteNodeSet, megabytes: int
) -> None:
    """A 24 MB array each way crosses the socket in many reads on both sides."""
    rng = np.random.default_rng(megabytes)
    x = rng.integers(0, 2**31, size=max(3, megabytes * 2**18), dtype=np.int32)
    for remote in (replicated, shared):
        out = await remote.call("echo", {}, {"x": x}, CTX)
        assert out["x"].dtype == x.dtype and out["x"].tobytes() == x[::-1].tobytes()
        assert out["total"] == int(x.sum(dtype=np.int64))


async def test_arrays_of_a_step_come_back_through_the_connection_s_shared_memory(
    replicated: RemoteNodeSet, shared: RemoteNodeSet
) -> None:
    """Replies of 150 KB and 600 KB (over `rpc_shared.MIN_BYTES`, within a slot), from both
    kinds of server: bit-exact, and the connections that carried them had attached memory."""
    rng = np.random.default_rng(5)
    for remote in (replicated, shared):
        for n in (150_000 // 4, 600_000 // 4):
            x = rng.integers(0, 2**31, size=n, dtype=np.int32)
            out = await remote.call("echo", {}, {"x": x}, CTX)
            assert out["x"].tobytes() == x[::-1].tobytes() and out["x"].flags.owndata
        pool = (await remote._calls()).pool
        assert pool.idle and all(c.shared is not None for c in pool._idle)


async def test_a_message_of_more_frames_than_one_sendmsg_takes_round_trips(
    replicated: RemoteNodeSet,
) -> None:
    """1,100 arrays of 1 KiB travel as 1,101 frames: more than Linux's IOV_MAX (1,024)
    buffers one sendmsg takes."""
    xs = (await replicated.call("many", {}, {"n": 1100}, CTX))["xs"]
    assert len(xs) == 1100
    assert all(
        x.dtype == np.int32 and x.shape == (256,) and (x == k).all() for k, x in enumerate(xs)
    )


async def test_a_message_of_more_frames_than_the_limit_is_refused_by_name_on_either_side(
    replicated: RemoteNodeSet,
) -> None:
    """A reply the other side could not read is an error reply, and the server lives on; a
    request of that size is refused before it is sent."""
    n = rpc_framing.MAX_FRAMES + 10
    with pytest.raises(RemoteError, match=rf"failed /call/many: WireError: {n} arrays of 1024"):
        await replicated.call("many", {}, {"n": n}, CTX)
    big = [np.zeros(256, np.int32)] * n
    with pytest.raises(UserInputError, match=r"cannot send /call/echo to .*arrays of 1024"):
        await replicated.call("echo", {}, {"x": big}, CTX)
    assert (await replicated.call("many", {}, {"n": 2}, CTX))["xs"][1][0] == 1


async def test_concurrency_on_a_replicated_server_is_what_it_was_on_the_loop(
    workspace: Path,
) -> None:
    """Two calls at once on one replicated server: non-blocking nodes run one at a time (as
    on the event loop before), blocking ones may overlap (as on the worker threads)."""
    async with _served(workspace, "tsock") as (_, remote):
        plain = await asyncio.gather(*(remote.call("overlap_plain", {}, {}, CTX) for _ in "ab"))
        assert max(o["most"] for o in plain) == 1
        blocking = await asyncio.gather(
            *(remote.call("overlap_blocking", {}, {}, CTX) for _ in "ab")
        )
        assert max(o["most"] for o in blocking) == 2


async def test_concurrent_calls_each_get_their_own_connection_and_answer(
    replicated: RemoteNodeSet,
) -> None:
    xs = [np.full(1000, k, dtype=np.int64) for k in range(8)]
    outs = await asyncio.gather(*(replicated.call("echo", {}, {"x": x}, CTX) for x in xs))
    assert [int(o["total"]) for o in outs] == [1000 * k for k in range(8)]


async def test_a_call_hung_on_its_connection_thread_leaves_the_server_answering_and_stoppable(
    workspace: Path,
) -> None:
    """The hung call holds only its connection's thread: the event loop still answers
    /health, other connections still call, and SIGTERM ends the server gracefully (no SIGKILL
    after the grace period)."""
    async with _served(workspace, "tsock") as (server, remote):
        hung = RemoteNodeSet("tsock", server.url, remote.manifest, timeout_s=0.5)
        with pytest.raises(ServerTimeoutError, match=r"did not answer /call/hang within 0\.5 s"):
            await hung.call("hang", {}, {}, CTX)
        await hung.close()
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/health", timeout=5.0)).status_code == 200
        assert await _thread(remote, "plain") == "rpc-conn"  # a fresh connection, its thread
        started = time.monotonic()
        status = await server.child.aclose(term_timeout_s=20.0)
        assert status != -signal.SIGKILL, "the server did not stop on SIGTERM"
        assert time.monotonic() - started < 10.0


class _Captured(rpc_channel.Channel):
    """The client's reader, fed by hand: every message it cuts out is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[list[bytes]] = []

    def _deliver(self, frames: list[memoryview]) -> None:
        self.messages.append([bytes(f) for f in frames])

    def feed(self, data: bytes, chunk: int) -> None:
        for at in range(0, len(data), chunk):
            piece = data[at : at + chunk]
            while piece:
                buf = self.get_buffer(-1)
                n = min(len(buf), len(piece))
                buf[:n] = piece[:n]
                self.buffer_updated(n)
                piece = piece[n:]


@pytest.mark.parametrize("chunk", [1, 3, 4096, 300_000, 10**8])
async def test_the_reader_cuts_messages_out_of_any_split_of_the_stream(chunk: int) -> None:
    """Small messages back to back, one bigger than the read buffer, empty frames: whatever
    pieces the kernel hands over, each message comes out whole and in order."""
    big = np.arange(rpc_channel.SCRATCH_BYTES // 2, dtype=np.int32).tobytes()  # 2x the scratch
    messages = [[b"a"], [b"head", b"", b"xyz"], [b"h", big], [b"after"], [b"\x00" * 5000]]
    stream = b"".join(b"".join(bytes(b) for b in rpc_framing.pack(m)) for m in messages)
    reader = _Captured()
    reader.feed(stream, chunk)
    assert reader.messages == messages
    assert reader.dead is None


async def test_the_reader_drops_a_connection_that_sends_no_message() -> None:
    reader = _Captured()
    reader.feed(struct.pack("<I", rpc_framing.MAX_FRAMES + 1), 4)
    assert reader.dead is not None and "not a message" in reader.dead
    assert reader.messages == []


def _note(tag: str) -> tuple[str, dict[str, object], str, type[protocol.CallReply]]:
    args = {"node": "note", "config": {}, "inputs": {"tag": tag}, "ctx": CTX.__dict__}
    return protocol.OP_CALL, args, f"/call/note {tag}", protocol.CallReply


@contextlib.asynccontextmanager
async def _client(remote: RemoteNodeSet) -> AsyncIterator[rpc_client.RpcClient]:
    client = rpc_client.RpcClient((await remote.health()).call, "tsock under test")
    try:
        yield client
    finally:
        client.close()


async def test_two_requests_sent_in_one_write_are_answered_in_order_and_the_second_waits(
    replicated: RemoteNodeSet,
) -> None:
    """`request_then`: the server runs the two one after the other on one connection; the
    second's answer is claimed later, and the connection is pooled again after it."""
    async with _client(replicated) as client:
        first, pending = await client.request_then(_note("a"), _note("b"), 10.0)
        assert first.outputs["seen"][-1:] == ["a"]
        assert client.pool.idle == 0  # busy until the second answer is claimed
        second = await pending.value(10.0)
        assert second.outputs["seen"][-2:] == ["a", "b"]
        assert client.pool.idle == 1
        plain = await client.request(*_note("c")[:3], 10.0, protocol.CallReply)
        assert plain.outputs["seen"][-3:] == ["a", "b", "c"]
        with pytest.raises(RuntimeError, match="claimed already"):
            await pending.value(10.0)


async def test_a_second_answer_dropped_before_it_came_never_reaches_another_request(
    replicated: RemoteNodeSet,
) -> None:
    """Abandoned while the server still runs it, the connection is closed (its answer would
    be out of step); the next request gets its own answer on a fresh connection."""
    async with _client(replicated) as client:
        _, pending = await client.request_then(_note("x"), _note("slow"), 10.0)
        pending.abandon()
        assert client.pool.idle == 0
        answer = await client.request(*_note("y")[:3], 10.0, protocol.CallReply)
        assert answer.outputs["seen"][-1] == "y"
        await asyncio.sleep(0.4)  # the slow one ends: its answer goes to a closed connection
        again = await client.request(*_note("z")[:3], 10.0, protocol.CallReply)
        assert again.outputs["seen"][-1] == "z"


async def test_the_second_answer_is_what_a_plain_request_gets_and_a_first_failure_drops_it(
    replicated: RemoteNodeSet,
) -> None:
    """A node that raises answers its error as data, claimed or plain; when the server
    refuses the first request (an unknown op) the second, sent ``after`` it, is not run."""
    async with _client(replicated) as client:
        _, pending = await client.request_then(_note("ok"), _note("raise"), 10.0)
        claimed = (await pending.value(10.0)).outputs
        plain = (await client.request(*_note("raise")[:3], 10.0, protocol.CallReply)).outputs
        assert "ValueError: asked to raise" in claimed["error"] and claimed == plain
        assert client.pool.idle == 1  # answered in step: pooled again
        unknown = ("no_such_op", _note("-")[1], "no_such_op")
        with pytest.raises((RemoteError, UserInputError), match="no_such_op"):
            await client.request_then((*unknown, protocol.CallReply), _note("after"), 10.0)
        answer = await client.request(*_note("next")[:3], 10.0, protocol.CallReply)
        assert answer.outputs["seen"][-1] == "next" and "after" not in answer.outputs["seen"]
        assert client.pool.idle == 1  # the refused pair's connection was pooled again


async def test_draining_a_second_answer_waits_for_it_and_keeps_the_connection(
    replicated: RemoteNodeSet,
) -> None:
    """`drain` for when nothing may overlap the second request on the server: it returns
    once the answer came (the connection pooled again); past its deadline it says why and
    closes the connection."""
    async with _client(replicated) as client:
        _, pending = await client.request_then(_note("d1"), _note("slow"), 10.0)
        started = time.monotonic()
        assert await pending.drain(10.0) is None
        assert time.monotonic() - started >= 0.25 and client.pool.idle == 1
        _, pending = await client.request_then(_note("d2"), _note("slow"), 10.0)
        assert await pending.drain(0.05) == "no answer within 0.05 s"
        assert client.pool.idle == 0 and await pending.drain(0.05) is None  # claimed already
        await asyncio.sleep(0.3)
        answer = await client.request(*_note("last")[:3], 10.0, protocol.CallReply)
        assert answer.outputs["seen"][-5:] == ["d1", "slow", "d2", "slow", "last"]


async def test_the_opening_answer_goes_to_its_own_call_and_is_drained_before_any_other(
    replicated: RemoteNodeSet,
) -> None:
    """`OpeningCall`: the executor's same call gets the answer sent with the panel request;
    a different call first waits for that answer (nothing of it may overlap the call on the
    server) and then goes on its own; `settle` drains one nobody claimed."""
    async with _client(replicated) as client:
        opening = OpeningCall("tsock under test", lambda: 10.0)
        _, pending = await client.request_then(_note("o1"), _note("mine"), 10.0)
        opening.sent(_note("mine")[1], pending)
        claimed = await opening.claim(_note("mine")[1])
        assert claimed is not None and claimed["seen"][-2:] == ["o1", "mine"]
        assert not opening.in_flight and client.pool.idle == 1
        _, pending = await client.request_then(_note("o2"), _note("slow"), 10.0)
        opening.sent(_note("slow")[1], pending)
        assert await opening.claim(_note("other")[1]) is None  # not the opening's call
        assert client.pool.idle == 1  # the slow answer came in before claim returned
        _, pending = await client.request_then(_note("o3"), _note("slow"), 10.0)
        opening.sent(_note("slow")[1], pending)
        await opening.settle()
        assert not opening.in_flight and client.pool.idle == 1
        seen = (await client.request(*_note("end")[:3], 10.0, protocol.CallReply)).outputs
        assert seen["seen"][-7:] == ["o1", "mine", "o2", "slow", "o3", "slow", "end"]
