"""Proxies: reach a node set served by auto_host as if it were in-process.

A :class:`RemoteNodeSet` implements the executor's NodeSetHandle. The executor asks for this
worker's URL override first (``GraphExecutor.get_server_url``) and otherwise uses the URL baked
into the proxy — the design note's ``server/proxy.py · _make_forward``.

Two transports, one server identity (its HTTP URL, named in every error):

- the per-episode hot path — ``call``, ``panel_episode``, ``evict`` — goes over the call
  socket to the endpoint the server advertises on ``/health`` and in its ``/manifest``
  (`server.rpc_client`, msgpack + raw array frames); a proxy given the endpoint (a borrower
  read it in the manifest) never asks ``/health`` for it;
- everything else (manifest, health, the panel's other requests, attach/detach, stats) is
  HTTP through ``httpx``.

Every request has a finite deadline: an explicit ``timeout_s`` given to the proxy, else the
run's per-step timeout, else the default (`server.deadlines`). A dead or hung server becomes
an error naming it, never a hang::

    timeout                          -> ServerTimeoutError "... did not answer PATH within T s"
    refused, reset, disconnected     -> ServerDiedError    "... is unreachable (...)"
    the server raised                -> RemoteError (type and message) / UserInputError (400)
    a reply that does not fit        -> ProtocolError      "... answered PATH with a reply that
                                                            does not fit: <field>"
    another major protocol version   -> ProtocolVersionError (both versions, the URL)

Every reply is decoded into its type in `server.protocol` (the table there), so a server that
answers something else is a ProtocolError naming the route and the field, never a KeyError.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import httpx
import msgspec

from agentcanvas import wire
from agentcanvas.errors import (
    ProtocolError,
    RemoteError,
    ServerDiedError,
    ServerError,
    ServerTimeoutError,
    UserInputError,
    WireError,
)
from agentcanvas.nodes.base import CallContext
from agentcanvas.nodes.handles import AttachesClients, BatchAudited, HealthChecked, SaysIfItEvicts
from agentcanvas.nodes.manifest import LoadInfo, NodeSetManifest
from agentcanvas.server import protocol
from agentcanvas.server.deadlines import call_timeout_s
from agentcanvas.server.opening import Opening, OpeningCall, call_args
from agentcanvas.server.rpc_client import RpcClient

__all__ = ["CONNECT_TIMEOUT_S", "Opening", "RemoteNodeSet", "fetch_manifest"]

CONNECT_TIMEOUT_S = 5.0
Reply = TypeVar("Reply")
Tree = dict[str, Any]  # a reply read as a map first: its version before its shape, or pydantic


class _Http:
    """An httpx client for one server, bound to the running event loop; errors name it."""

    def __init__(self, url: str, where: str) -> None:
        if not url.startswith("http://"):
            raise ServerError(f"{where}: {url!r} is not an http:// URL")
        self.url, self.where = url, where
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _session(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or loop is not self._loop:  # connections belong to a loop
            # Plain http:// only (checked above): no TLS context to build, no proxy to look up.
            self._client = httpx.AsyncClient(base_url=self.url, verify=False, trust_env=False)
            self._loop = loop
        return self._client

    async def request(
        self,
        method: str,
        path: str,
        timeout_s: float,
        reply: type[Reply],
        body: bytes | dict[str, Any] | None = None,
        *,
        params: dict[str, str] | None = None,
    ) -> Reply:
        """One request (``body``: msgpack bytes or a JSON map; ``params``: its query); the
        answer as ``reply``, or an error naming the server."""
        content, json = (body, None) if isinstance(body, bytes) else (None, body)
        headers = {"content-type": wire.WIRE_CONTENT_TYPE} if content is not None else None
        try:
            response = await self._session().request(
                method,
                path,
                content=content,
                json=json,
                headers=headers,
                params=params,
                timeout=timeout_s,
            )
        except httpx.TimeoutException as exc:
            raise ServerTimeoutError(
                f"{self.where} did not answer {path} within {timeout_s:g} s"
            ) from exc
        except httpx.TransportError as exc:
            raise ServerDiedError(f"{self.where} is unreachable ({type(exc).__name__})") from exc
        if response.status_code != 200:
            raise self._failure(response, path)
        return protocol.fit(self._value(response, path), reply, self.where, path)

    def _value(self, response: httpx.Response, path: str) -> Any:
        try:
            if response.headers.get("content-type", "").startswith(wire.WIRE_CONTENT_TYPE):
                return wire.loads(response.content)
            return response.json()
        except (WireError, ValueError) as exc:
            detail = f"neither msgpack nor JSON: {response.text[:300]!r}"
            raise protocol.not_fitting(self.where, path, detail) from exc

    def _failure(self, response: httpx.Response, path: str) -> ServerError | UserInputError:
        """The error a failed request's body (`protocol.ErrorReply`) reports."""
        status = response.status_code
        try:
            reported = msgspec.json.decode(response.content, type=protocol.ErrorReply)
        except msgspec.DecodeError:  # ValidationError included
            detail = f"HTTP {status} without an error body: {response.text[:300]!r}"
            return protocol.not_fitting(self.where, path, detail)
        if status == 400:
            return UserInputError(reported.error)
        return RemoteError(
            f"{self.where} failed {path}: {reported.type}: {reported.message}",
            reported.type,
            reported.message,
        )

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()


async def fetch_manifest(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> protocol.ServedManifest:
    """GET {url}/manifest (with the server's protocol version and call endpoint); ServerError
    naming the URL when unreachable, ProtocolVersionError when it speaks another major
    version, ProtocolError when its reply does not fit."""
    where = f"node-set server at {url}"
    http = _Http(url.rstrip("/"), where)
    try:
        tree = await http.request("GET", protocol.MANIFEST, timeout_s, Tree)
    except ProtocolError:
        raise
    except ServerError as exc:
        raise ServerError(f"cannot fetch the manifest from {url}: {exc}") from exc
    finally:
        await http.aclose()
    return protocol.fit_versioned(tree, protocol.ServedManifest, where, protocol.MANIFEST)


class RemoteNodeSet(HealthChecked, AttachesClients, SaysIfItEvicts, BatchAudited):
    """A node set behind an auto_host server: HTTP at ``url``, calls on its rpc endpoint
    (``call_endpoint`` when known, else asked of ``/health`` before the first call). Its
    capabilities besides `NodeSetHandle` are those of `nodes.handles` it subclasses."""

    def __init__(
        self,
        name: str,
        url: str,
        manifest: NodeSetManifest,
        timeout_s: float | None = None,
        call_endpoint: str | None = None,
        attaches: bool = True,
    ) -> None:
        """``call_endpoint`` and ``attaches`` (whether its call connections may attach shared
        memory: `protocol.attaches_memory` of the server's version) when the caller knows
        them; else the first call asks ``/health``."""
        self.name = name
        self.url = url.rstrip("/")
        self.manifest = manifest
        self.timeout_s = timeout_s  # None: the run's per-step timeout (server.deadlines)
        self.where = f"node-set server {name} at {self.url}"
        self._http = _Http(self.url, self.where)
        self._rpc = RpcClient(call_endpoint, self.where, attaches) if call_endpoint else None
        self._evicts = True  # until the server says its node set has no evict hook
        self.opening = OpeningCall(self.where, self._deadline)  # sent with a panel request

    def _deadline(self) -> float:
        return self.timeout_s or call_timeout_s()

    async def _calls(self) -> RpcClient:
        """The rpc client, once the server has told us its call endpoint."""
        if self._rpc is None:
            health = await self.health(min(self._deadline(), CONNECT_TIMEOUT_S))
            attaches = protocol.attaches_memory(health.protocol_version)
            self._rpc = RpcClient(health.call, self.where, attaches)
        return self._rpc

    async def _request(self, op: str, args: dict[str, Any], what: str, reply: type[Reply]) -> Reply:
        calls = self._rpc or await self._calls()
        return await calls.request(op, args, what, self._deadline(), reply)

    async def _post(self, path: str, body: bytes | dict[str, Any], reply: type[Reply]) -> Reply:
        """POST msgpack ``bytes`` or a JSON map."""
        return await self._http.request("POST", path, self._deadline(), reply, body)

    async def _get(
        self, path: str, reply: type[Reply], params: dict[str, str] | None = None
    ) -> Reply:
        return await self._http.request("GET", path, self._deadline(), reply, params=params)

    async def call(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        args = call_args(node_name, config, inputs, ctx)
        if self.opening.in_flight:  # sent with the panel request: its answer may be this one
            claimed = await self.opening.claim(args)
            if claimed is not None:
                return claimed
        what = protocol.call_path(node_name)
        return (await self._request(protocol.OP_CALL, args, what, protocol.CallReply)).outputs

    async def panel_change(self, field_name: str, value: Any) -> dict[str, Any]:
        body = wire.dumps({"field": field_name, "value": value})
        return await self._post(protocol.PANEL_CHANGE, body, protocol.PanelValues)

    async def panel_action(self, action: str) -> dict[str, Any]:
        body = wire.dumps({"action": action})
        return await self._post(protocol.PANEL_ACTION, body, protocol.PanelValues)

    async def panel_episode(
        self, fields: list[tuple[str, Any]], opening: Opening | None = None
    ) -> LoadInfo:
        """Reset, set fields, play and load in one request (see ``nodes.base.start_episode``).

        ``opening``, the call the episode's first firing on this node set will make
        (`graph.executor.opening_firing`), goes in the same write: the server runs it right
        after the panel request, and this proxy's `call` with exactly those arguments gets
        its answer instead of sending it again (`server.opening`: ``self.opening`` owns that
        answer until it is claimed, settled or dropped)."""
        await self.opening.settle()
        args = {"fields": [list(f) for f in fields]}
        where = protocol.PANEL_EPISODE
        if opening is None:
            tree = await self._request(protocol.OP_PANEL_EPISODE, args, where, Tree)
        else:
            node_name = opening[0]
            call = call_args(*opening)
            calls = self._rpc or await self._calls()
            tree, pending = await calls.request_then(
                (protocol.OP_PANEL_EPISODE, args, where, Tree),
                (protocol.OP_CALL, call, protocol.call_path(node_name), protocol.CallReply),
                self._deadline(),
            )
            self.opening.sent(call, pending)
        return protocol.fit(tree, LoadInfo, self.where, where)

    async def panel_load(self) -> LoadInfo:
        return await self._get(protocol.PANEL_LOAD, LoadInfo)

    @property
    def evicts(self) -> bool:
        """False once the server said its node set keeps no per-episode state."""
        return self._evicts

    async def evict(self, episode_key: str) -> None:
        """Evict ``episode_key``; skipped once the server said its node set keeps no
        per-episode state (its answer to an eviction is whether it has an evict hook)."""
        if not self._evicts:
            return
        args = {"episode_key": episode_key}
        self._evicts = await self._request(
            protocol.OP_EVICT, args, protocol.EVICT, protocol.KeepsState
        )

    async def attach(self, client_id: str) -> int:
        body = {"client": client_id}
        return (await self._post(protocol.ATTACH, body, protocol.AttachedReply)).attached

    async def detach(self, client_id: str) -> int:
        body = {"client": client_id}
        return (await self._post(protocol.DETACH, body, protocol.AttachedReply)).attached

    async def batch_audit(self, run_id: str) -> dict[str, Any]:
        """``/batch_audit`` for ``run_id``: each batched function's start-up check and audit
        (`server.batch_audit`); ``{}`` from a server that keeps no audit."""
        return await self._get(protocol.BATCH_AUDIT, Tree, params={"run": run_id})

    async def batch_certify(self, run_id: str, on: bool) -> bool:
        """Have the server audit every batched row of ``run_id`` (or stop); False when it
        keeps no audit."""
        body = {"run": run_id, "certify": on}
        return (await self._post(protocol.BATCH_CERTIFY, body, protocol.OkReply)).ok

    async def determinism(self) -> dict[str, str]:
        """The server's measured per-node batch modes (e.g. ``{"embed": "padded"}``)."""
        return await self._get(protocol.DETERMINISM, protocol.DeterminismModes)

    async def health(self, timeout_s: float = CONNECT_TIMEOUT_S) -> protocol.HealthReply:
        """``/health``; ProtocolVersionError when the server speaks another major version."""
        tree = await self._http.request("GET", protocol.HEALTH, timeout_s, Tree)
        return protocol.fit_versioned(tree, protocol.HealthReply, self.where, protocol.HEALTH)

    async def close(self) -> None:
        """Close the connections only: a proxy never stops the server it talks to."""
        self.opening.drop()
        if self._rpc is not None:
            self._rpc.close()
        await self._http.aclose()
