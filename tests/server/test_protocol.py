"""The node-set protocol seen from the client: its version and replies that do not fit.

The servers here are real and on loopback, but say what ``auto_host`` never would: a tiny
HTTP server with canned replies (`support.canned_http`) and an `RpcServer` whose handlers
answer the wrong shape. What a real ``auto_host`` advertises is checked in
``test_proxy_auto_host.py``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agentcanvas.errors import ProtocolError, ProtocolVersionError, RemoteError
from agentcanvas.nodes.base import CallContext
from agentcanvas.nodes.manifest import NodeSetManifest
from agentcanvas.server import protocol
from agentcanvas.server.fleet import ServerFleet
from agentcanvas.server.launcher import LocalProcessLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest
from agentcanvas.server.rpc_server import Handler, RpcServer
from support.canned_http import Canned, canned_server

pytestmark = [pytest.mark.timeout(60)]  # asyncio_mode = "auto"

MANIFEST = NodeSetManifest(name="probe")
CALL_ENDPOINT = "tcp://127.0.0.1:9"  # never dialled: these tests fail before any call
CTX = CallContext("probe", 0)


def served(version: str = protocol.PROTOCOL_VERSION, **changes: Any) -> dict[str, Any]:
    """A /manifest reply as auto_host sends it, at ``version``, with ``changes``."""
    body = MANIFEST.model_dump(mode="json")
    return body | {"protocol_version": version, "call_endpoint": CALL_ENDPOINT} | changes


def health(version: str = protocol.PROTOCOL_VERSION, **changes: Any) -> dict[str, Any]:
    """A /health reply as auto_host sends it, at ``version``, with ``changes``."""
    body = {"ok": True, "nodeset": "probe", "tag": None, "pid": 1, "call": CALL_ENDPOINT}
    return body | {"protocol_version": version} | changes


def fleet() -> ServerFleet:
    return ServerFleet(LocalProcessLauncher(), lambda name: MANIFEST)


# -- the version ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply",
    [served("3.0"), served("1.0"), {"protocol_version": "3.0", "node_set": {"name": "probe"}}],
    ids=["3.0", "1.0 (ZeroMQ calls)", "3.0, another shape"],
)
async def test_a_server_of_another_major_version_is_refused_when_borrowed(
    reply: dict[str, Any],
) -> None:
    servers = fleet()
    with (
        canned_server({protocol.MANIFEST: Canned(reply)}) as url,
        pytest.raises(ProtocolVersionError) as refused,
    ):
        await servers.borrow("probe", url)
    message = str(refused.value)
    advertised = reply["protocol_version"]
    assert f"at {url} speaks protocol {advertised}, " in message
    assert f"this client speaks {protocol.PROTOCOL_VERSION}" in message
    assert servers.records == {}  # nothing borrowed


async def test_a_server_of_another_minor_version_is_borrowed() -> None:
    minor = f"{protocol.major(protocol.PROTOCOL_VERSION)}.99"
    servers = fleet()
    with canned_server({protocol.MANIFEST: Canned(served(minor, added_later=1))}) as url:
        record = await servers.borrow("probe", url)
    assert record.handle.manifest == MANIFEST
    await servers.stop_all()


async def test_health_of_another_major_version_is_refused_naming_the_server() -> None:
    with canned_server({protocol.HEALTH: Canned(health("7.1"))}) as url:
        remote = RemoteNodeSet("probe", url, MANIFEST)
        try:
            with pytest.raises(ProtocolVersionError, match=rf"probe at {url} speaks protocol 7\.1"):
                await remote.health()
            with pytest.raises(ProtocolVersionError):  # and so no call goes out
                await remote.call("noop", {}, {}, CTX)
        finally:
            await remote.close()


@pytest.mark.parametrize("advertised", ["99.0", "0.0"])
def test_only_the_major_version_decides(advertised: str) -> None:
    protocol.check_version(f"{protocol.major(protocol.PROTOCOL_VERSION)}.42", "server")
    with pytest.raises(ProtocolVersionError, match=rf"server speaks protocol {advertised}"):
        protocol.check_version(advertised, "server")


# -- HTTP replies that do not fit -----------------------------------------------------------
Ask = Callable[[RemoteNodeSet], Awaitable[Any]]
CASES: list[tuple[str, Canned, Ask, str]] = [
    (protocol.HEALTH, Canned(health(pid="one")), lambda r: r.health(), "`$.pid`"),
    (protocol.HEALTH, Canned(health(call=None)), lambda r: r.health(), "`$.call`"),
    (
        protocol.HEALTH,
        Canned({k: v for k, v in health().items() if k != "protocol_version"}),
        lambda r: r.health(),
        "missing required field `protocol_version`",
    ),
    (protocol.HEALTH, Canned(health("one")), lambda r: r.health(), "`$.protocol_version`"),
    (protocol.HEALTH, Canned([1, 2]), lambda r: r.health(), "Expected `object`, got `array`"),
    (protocol.HEALTH, Canned(b"<html>"), lambda r: r.health(), "neither msgpack nor JSON"),
    (protocol.ATTACH, Canned({"attached": "2"}), lambda r: r.attach("w0"), "`$.attached`"),
    (protocol.DETACH, Canned({}), lambda r: r.detach("w0"), "field `attached`"),
    (protocol.PANEL_LOAD, Canned({"scene_id": "s"}), lambda r: r.panel_load(), "`$.episode_id`"),
    (
        protocol.PANEL_ACTION,
        Canned(["seed", 1]),
        lambda r: r.panel_action("reset"),
        "Expected `object`",
    ),
    (
        protocol.DETERMINISM,
        Canned({"embed": 3}),
        lambda r: r.determinism(),
        "Expected `str`, got `int`",
    ),
    (
        protocol.PANEL_CHANGE,
        Canned({"detail": "Internal Server Error"}, 500),
        lambda r: r.panel_change("seed", 1),
        "HTTP 500 without an error body",
    ),
    (
        protocol.PANEL_CHANGE,
        Canned({"error": "UserInputError: no"}, 400),
        lambda r: r.panel_change("seed", 1),
        "HTTP 400 without an error body",
    ),
]


@pytest.mark.parametrize(
    ("route", "reply", "ask", "field"), CASES, ids=[f"{c[0]} {c[3]}" for c in CASES]
)
async def test_a_reply_that_does_not_fit_is_a_protocol_error_naming_route_and_field(
    route: str, reply: Canned, ask: Ask, field: str
) -> None:
    with canned_server({route: reply}) as url:
        remote = RemoteNodeSet("probe", url, MANIFEST)
        try:
            with pytest.raises(ProtocolError) as err:
                await ask(remote)
        finally:
            await remote.close()
    expected = f"node-set server probe at {url} answered {route} with a reply that does not fit: "
    assert str(err.value).startswith(expected), str(err.value)
    assert field in str(err.value)
    assert not isinstance(err.value, ProtocolVersionError)


@pytest.mark.parametrize(
    ("reply", "field"),
    [
        (
            {k: v for k, v in served().items() if k != "protocol_version"},
            "missing required field `protocol_version`",
        ),
        (served(name="Not A Name"), "`$.name`"),
        (served(nodes=[{"name": "n", "inputs": "x"}]), "`$.nodes.0.inputs`"),
    ],
    ids=["no version", "name", "nested"],
)
async def test_a_manifest_that_does_not_fit_names_the_route_and_field(
    reply: dict[str, Any], field: str
) -> None:
    with (
        canned_server({protocol.MANIFEST: Canned(reply)}) as url,
        pytest.raises(ProtocolError, match=re.escape(field)) as err,
    ):
        await fetch_manifest(url)
    assert f"at {url} answered /manifest with a reply that does not fit: " in str(err.value)


async def test_an_error_body_that_fits_is_the_servers_error() -> None:
    body = {"error": "KeyError: 'x'", "type": "KeyError", "message": "'x'"}
    with canned_server({protocol.PANEL_ACTION: Canned(body, 500)}) as url:
        remote = RemoteNodeSet("probe", url, MANIFEST)
        try:
            with pytest.raises(RemoteError, match=r"failed /panel/action: KeyError: 'x'") as err:
                await remote.panel_action("play")
        finally:
            await remote.close()
    assert (err.value.exc_type, err.value.exc_message) == ("KeyError", "'x'")


# -- rpc replies that do not fit ------------------------------------------------------------
@asynccontextmanager
async def rpc_server(handlers: dict[str, Handler]) -> AsyncIterator[str]:
    """A real RpcServer in this process, serving ``handlers``; yields its endpoint."""
    server = RpcServer(handlers)
    async with asyncio.TaskGroup() as tasks:
        serving = tasks.create_task(server.serve())
        try:
            yield server.endpoint
        finally:
            serving.cancel()


def answering(value: Any) -> Handler:
    async def handler(args: dict[str, Any]) -> Any:
        return value

    return handler


@pytest.mark.parametrize(
    ("op", "value", "ask", "what", "field"),
    [
        (
            protocol.OP_CALL,
            {"out": 1},
            lambda r: r.call("select", {}, {}, CTX),
            "/call/select",
            "missing required field `outputs` - at `$.ok`",
        ),
        (
            protocol.OP_CALL,
            {"outputs": [1]},
            lambda r: r.call("select", {}, {}, CTX),
            "/call/select",
            "`$.ok.outputs`",
        ),
        (
            protocol.OP_EVICT,
            "yes",
            lambda r: r.evict("run:0"),
            protocol.EVICT,
            "Expected `bool`, got `str` - at `$.ok`",
        ),
        (
            protocol.OP_PANEL_EPISODE,
            {"episode_id": 3},
            lambda r: r.panel_episode([]),
            protocol.PANEL_EPISODE,
            "`$.episode_id`",
        ),
    ],
    ids=["call, no outputs", "call, outputs a list", "evict", "panel_episode"],
)
async def test_an_rpc_reply_that_does_not_fit_is_a_protocol_error_naming_op_and_field(
    op: str, value: Any, ask: Ask, what: str, field: str
) -> None:
    async with rpc_server({op: answering(value)}) as endpoint:
        remote = RemoteNodeSet("probe", "http://127.0.0.1:9", MANIFEST, call_endpoint=endpoint)
        try:
            with pytest.raises(ProtocolError) as err:
                await ask(remote)
        finally:
            await remote.close()
    message = str(err.value)
    assert f"probe at http://127.0.0.1:9 answered {what} with a reply that does not fit" in message
    assert field in message, message
