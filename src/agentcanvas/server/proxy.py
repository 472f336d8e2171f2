"""Proxies: reach a node set served by auto_host as if it were in-process.

A :class:`RemoteNodeSet` implements the executor's NodeSetHandle over HTTP. The executor asks
for this worker's URL override first (``GraphExecutor.get_server_url``) and otherwise uses the
URL baked into the proxy — the design note's ``server/proxy.py · _make_forward``. Every call has
a finite timeout; a dead or hung server becomes an error naming the server, never a hang.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import httpx

from agentcanvas.errors import ServerDiedError, ServerError, UserInputError
from agentcanvas.nodes.base import CallContext
from agentcanvas.nodes.manifest import LoadInfo, NodeSetManifest
from agentcanvas.server import wire

DEFAULT_CALL_TIMEOUT_S = float(os.environ.get("AGENTCANVAS_CALL_TIMEOUT_S", "60"))
CONNECT_TIMEOUT_S = 5.0


def make_client(timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> httpx.AsyncClient:
    """A keep-alive loopback client with TCP_NODELAY and finite timeouts."""
    transport = httpx.AsyncHTTPTransport(
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)], retries=0
    )
    return httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S),
        limits=httpx.Limits(max_keepalive_connections=64, keepalive_expiry=300),
    )


async def fetch_manifest(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> NodeSetManifest:
    """GET {url}/manifest; ServerError naming the URL when unreachable."""
    async with make_client(timeout_s) as client:
        try:
            response = await client.get(f"{url}/manifest")
            response.raise_for_status()
        except httpx.HTTPError as exc:
            raise ServerError(f"cannot fetch the manifest from {url}: {exc!r}") from exc
    return NodeSetManifest.model_validate(response.json())


class RemoteNodeSet:
    """A node set behind an auto_host server (one URL, one keep-alive client)."""

    def __init__(
        self, name: str, url: str, manifest: NodeSetManifest, timeout_s: float | None = None
    ) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self.manifest = manifest
        self.timeout_s = timeout_s or DEFAULT_CALL_TIMEOUT_S
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            self._client = make_client(self.timeout_s)
        return self._client

    async def _post_wire(self, path: str, payload: Any) -> Any:
        try:
            response = await self._http().post(
                f"{self.url}{path}",
                content=wire.encode(payload),
                headers={"content-type": wire.WIRE_CONTENT_TYPE},
            )
        except httpx.TimeoutException as exc:
            raise ServerError(
                f"node-set server {self.name} at {self.url} did not answer {path} "
                f"within {self.timeout_s:g} s"
            ) from exc
        except httpx.TransportError as exc:
            raise ServerDiedError(
                f"node-set server {self.name} at {self.url} is unreachable ({type(exc).__name__})"
            ) from exc
        return self._decode(response, path)

    def _decode(self, response: httpx.Response, path: str) -> Any:
        if response.status_code == 400:
            raise UserInputError(response.json().get("error", response.text))
        if response.status_code != 200:
            raise ServerError(
                f"node-set server {self.name} at {self.url} answered {path} with "
                f"HTTP {response.status_code}: {response.text[:300]}"
            )
        if response.headers.get("content-type", "").startswith(wire.WIRE_CONTENT_TYPE):
            return wire.decode(response.content)
        return response.json()

    async def call(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        payload = {"config": config, "inputs": inputs, "ctx": ctx.__dict__}
        result = await self._post_wire(f"/call/{node_name}", payload)
        outputs: dict[str, Any] = result["outputs"]
        return outputs

    async def panel_change(self, field_name: str, value: Any) -> dict[str, Any]:
        values: dict[str, Any] = await self._post_wire(
            "/panel/change", {"field": field_name, "value": value}
        )
        return values

    async def panel_action(self, action: str) -> dict[str, Any]:
        values: dict[str, Any] = await self._post_wire("/panel/action", {"action": action})
        return values

    async def panel_load(self) -> LoadInfo:
        try:
            response = await self._http().get(f"{self.url}/panel/load")
        except httpx.TransportError as exc:
            raise ServerDiedError(f"node-set server {self.name} at {self.url} is unreachable") from exc
        return LoadInfo.model_validate(self._decode(response, "/panel/load"))

    async def _post_json(self, path: str, body: dict[str, Any]) -> Any:
        try:
            response = await self._http().post(f"{self.url}{path}", json=body)
        except httpx.TransportError as exc:
            raise ServerDiedError(f"node-set server {self.name} at {self.url} is unreachable") from exc
        return self._decode(response, path)

    async def evict(self, episode_key: str) -> None:
        await self._post_json("/evict", {"episode_key": episode_key})

    async def attach(self, client_id: str) -> int:
        return int((await self._post_json("/attach", {"client": client_id}))["attached"])

    async def detach(self, client_id: str) -> int:
        return int((await self._post_json("/detach", {"client": client_id}))["attached"])

    async def determinism(self) -> dict[str, str]:
        """The server's measured per-node batch modes (e.g. ``{"embed": "padded"}``)."""
        result: dict[str, str] = await self._post_json_get("/determinism")
        return result

    async def health(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._post_json_get("/health")
        return result

    async def _post_json_get(self, path: str) -> Any:
        try:
            response = await self._http().get(f"{self.url}{path}", timeout=CONNECT_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise ServerDiedError(f"node-set server {self.name} at {self.url} is unreachable") from exc
        return self._decode(response, path)

    async def close(self) -> None:
        """Close the client only: a proxy never stops the server it talks to."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
