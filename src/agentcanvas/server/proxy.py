"""Proxies: reach a node set served by auto_host as if it were in-process.

A :class:`RemoteNodeSet` implements the executor's NodeSetHandle. The executor asks for this
worker's URL override first (``GraphExecutor.get_server_url``) and otherwise uses the URL baked
into the proxy — the design note's ``server/proxy.py · _make_forward``.

Two transports, one server identity (its HTTP URL, named in every error):

- the per-episode hot path — ``call``, ``panel_episode``, ``evict`` — goes over ZeroMQ to the
  call endpoint the server advertises on ``/health`` and in its ``/manifest`` (`server.rpc`,
  msgpack + raw array frames); a proxy given the endpoint (a borrower read it in the
  manifest) never asks ``/health`` for it;
- everything else (manifest, health, the panel's other requests, attach/detach, stats) is
  HTTP through ``httpx``.

Every request has a finite deadline: an explicit ``timeout_s`` given to the proxy, else the
run's per-step timeout, else the default (`server.deadlines`). A dead or hung server becomes
an error naming it, never a hang::

    timeout                          -> ServerTimeoutError "... did not answer PATH within T s"
    refused, reset, disconnected     -> ServerDiedError    "... is unreachable (...)"
    the server raised                -> RemoteError (type and message) / UserInputError (400)
    an answer that is not ours       -> ServerError        "... answered PATH with garbage"
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from agentcanvas import wire
from agentcanvas.errors import (
    RemoteError,
    ServerDiedError,
    ServerError,
    ServerTimeoutError,
    UserInputError,
    WireError,
)
from agentcanvas.nodes.base import CallContext
from agentcanvas.nodes.manifest import LoadInfo, NodeSetManifest
from agentcanvas.server import protocol
from agentcanvas.server.deadlines import call_timeout_s
from agentcanvas.server.rpc import RpcClient

CONNECT_TIMEOUT_S = 5.0


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
        content: bytes | None = None,
        json: dict[str, Any] | None = None,
    ) -> Any:
        """One request; the answer's value (msgpack or JSON) or an error naming the server."""
        headers = {"content-type": wire.WIRE_CONTENT_TYPE} if content is not None else None
        try:
            response = await self._session().request(
                method, path, content=content, json=json, headers=headers, timeout=timeout_s
            )
        except httpx.TimeoutException as exc:
            raise ServerTimeoutError(
                f"{self.where} did not answer {path} within {timeout_s:g} s"
            ) from exc
        except httpx.TransportError as exc:
            raise ServerDiedError(f"{self.where} is unreachable ({type(exc).__name__})") from exc
        return self._decode(response, path)

    def _decode(self, response: httpx.Response, path: str) -> Any:
        if response.status_code != 200:
            reported = _json_map(response)
            if response.status_code == 400:
                raise UserInputError(str(reported.get("error", response.text)))
            if "type" in reported:
                exc_type, message = str(reported["type"]), str(reported.get("message", ""))
                raise RemoteError(
                    f"{self.where} failed {path}: {exc_type}: {message}", exc_type, message
                )
            raise ServerError(
                f"{self.where} answered {path} with HTTP {response.status_code}: "
                f"{response.text[:300]}"
            )
        try:
            if response.headers.get("content-type", "").startswith(wire.WIRE_CONTENT_TYPE):
                return wire.loads(response.content)
            return response.json()
        except (WireError, ValueError) as exc:
            raise ServerError(
                f"{self.where} answered {path} with garbage: {response.text[:300]!r}"
            ) from exc

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._loop is asyncio.get_running_loop():
            await client.aclose()


def _json_map(response: httpx.Response) -> dict[str, Any]:
    try:
        value = response.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def fetch_manifest(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> protocol.ServedManifest:
    """GET {url}/manifest (with the server's call endpoint); ServerError naming the URL when
    unreachable."""
    http = _Http(url.rstrip("/"), f"node-set server at {url}")
    try:
        value = await http.request("GET", protocol.MANIFEST, timeout_s)
    except ServerError as exc:
        raise ServerError(f"cannot fetch the manifest from {url}: {exc}") from exc
    finally:
        await http.aclose()
    return protocol.ServedManifest.model_validate(value)


class RemoteNodeSet:
    """A node set behind an auto_host server: HTTP at ``url``, calls on its rpc endpoint
    (``call_endpoint`` when known, else asked of ``/health`` before the first call)."""

    def __init__(
        self,
        name: str,
        url: str,
        manifest: NodeSetManifest,
        timeout_s: float | None = None,
        call_endpoint: str | None = None,
    ) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self.manifest = manifest
        self.timeout_s = timeout_s  # None: the run's per-step timeout (server.deadlines)
        self.where = f"node-set server {name} at {self.url}"
        self._http = _Http(self.url, self.where)
        self._rpc = RpcClient(call_endpoint, self.where) if call_endpoint else None
        self._evicts = True  # until the server says its node set has no evict hook

    def _deadline(self) -> float:
        return self.timeout_s or call_timeout_s()

    async def _calls(self) -> RpcClient:
        """The rpc client, once the server has told us its call endpoint."""
        if self._rpc is None:
            health = await self._http.request(
                "GET", protocol.HEALTH, min(self._deadline(), CONNECT_TIMEOUT_S)
            )
            endpoint = health.get("call") if isinstance(health, dict) else None
            if not isinstance(endpoint, str):
                raise ServerError(f"{self.where} advertises no call endpoint on /health")
            self._rpc = RpcClient(endpoint, self.where)
        return self._rpc

    async def _request(self, op: str, args: dict[str, Any], what: str) -> Any:
        return await (await self._calls()).request(op, args, what, self._deadline())

    async def _post_wire(self, path: str, payload: Any) -> Any:
        return await self._http.request("POST", path, self._deadline(), content=wire.dumps(payload))

    async def _post_json(self, path: str, body: dict[str, Any]) -> Any:
        return await self._http.request("POST", path, self._deadline(), json=body)

    async def _get(self, path: str, timeout_s: float | None = None) -> Any:
        return await self._http.request("GET", path, timeout_s or self._deadline())

    async def call(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        args = {"node": node_name, "config": config, "inputs": inputs, "ctx": ctx.__dict__}
        result = await self._request(protocol.OP_CALL, args, protocol.call_path(node_name))
        outputs: dict[str, Any] = result["outputs"]
        return outputs

    async def panel_change(self, field_name: str, value: Any) -> dict[str, Any]:
        values: dict[str, Any] = await self._post_wire(
            protocol.PANEL_CHANGE, {"field": field_name, "value": value}
        )
        return values

    async def panel_action(self, action: str) -> dict[str, Any]:
        values: dict[str, Any] = await self._post_wire(protocol.PANEL_ACTION, {"action": action})
        return values

    async def panel_episode(self, fields: list[tuple[str, Any]]) -> LoadInfo:
        """Reset, set fields, play and load in one request (see ``nodes.base.start_episode``)."""
        fields_list = [list(f) for f in fields]
        info = await self._request(
            protocol.OP_PANEL_EPISODE, {"fields": fields_list}, protocol.PANEL_EPISODE
        )
        return LoadInfo.model_validate(info)

    async def panel_load(self) -> LoadInfo:
        return LoadInfo.model_validate(await self._get(protocol.PANEL_LOAD))

    async def evict(self, episode_key: str) -> None:
        """Evict ``episode_key``; skipped once the server said its node set keeps no
        per-episode state (its answer to an eviction is whether it has an evict hook)."""
        if not self._evicts:
            return
        keeps_state = await self._request(
            protocol.OP_EVICT, {"episode_key": episode_key}, protocol.EVICT
        )
        self._evicts = keeps_state is not False

    async def attach(self, client_id: str) -> int:
        return int((await self._post_json(protocol.ATTACH, {"client": client_id}))["attached"])

    async def detach(self, client_id: str) -> int:
        return int((await self._post_json(protocol.DETACH, {"client": client_id}))["attached"])

    async def determinism(self) -> dict[str, str]:
        """The server's measured per-node batch modes (e.g. ``{"embed": "padded"}``)."""
        result: dict[str, str] = await self._get(protocol.DETERMINISM)
        return result

    async def health(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._get(protocol.HEALTH, CONNECT_TIMEOUT_S)
        return result

    async def close(self) -> None:
        """Close the connections only: a proxy never stops the server it talks to."""
        if self._rpc is not None:
            self._rpc.close()
        await self._http.aclose()
