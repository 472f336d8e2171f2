"""The openpi policy-server protocol (``agentcanvas.policy_protocol``) and the ``policy_server``
node set that speaks it, against real servers on 127.0.0.1 (port 0) in the test's event loop:
``serve_policy`` for well-behaved ones, raw ``websockets`` servers for misbehaving ones (silent,
dropping, text-sending)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import msgpack
import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from agentcanvas.catalogue import ACTIVE_WORKSPACE_ENV
from agentcanvas.errors import NodeSetError
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.policy_protocol import (
    PolicyClient,
    PolicyServerError,
    pack,
    serve_policy,
    unpack,
)
from agentcanvas.server.registry import WorkspaceComponentRegistry

METADATA = {"policy": "test", "action_dim": 3, "norm": np.arange(3, dtype=np.float32)}


# -- helpers ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> WorkspaceComponentRegistry:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ACTIVE_WORKSPACE_ENV, raising=False)
        reg = WorkspaceComponentRegistry(workspace=tmp_path_factory.mktemp("empty_workspace"))
        reg.scan_all()
    return reg


@pytest.fixture
async def node(registry: WorkspaceComponentRegistry) -> AsyncIterator[LocalNodeSet]:
    """A fresh policy_server instance (its own connections and chunks), closed at the end."""
    instance = LocalNodeSet(registry.nodeset("policy_server"))
    try:
        yield instance
    finally:
        await instance.close()


def _url(server: Server) -> str:
    port = next(iter(server.sockets)).getsockname()[1]
    return f"ws://127.0.0.1:{port}"


def _http(server: Server) -> str:
    return _url(server).replace("ws://", "http://")


@contextlib.asynccontextmanager
async def _running(server: Server) -> AsyncIterator[Server]:
    try:
        yield server
    finally:
        server.close()
        await server.wait_closed()


async def _raw_server(handler: Callable[[ServerConnection], Any]) -> Server:
    return await serve(handler, "127.0.0.1", 0, compression=None, ping_interval=None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _chunk(n: int, rows: int = 4, dim: int = 3) -> np.ndarray:
    """The n-th chunk a `Policy` sends: distinct per request, rows distinct within it."""
    base = np.arange(rows * dim, dtype=np.float32).reshape(rows, dim)
    return base + np.float32(100 * n)


class Policy:
    """An ``infer`` recording its requests; by default its n-th answer is ``_chunk(n)`` with
    openpi's ``server_timing``."""

    def __init__(self, answer: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None):
        self.requests: list[dict[str, Any]] = []
        self.answer = answer or (
            lambda n, obs: {"actions": _chunk(n), "server_timing": {"infer_ms": 1.0 + n}}
        )

    async def __call__(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(obs)
        return self.answer(len(self.requests) - 1, obs)


def _ctx(step: int, key: str = "ep", client: str = "") -> CallContext:
    return CallContext(node_id="act", step=step, episode_key=key, client=client)


async def _act(
    instance: LocalNodeSet,
    config: dict[str, Any],
    step: int,
    key: str = "ep",
    client: str = "",
    **inputs: Any,
) -> dict[str, Any]:
    inputs.setdefault("obs", np.zeros(2, dtype=np.float32))
    return await instance.call("act", config, inputs, _ctx(step, key, client))


def _same_bits(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- pack / unpack ------------------------------------------------------------------------

ARRAYS = {
    "float32": np.array([[1.5, -0.0, np.inf], [np.nan, 1e-38, -3.25]], dtype=np.float32),
    "float32_nan_payload": np.array([0x7FC00001, 0xFF800001], dtype=np.uint32).view(np.float32),
    "float64": np.random.default_rng(0).standard_normal((3, 5)),
    "float16": np.array([0.1, 65504.0], dtype=np.float16),
    "big_endian": np.array([1.25, -2.5], dtype=">f4"),
    "uint8_image": np.random.default_rng(1).integers(0, 256, (6, 8, 3), dtype=np.uint8),
    "int64": np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max], dtype=np.int64),
    "uint64": np.array([np.iinfo(np.uint64).max], dtype=np.uint64),
    "bool": np.array([[True, False], [False, True]]),
    "zero_d": np.array(7.5, dtype=np.float64),
    "empty": np.zeros((0, 3), dtype=np.float32),
    "strided": np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::2],
    "fortran": np.asfortranarray(np.arange(12, dtype=np.int16).reshape(3, 4)),
    "unicode": np.array(["pick", "place"]),
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_arrays_round_trip_bit_exactly(name: str) -> None:
    array = ARRAYS[name]
    back = unpack(pack({"x": array}))["x"]
    assert isinstance(back, np.ndarray)
    assert back.dtype == array.dtype and back.shape == array.shape
    assert back.tobytes() == np.ascontiguousarray(array).tobytes()
    assert not back.flags.writeable  # a read-only view of the message


@pytest.mark.parametrize(
    "scalar",
    [np.float32(1.1), np.float16(-2.5), np.int64(-(2**62)), np.uint8(255), np.bool_(True)],
    ids=lambda s: type(s).__name__,
)
def test_numpy_scalars_round_trip_with_their_type(scalar: np.generic) -> None:
    back = unpack(pack(scalar))
    assert type(back) is type(scalar)
    assert back.tobytes() == scalar.tobytes()


def test_float64_scalar_is_a_plain_float_on_the_wire_as_in_openpi() -> None:
    # np.float64 subclasses float, so msgpack packs it natively (openpi's packer too).
    back = unpack(pack(np.float64(0.1)))
    assert back == 0.1 and type(back) is float


def test_nested_containers_str_and_bytes_round_trip() -> None:
    obs = {
        "prompt": "put the bowl on the plate",
        "raw": b"\x00\xffbytes",
        "nested": {"list": [1, 2.5, None, True, np.arange(3, dtype=np.int8)], "deep": {"k": "v"}},
        "images": [np.ones((2, 2, 3), dtype=np.uint8), np.zeros((1, 1, 3), dtype=np.uint8)],
    }
    back = unpack(pack(obs))
    assert back["prompt"] == obs["prompt"] and back["raw"] == obs["raw"]
    assert back["nested"]["list"][:4] == [1, 2.5, None, True]
    assert _same_bits(back["nested"]["list"][4], obs["nested"]["list"][4])
    assert back["nested"]["deep"] == {"k": "v"}
    assert all(_same_bits(a, b) for a, b in zip(back["images"], obs["images"], strict=True))


@pytest.mark.parametrize(
    "value",
    [
        np.array([object(), 1], dtype=object),
        np.array([1 + 2j], dtype=np.complex64),
        np.zeros(2, dtype=[("a", "i4"), ("b", "f4")]),
        np.zeros(2, dtype="V4"),
        np.complex64(1j),
    ],
    ids=["object", "complex", "structured", "void", "complex_scalar"],
)
def test_object_complex_and_void_are_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="cannot carry arrays of dtype"):
        pack({"x": value})


def test_other_python_objects_are_refused() -> None:
    with pytest.raises(TypeError, match="cannot carry a set"):
        pack({"x": {1, 2}})


def _openpi_pack_array(obj: Any) -> Any:
    """``openpi_client.msgpack_numpy.pack_array``, verbatim in substance."""
    if isinstance(obj, np.ndarray | np.generic) and obj.dtype.kind in ("V", "O", "c"):
        raise ValueError(f"Unsupported dtype: {obj.dtype}")
    if isinstance(obj, np.ndarray):
        return {
            b"__ndarray__": True,
            b"data": obj.tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def test_the_wire_form_is_openpis_msgpack_numpy_byte_for_byte() -> None:
    message = {
        "arrays": ARRAYS,
        "scalars": [np.float32(1.1), np.int64(-3), np.uint8(7), np.bool_(False), np.float64(2)],
        "prompt": "open the drawer",
        "raw": b"\x01\x02",
        "nested": {"a": [1, {"b": np.ones((2, 2), dtype=np.float64)}]},
    }
    assert pack(message) == msgpack.packb(message, default=_openpi_pack_array)
    for array in ARRAYS.values():
        assert pack(array) == msgpack.packb(array, default=_openpi_pack_array)


# -- the server -----------------------------------------------------------------------------


async def test_healthz_answers_200_and_a_wrong_api_key_gets_401() -> None:
    server = await serve_policy(Policy(), METADATA, "127.0.0.1", 0, "k3y")
    async with _running(server), httpx.AsyncClient(base_url=_http(server)) as http:
        health = await http.get("/healthz")
        assert health.status_code == 200 and health.text == "OK\n"
        refused = await http.get("/", headers={"Authorization": "Api-Key wrong"})
        assert refused.status_code == 401
        assert (await http.get("/")).status_code == 401


async def test_metadata_is_the_first_message_then_requests_are_answered() -> None:
    policy = Policy()
    server = await serve_policy(policy, METADATA, "127.0.0.1", 0)
    async with _running(server), connect(_url(server), compression=None) as ws:
        first = await ws.recv()
        assert isinstance(first, bytes)
        metadata = unpack(first)
        assert metadata.keys() == METADATA.keys() and metadata["policy"] == "test"
        assert _same_bits(metadata["norm"], METADATA["norm"])
        await ws.send(pack({"observation/state": np.ones(2)}))
        reply = unpack(await ws.recv())
        assert _same_bits(reply["actions"], _chunk(0))
        assert _same_bits(policy.requests[0]["observation/state"], np.ones(2))


@pytest.mark.parametrize(
    ("request_message", "error"),
    [
        ("not msgpack", "requests are binary (msgpack) messages, not text"),
        (pack([1, 2]), "a request is a dict, not a list"),
    ],
    ids=["text", "not_a_dict"],
)
async def test_a_bad_request_gets_a_text_error_and_close_1011(
    request_message: str | bytes, error: str
) -> None:
    policy = Policy()
    server = await serve_policy(policy, METADATA, "127.0.0.1", 0)
    async with _running(server), connect(_url(server), compression=None) as ws:
        await ws.recv()  # metadata
        await ws.send(request_message)
        reply = await ws.recv()
        assert isinstance(reply, str)
        assert "Traceback" in reply and error in reply
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    assert policy.requests == []


async def test_an_exception_in_infer_sends_its_traceback_and_closes_1011() -> None:
    async def infer(obs: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the policy exploded on purpose")

    server = await serve_policy(infer, METADATA, "127.0.0.1", 0)
    async with _running(server), connect(_url(server), compression=None) as ws:
        await ws.recv()
        await ws.send(pack({"x": 1}))
        reply = await ws.recv()
        assert isinstance(reply, str)
        assert "Traceback" in reply and "RuntimeError: the policy exploded on purpose" in reply
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011


async def test_one_request_at_a_time_per_connection_connections_concurrently() -> None:
    in_flight = 0
    peak = 0

    async def infer(obs: dict[str, Any]) -> dict[str, Any]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.05)
        in_flight -= 1
        return {"actions": np.array([obs["i"]])}

    async with _running(await serve_policy(infer, METADATA, "127.0.0.1", 0)) as server:
        async with connect(_url(server), compression=None) as ws:
            await ws.recv()
            for i in range(3):  # pipelined: the server must still answer them one by one
                await ws.send(pack({"i": i}))
            replies = [int(unpack(await ws.recv())["actions"][0]) for _ in range(3)]
            assert replies == [0, 1, 2]
            assert peak == 1

        async def one(i: int) -> int:
            async with connect(_url(server), compression=None) as ws:
                await ws.recv()
                await ws.send(pack({"i": i}))
                return int(unpack(await ws.recv())["actions"][0])

        assert await asyncio.gather(one(10), one(11)) == [10, 11]
        assert peak == 2


# -- PolicyClient ---------------------------------------------------------------------------


async def test_client_reads_the_metadata_and_infers() -> None:
    async with _running(await serve_policy(Policy(), METADATA, "127.0.0.1", 0)) as server:
        client = PolicyClient(_url(server))
        assert not client.connected
        metadata = await client.connect(5.0)
        assert client.connected and metadata is client.metadata and metadata["action_dim"] == 3
        reply = await client.infer({"obs": np.zeros(2)}, 5.0)
        assert _same_bits(reply["actions"], _chunk(0))
        assert reply["server_timing"] == {"infer_ms": 1.0}
        await client.close()
        assert not client.connected
        with pytest.raises(ConnectionError, match="not connected"):
            await client.infer({}, 1.0)


async def test_client_text_reply_is_an_error_and_disconnects() -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send(pack({}))
        await ws.recv()
        await ws.send("Traceback: something broke")

    async with _running(await _raw_server(handler)) as server:
        client = PolicyClient(_url(server))
        await client.connect(5.0)
        with pytest.raises(PolicyServerError, match="something broke"):
            await client.infer({"a": 1}, 5.0)
        assert not client.connected


async def test_client_refuses_text_metadata() -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send("no metadata for you")
        await ws.wait_closed()

    async with _running(await _raw_server(handler)) as server:
        client = PolicyClient(_url(server))
        with pytest.raises(PolicyServerError, match="sent text instead of its metadata"):
            await client.connect(5.0)
        assert not client.connected


async def test_client_timeout_raises_and_disconnects() -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send(pack({}))
        async for _ in ws:  # never answers
            pass

    async with _running(await _raw_server(handler)) as server:
        client = PolicyClient(_url(server))
        await client.connect(5.0)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await client.infer({"a": 1}, 0.2)
        assert 0.15 < time.monotonic() - started < 2.0
        assert not client.connected  # a late reply must not answer the next request


# -- the node: requests and chunks ----------------------------------------------------------


async def test_the_request_carries_the_inputs_under_keys_plus_extra(node: LocalNodeSet) -> None:
    policy = Policy()
    state = np.array([0.25, -1.0, 3.0], dtype=np.float64)
    image = np.random.default_rng(2).integers(0, 256, (4, 5, 3), dtype=np.uint8)
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        config = {
            "url": _url(server),
            "keys": {"obs": "state", "image": "cam/front", "prompt": "task"},
            "extra": {"mode": "eval", "n": 3},
        }
        await _act(node, config, 0, obs=state, image=image, prompt="stack", wrist_image=None)
    [request] = policy.requests
    assert set(request) == {"state", "cam/front", "task", "mode", "n"}  # None inputs left out
    assert _same_bits(request["state"], state) and _same_bits(request["cam/front"], image)
    assert request["task"] == "stack" and request["mode"] == "eval" and request["n"] == 3


async def test_the_default_keys_are_openpis_libero_names(node: LocalNodeSet) -> None:
    policy = Policy()
    image = np.zeros((2, 2, 3), dtype=np.uint8)
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        await _act(node, {"url": _url(server)}, 0, image=image, wrist_image=image, prompt="go")
    assert set(policy.requests[0]) == {
        "observation/state",
        "observation/image",
        "observation/wrist_image",
        "prompt",
    }


async def test_an_input_without_a_request_key_is_refused(node: LocalNodeSet) -> None:
    policy = Policy()
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        config = {"url": _url(server), "keys": {"obs": "state"}}
        with pytest.raises(NodeSetError, match="no request key for 'image'"):
            await _act(node, config, 0, image=np.zeros((1, 1, 3), dtype=np.uint8))
    assert policy.requests == []


async def test_the_action_is_the_servers_bytes_and_server_timing_is_ignored(
    node: LocalNodeSet,
) -> None:
    chunk = np.random.default_rng(3).standard_normal((2, 7)).astype(np.float32)
    chunk[0, 3] = np.array([0x7FC00005], dtype=np.uint32).view(np.float32)[0]  # a NaN payload
    policy = Policy(lambda n, obs: {"actions": chunk, "server_timing": {"infer_ms": 12.5}})
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        first = await _act(node, {"url": _url(server)}, 0)
        second = await _act(node, {"url": _url(server)}, 1)
    assert set(first) == {"action", "chunk_row"}
    assert first["chunk_row"] == 0 and second["chunk_row"] == 1
    assert _same_bits(first["action"], chunk[0]) and _same_bits(second["action"], chunk[1])
    assert first["action"].flags.writeable  # a copy, not a view of the message
    assert len(policy.requests) == 1


async def test_execute_steps_asks_again_every_n_steps(node: LocalNodeSet) -> None:
    policy = Policy()  # chunks of 4 rows
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        config = {"url": _url(server), "execute_steps": 2}
        rows, asked = [], []
        for step in range(6):
            out = await _act(node, config, step)
            rows.append(out["chunk_row"])
            asked.append(len(policy.requests))
            assert _same_bits(out["action"], _chunk(step // 2)[step % 2])
    assert rows == [0, 1, 0, 1, 0, 1]
    assert asked == [1, 1, 2, 2, 3, 3]


async def test_without_execute_steps_the_whole_chunk_is_used(node: LocalNodeSet) -> None:
    policy = Policy()
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        outs = [await _act(node, {"url": _url(server)}, step) for step in range(8)]
    assert [o["chunk_row"] for o in outs] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert len(policy.requests) == 2
    assert all(_same_bits(o["action"], _chunk(s // 4)[s % 4]) for s, o in enumerate(outs))


async def test_execute_steps_beyond_the_chunk_uses_the_chunk(node: LocalNodeSet) -> None:
    policy = Policy()
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        config = {"url": _url(server), "execute_steps": 10}
        rows = [(await _act(node, config, step))["chunk_row"] for step in range(5)]
    assert rows == [0, 1, 2, 3, 0] and len(policy.requests) == 2


async def test_a_single_action_is_a_chunk_of_one_row(node: LocalNodeSet) -> None:
    policy = Policy(lambda n, obs: {"actions": np.array([n, n + 0.5], dtype=np.float64)})
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        outs = [await _act(node, {"url": _url(server)}, step) for step in range(3)]
    assert [o["chunk_row"] for o in outs] == [0, 0, 0] and len(policy.requests) == 3
    assert _same_bits(outs[2]["action"], np.array([2, 2.5]))


async def test_a_new_episode_or_a_restart_starts_with_a_fresh_request(
    node: LocalNodeSet,
) -> None:
    policy = Policy()
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        config = {"url": _url(server)}
        assert (await _act(node, config, 0, key="a"))["chunk_row"] == 0
        assert (await _act(node, config, 1, key="a"))["chunk_row"] == 1
        other = await _act(node, config, 0, key="b")  # another episode: its own chunk
        assert other["chunk_row"] == 0 and len(policy.requests) == 2
        assert _same_bits(other["action"], _chunk(1)[0])
        resumed = await _act(node, config, 2, key="a")  # a's chunk is still a's
        assert resumed["chunk_row"] == 2 and len(policy.requests) == 2
        assert _same_bits(resumed["action"], _chunk(0)[2])
        restarted = await _act(node, config, 0, key="a")  # step back to 0: a new attempt
        assert restarted["chunk_row"] == 0 and len(policy.requests) == 3
        assert _same_bits(restarted["action"], _chunk(2)[0])


async def test_evict_clears_the_episodes_chunk(node: LocalNodeSet) -> None:
    policy = Policy()
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        config = {"url": _url(server)}
        await _act(node, config, 0, key="a")
        await _act(node, config, 0, key="b")
        await node.evict("a")
        assert set(node.state.chunks) == {"b"}
        after = await _act(node, config, 1, key="a")  # would be row 1 without the evict
        assert after["chunk_row"] == 0 and len(policy.requests) == 3
        assert (await _act(node, config, 1, key="b"))["chunk_row"] == 1  # b untouched
        await node.evict("never-seen")  # no error


# -- the node: connections ------------------------------------------------------------------


async def test_one_connection_per_client_reused_across_episodes(node: LocalNodeSet) -> None:
    policy = Policy(lambda n, obs: {"actions": np.array([float(n)])})
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        config = {"url": _url(server)}
        await asyncio.gather(
            _act(node, config, 0, key="e1", client="w1"),
            _act(node, config, 0, key="e2", client="w2"),
        )
        first = set(server.connections)
        assert len(first) == 2
        for step in range(1, 4):
            await _act(node, config, step, key="e1", client="w1")
            await _act(node, config, 0, key=f"x{step}", client="w1")  # another episode
            await _act(node, config, step, key="e2", client="w2")
        assert set(server.connections) == first  # the same two connections, reused
        assert len(node.state.clients) == 2 and len(policy.requests) == 11
        await node.close()
        assert not node.state.clients


async def test_connection_refused_is_an_error_naming_the_url(node: LocalNodeSet) -> None:
    url = f"ws://127.0.0.1:{_free_port()}"
    with pytest.raises(NodeSetError) as error:
        await _act(node, {"url": url, "reconnects": 1, "connect_timeout_s": 2.0}, 0)
    message = str(error.value)
    assert url in message and "failed 2 time(s)" in message
    assert "ConnectionRefusedError" in message or "Errno" in message


async def test_a_dropped_connection_is_reopened_and_the_request_sent_again(
    node: LocalNodeSet,
) -> None:
    connections: list[int] = []
    requests: list[float] = []

    async def handler(ws: ServerConnection) -> None:
        connections.append(len(connections))
        first_connection = len(connections) == 1
        await ws.send(pack({}))
        async for message in ws:
            obs = unpack(message)
            requests.append(float(obs["observation/state"][0]))
            if first_connection and len(requests) == 2:
                ws.transport.abort()  # a crash mid-run: no answer, no close frame
                return
            await ws.send(pack({"actions": obs["observation/state"] * 2}))

    async with _running(await _raw_server(handler)) as server:
        config = {"url": _url(server)}
        outs = [
            await _act(node, config, step, obs=np.array([step + 1.0], dtype=np.float32))
            for step in range(3)
        ]
    assert [float(o["action"][0]) for o in outs] == [2.0, 4.0, 6.0]
    assert requests == [1.0, 2.0, 2.0, 3.0]  # the dropped request was sent again
    assert len(connections) == 2


async def test_a_server_that_never_answers_times_out_per_attempt(node: LocalNodeSet) -> None:
    connections = 0

    async def handler(ws: ServerConnection) -> None:
        nonlocal connections
        connections += 1
        await ws.send(pack({}))
        async for _ in ws:
            pass

    async with _running(await _raw_server(handler)) as server:
        url = _url(server)
        config = {"url": url, "timeout_s": 0.3, "reconnects": 2}
        started = time.monotonic()
        with pytest.raises(NodeSetError) as error:
            await _act(node, config, 0)
        elapsed = time.monotonic() - started
    message = str(error.value)
    assert url in message and "failed 3 time(s)" in message
    assert message.count("no answer within 0.3 s") == 3
    assert 0.85 < elapsed < 3.0  # (reconnects + 1) * timeout_s, not forever
    assert connections == 3  # each timeout closed its connection, the next one reopened


async def test_an_exception_in_infer_is_an_error_with_the_servers_traceback(
    node: LocalNodeSet,
) -> None:
    calls = 0

    async def infer(obs: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        raise KeyError("observation/secret_sauce")

    async with _running(await serve_policy(infer, METADATA, "127.0.0.1", 0)) as server:
        url = _url(server)
        with pytest.raises(NodeSetError) as error:
            await _act(node, {"url": url}, 0)
    message = str(error.value)
    assert f"{url} replied with an error" in message
    assert "Traceback (most recent call last)" in message
    assert "KeyError: 'observation/secret_sauce'" in message
    assert calls == 1  # the server's error is not retried


async def test_a_reply_without_the_action_key_names_what_it_has(node: LocalNodeSet) -> None:
    policy = Policy(lambda n, obs: {"action": np.zeros(3), "server_timing": {"infer_ms": 1.0}})
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        with pytest.raises(NodeSetError) as error:
            await _act(node, {"url": _url(server)}, 0)
        message = str(error.value)
        assert "has no 'actions'" in message
        assert "['action', 'server_timing']" in message and "action_key" in message
        out = await _act(node, {"url": _url(server), "action_key": "action"}, 0)
        assert _same_bits(out["action"], np.zeros(3))


async def test_an_empty_action_is_an_error(node: LocalNodeSet) -> None:
    policy = Policy(lambda n, obs: {"actions": np.zeros((0, 3), dtype=np.float32)})
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        with pytest.raises(NodeSetError, match="answered an empty action"):
            await _act(node, {"url": _url(server)}, 0)


# -- the node: API keys ---------------------------------------------------------------------


async def test_a_server_with_an_api_key_refuses_a_client_without_it(node: LocalNodeSet) -> None:
    policy = Policy()
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0, "s3cret")) as srv:
        for config in ({"url": _url(srv)}, {"url": _url(srv), "api_key": "wrong"}):
            with pytest.raises(NodeSetError, match="401"):
                await node.call("act", config, {"obs": np.zeros(2)}, _ctx(0, client=str(config)))
    assert policy.requests == []


async def test_a_refused_api_key_is_a_node_set_error_naming_the_url(node: LocalNodeSet) -> None:
    async with _running(await serve_policy(Policy(), METADATA, "127.0.0.1", 0, "s3cret")) as srv:
        with pytest.raises(NodeSetError, match=f"{_url(srv)} refused the connection.*401"):
            await _act(node, {"url": _url(srv)}, 0)


@pytest.mark.parametrize("source", ["api_key", "api_key_env"])
async def test_the_api_key_is_accepted_from_config_or_environment(
    node: LocalNodeSet, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    policy = Policy()
    monkeypatch.setenv("TEST_POLICY_API_KEY", "s3cret")
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0, "s3cret")) as srv:
        key = (
            {"api_key": "s3cret"} if source == "api_key" else {"api_key_env": "TEST_POLICY_API_KEY"}
        )
        out = await _act(node, {"url": _url(srv), **key}, 0)
    assert _same_bits(out["action"], _chunk(0)[0]) and len(policy.requests) == 1


async def test_api_key_env_naming_an_unset_variable_is_an_error(
    node: LocalNodeSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TEST_POLICY_API_KEY_UNSET", raising=False)
    policy = Policy()
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0, "s3cret")) as srv:
        config = {"url": _url(srv), "api_key_env": "TEST_POLICY_API_KEY_UNSET"}
        with pytest.raises(NodeSetError, match="'TEST_POLICY_API_KEY_UNSET', which is not set"):
            await _act(node, config, 0)
    assert policy.requests == []


# -- the node: repeat_check and determinism -------------------------------------------------


async def test_repeat_check_against_a_deterministic_server(node: LocalNodeSet) -> None:
    def answer(n: int, obs: dict[str, Any]) -> dict[str, Any]:  # timing varies: ignored
        return {"actions": obs["observation/state"] * 3, "server_timing": {"infer_ms": float(n)}}

    policy = Policy(answer)
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        url = _url(server)
        config = {"url": url, "repeat_check": True}
        for step in range(3):
            out = await _act(node, config, step, obs=np.array([step, 1.0]))
            assert _same_bits(out["action"], np.array([3.0 * step, 3.0]))
    assert len(policy.requests) == 6  # every request sent twice
    for first, again in zip(policy.requests[::2], policy.requests[1::2], strict=True):
        assert _same_bits(first["observation/state"], again["observation/state"])
    state = node.state
    assert state.requests == state.repeat_checked == 3
    assert node.nodeset.determinism is not None
    hook = node.nodeset.determinism(state)
    assert hook == await node.determinism()
    assert hook == {"act": f"external ({url}); 3 requests repeat-checked"}


async def test_without_repeat_check_the_determinism_is_only_external(node: LocalNodeSet) -> None:
    policy = Policy()
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        url = _url(server)
        await _act(node, {"url": url}, 0)
    assert len(policy.requests) == 1 and node.state.repeat_checked == 0
    assert await node.determinism() == {"act": f"external ({url})"}


async def test_repeat_check_against_a_noisy_server_is_an_error(node: LocalNodeSet) -> None:
    rng = np.random.default_rng(4)
    policy = Policy(lambda n, obs: {"actions": rng.standard_normal((4, 3)).astype(np.float32)})
    async with _running(await serve_policy(policy, METADATA, "127.0.0.1", 0)) as server:
        url = _url(server)
        with pytest.raises(NodeSetError) as error:
            await _act(node, {"url": url, "repeat_check": True}, 0)
    message = str(error.value)
    assert "answered the same observation differently" in message and url in message
    assert len(policy.requests) == 2
    assert "repeat-checked" not in (await node.determinism())["act"]
