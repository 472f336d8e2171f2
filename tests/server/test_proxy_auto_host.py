"""auto_host + RemoteNodeSet over real loopback sockets: the wire, errors, the socket pool.

One ``core`` server (an auto_host child of this process) serves the module; ``core.select``
echoes its input ``a``, so whatever goes in must come back bit for bit.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import pytest
import pytest_asyncio

from agentcanvas import wire
from agentcanvas.catalogue import NodeSetCatalogue
from agentcanvas.errors import ProtocolError, RemoteError, ServerDiedError, ServerError
from agentcanvas.nodes.base import CallContext
from agentcanvas.server import protocol, rpc_framing
from agentcanvas.server.fleet import ServerFleet
from agentcanvas.server.launcher import LaunchedServer, LocalProcessLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest
from agentcanvas.server.rpc_client import RpcClient

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(60)]

CTX = CallContext("echo", 0)
SHORT_TIMEOUT_S = 0.5
DEADLINE_S = 10.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def core_server() -> AsyncIterator[LaunchedServer]:
    server = await LocalProcessLauncher().launch("core", None)
    try:
        yield server
    finally:
        await server.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def core(core_server: LaunchedServer) -> AsyncIterator[RemoteNodeSet]:
    remote = RemoteNodeSet("core", core_server.url, await fetch_manifest(core_server.url))
    try:
        yield remote
    finally:
        await remote.close()


async def echo(remote: RemoteNodeSet, value: Any) -> Any:
    outputs = await remote.call("select", {}, {"cond": True, "a": value, "b": None}, CTX)
    return outputs["out"]


async def test_observation_round_trip_through_a_server_is_bit_exact(core: RemoteNodeSet) -> None:
    obs = np.random.default_rng(7).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    back = await echo(core, obs)
    assert isinstance(back, np.ndarray)
    assert back.dtype == np.uint8 and back.shape == (64, 64, 3)
    assert back.tobytes() == obs.tobytes()
    assert back.flags.writeable and back.flags.c_contiguous


async def test_floats_round_trip_bit_exactly(core: RemoteNodeSet) -> None:
    values = np.array([0.1, -0.0, np.nan, np.inf, -np.inf, 1e-45, 3.4e38], dtype=np.float32)
    nested = {"emb": values, "score": 0.1 + 0.2, "ids": [np.int64(2**62), 3], "nan": float("nan")}
    back = await echo(core, nested)
    assert back["emb"].dtype == np.float32
    assert back["emb"].view(np.uint32).tolist() == values.view(np.uint32).tolist()
    assert back["score"] == 0.1 + 0.2
    assert back["ids"] == [2**62, 3] and isinstance(back["ids"][0], np.int64)
    assert np.isnan(back["nan"])


async def test_a_node_failure_is_data_and_the_server_lives_on(core: RemoteNodeSet) -> None:
    outputs = await core.call("no_such_node", {}, {}, CTX)
    assert "no_such_node" in outputs["error"]
    assert (await core.health()).ok is True


async def test_http_errors_are_translated(core: RemoteNodeSet, core_server: LaunchedServer) -> None:
    with pytest.raises(RemoteError, match=r"core at http://127\.0\.0\.1:\d+ failed /panel") as err:
        await core.panel_change("seed", 1)  # core has no panel: a server-side NodeSetError
    assert (err.value.exc_type, err.value.exc_message) == (
        "NodeSetError",
        "node set 'core' has no panel",
    )
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{core_server.url}/call/select",
            content=b"not a wire payload",
            headers={"content-type": wire.WIRE_CONTENT_TYPE},
        )
    assert response.status_code == 400
    assert "garbled wire payload" in response.json()["error"]
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{core_server.url}/call/select",
            content=wire.dumps({"inputs": {}}),
        )
    assert response.status_code == 400
    assert "not a call payload" in response.json()["error"]


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("/panel/change", wire.dumps({"value": 1}), "field"),
        ("/panel/action", wire.dumps({"action": 3}), "action"),
        ("/panel/episode", wire.dumps({"fields": "seed"}), "fields"),
        ("/evict", b"{}", "episode_key"),
        ("/attach", b'{"client": 7}', "client"),
        ("/detach", b"not json", "detach"),
    ],
)
async def test_a_body_that_does_not_fit_its_route_is_a_400_naming_the_field(
    core_server: LaunchedServer, route: str, body: bytes, field: str
) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{core_server.url}{route}", content=body)
    assert response.status_code == 400, response.text
    assert route in response.json()["error"] and field in response.json()["error"]


async def test_the_manifest_advertises_the_call_endpoint_a_borrower_calls_on(
    core_server: LaunchedServer,
) -> None:
    served = await fetch_manifest(core_server.url)
    assert served.call_endpoint is not None
    assert served.call_endpoint.startswith(("ipc://", "tcp://"))
    catalogue = NodeSetCatalogue()
    catalogue.scan_all()
    assert served.declared() == catalogue.manifest("core")  # the server adds nothing else
    fleet = ServerFleet(LocalProcessLauncher(), catalogue.manifest)
    record = await fleet.borrow("core", core_server.url)
    try:
        assert record.handle.manifest == catalogue.manifest("core")
        assert await echo(record.handle, 7) == 7  # on the endpoint the manifest named
        health = await record.handle.health()
        assert health.call == served.call_endpoint
        assert health.protocol_version == served.protocol_version == protocol.PROTOCOL_VERSION
    finally:
        await fleet.stop_all()  # a borrower only lets go of its connections
    assert core_server.is_alive()


async def test_concurrent_calls_on_one_proxy_get_their_own_answers(core: RemoteNodeSet) -> None:
    values = [np.full((8, 8), i, dtype=np.int32) for i in range(24)]
    answers = await asyncio.gather(*(echo(core, v) for v in values))
    for i, back in enumerate(answers):
        assert back.tolist() == values[i].tolist()


async def test_dead_and_hung_servers_become_errors_naming_them() -> None:
    server = await LocalProcessLauncher().launch("core", 5)
    assert server.pid is not None
    manifest = await fetch_manifest(server.url)
    remote = RemoteNodeSet("core#5", server.url, manifest, timeout_s=SHORT_TIMEOUT_S)
    try:
        assert await echo(remote, 1) == 1  # a keep-alive connection is now pooled
        os.kill(server.pid, signal.SIGSTOP)
        try:
            with pytest.raises(
                ServerError,
                match=r"core#5 at .* did not answer /call/select "
                r"within 0\.5 s",
            ) as hung:
                await echo(remote, 2)
            assert not isinstance(hung.value, ServerDiedError)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert await echo(remote, 3) == 3  # resumed: a fresh connection works again
        os.kill(server.pid, signal.SIGKILL)
        with pytest.raises(ServerDiedError, match=rf"core#5 at {server.url} is unreachable"):
            await asyncio.wait_for(echo(remote, 4), DEADLINE_S)
    finally:
        await remote.close()
        await server.stop()


def _exchange_garbage(endpoint: str) -> list[Any]:
    replies: list[Any] = []
    with rpc_framing.blocking_connection(endpoint, DEADLINE_S) as sock:
        for garbage in (
            [b"\xc1"],
            [wire.dumps([1, 2])],
            [wire.dumps({"id": 7, "op": "nope", "args": {}})],
        ):
            rpc_framing.send_message(sock, garbage)
            replies.append(wire.decode(rpc_framing.recv_message(sock)))
    with rpc_framing.blocking_connection(
        endpoint, DEADLINE_S
    ) as sock:  # bytes that are no message: answered, then closed
        sock.sendall(struct.pack("<I", 0))
        replies.append(wire.decode(rpc_framing.recv_message(sock)))
        with pytest.raises(EOFError):
            rpc_framing.recv_message(sock)
    return replies


async def test_garbage_on_the_call_socket_is_bad_input_and_the_server_lives_on(
    core: RemoteNodeSet,
) -> None:
    endpoint = (await core.health()).call
    replies = await asyncio.to_thread(_exchange_garbage, endpoint)
    assert len(replies) == 4
    for reply in replies:
        assert isinstance(reply, dict) and reply["err"]["status"] == 400, reply
    assert "not an rpc message: a message of 0 frames" in replies[-1]["err"]["message"]
    assert await echo(core, 5) == 5


async def test_an_answer_that_is_not_ours_is_a_protocol_error_naming_it() -> None:
    """A peer on the call endpoint that answers garbage, another request's answer, or a reply
    that does not fit the op's reply struct."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    client = RpcClient(f"tcp://127.0.0.1:{port}", "node-set server fake at http://x")
    peers: list[socket.socket] = []

    def answer(*frames: bytes) -> None:
        # A reply that is not ours puts the connection out of step: the client drops it and
        # the next request comes on a new one.
        peers.append(listener.accept()[0])
        rpc_framing.recv_message(peers[-1])
        rpc_framing.send_message(peers[-1], list(frames))

    try:
        for frames, detail in (
            ([b"\xc1"], "garbled wire payload"),
            ([wire.dumps({"id": 999, "ok": {"outputs": {}}})], "the reply to request 999, not 2"),
            (
                [wire.dumps({"id": 3, "ok": {"out": 1}})],
                r"Object missing required field `outputs` - at `\$\.ok`",
            ),
            ([wire.dumps({"id": 4})], "neither `ok` nor `err`"),
        ):
            answering = asyncio.ensure_future(asyncio.to_thread(answer, *frames))
            not_ours = (
                rf"fake at http://x answered /call/x with a reply that does not fit: {detail}"
            )
            with pytest.raises(ProtocolError, match=not_ours):
                await client.request("call", {}, "/call/x", DEADLINE_S, protocol.CallReply)
            await answering
        assert len(peers) == 4  # no connection was reused after a reply that was not ours
    finally:
        client.close()
        for peer in peers:
            peer.close()
        listener.close()
