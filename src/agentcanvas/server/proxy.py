"""Proxies: reach a node set served by auto_host as if it were in-process.

A :class:`RemoteNodeSet` implements the executor's NodeSetHandle over HTTP. The executor asks
for this worker's URL override first (``GraphExecutor.get_server_url``) and otherwise uses the
URL baked into the proxy — the design note's ``server/proxy.py · _make_forward``. Every call has
a finite timeout; a dead or hung server becomes an error naming the server, never a hang.

The client is a lean HTTP/1.1 client on asyncio streams: a small pool of keep-alive loopback
connections with TCP_NODELAY, one request in flight per connection. It adds some 50 µs to a
call where httpx.AsyncClient added about 1 ms (``bench/rpc.py``, which also shows the other
layers). Errors, translated in one place (`_Client.request`)::

    timeout                          -> ServerError      "... did not answer PATH within T s"
    refused, reset, EOF mid-answer   -> ServerDiedError  "... is unreachable (ErrorName)"
    an answer that is not HTTP/1.1   -> ServerError      "... answered PATH with garbage"
    HTTP 400 / other non-200         -> UserInputError / ServerError (see `_Client.decode`)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from agentcanvas.errors import (
    RemoteError,
    ServerDiedError,
    ServerError,
    ServerTimeoutError,
    UserInputError,
)
from agentcanvas.nodes.base import CallContext
from agentcanvas.nodes.manifest import LoadInfo, NodeSetManifest
from agentcanvas.server import wire
from agentcanvas.server.deadlines import call_timeout_s

CONNECT_TIMEOUT_S = 5.0
MAX_IDLE_CONNECTIONS = 64
_MAX_HEAD_BYTES = 64 * 1024
_WIRE_TYPE = wire.WIRE_CONTENT_TYPE.encode()
_JSON_TYPE = b"application/json"


class _ProtocolError(Exception):
    """The server's answer is not HTTP/1.1 as this client reads it."""


@dataclass(frozen=True)
class _Response:
    status: int
    content_type: bytes
    body: bytes

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.body)


class _Connection:
    """One keep-alive HTTP/1.1 connection; `received` tells whether the server answered."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.received = False
        self.keep_alive = True

    @classmethod
    async def open(cls, host: str, port: int) -> _Connection:
        reader, writer = await asyncio.open_connection(host, port, limit=_MAX_HEAD_BYTES)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    def usable(self) -> bool:
        """False once the server closed it (e.g. its keep-alive timeout) or said `close`."""
        return self.keep_alive and not self.reader.at_eof() and not self.writer.is_closing()

    async def exchange(self, head: bytes, body: bytes) -> _Response:
        self.received = False
        self.writer.writelines((head, body))  # one send: head and body in one segment
        await self.writer.drain()
        status, headers = await self._read_head()
        self.received = True
        content = await self._read_body(headers)
        if headers.get(b"connection", b"").lower() == b"close":
            self.keep_alive = False
        return _Response(status, headers.get(b"content-type", b""), content)

    async def _read_head(self) -> tuple[int, dict[bytes, bytes]]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise _ProtocolError(f"bad status line {lines[0][:80]!r}")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return int(parts[1]), headers

    async def _read_body(self, headers: dict[bytes, bytes]) -> bytes:
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            return await self._read_chunked()
        length = headers.get(b"content-length")
        if length is None:
            self.keep_alive = False  # the body ends where the connection does
            return await self.reader.read()
        if not length.isdigit():
            raise _ProtocolError(f"bad content-length {length[:40]!r}")
        return await self.reader.readexactly(int(length))

    async def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size_line = (await self.reader.readuntil(b"\r\n")).split(b";")[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError as exc:
                raise _ProtocolError(f"bad chunk size {size_line[:40]!r}") from exc
            if size == 0:
                while await self.reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                return b"".join(chunks)
            chunks.append((await self.reader.readexactly(size + 2))[:-2])

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):  # RuntimeError: its event loop is closed
            self.writer.close()


class _Client:
    """A pool of keep-alive connections to one server, bound to the running event loop."""

    def __init__(self, name: str, url: str, timeout_s: float | None) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ServerError(f"node-set server {name}: {url!r} is not an http:// URL")
        self.name, self.url, self.timeout_s = name, url, timeout_s
        self.where = f"node-set server {name} at {url}" if name else f"node-set server at {url}"
        self._host, self._port, self._prefix = parts.hostname, parts.port or 80, parts.path
        self._host_header = f"{self._host}:{self._port}".encode()
        self._idle: list[_Connection] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def request(
        self, method: bytes, path: str, body: bytes = b"", content_type: bytes = b"",
        timeout_s: float | None = None,
    ) -> _Response:
        """One request with a finite deadline; foreign errors become errors naming the server."""
        timeout_s = timeout_s or self.timeout_s or call_timeout_s()
        where = self.where  # the server's name and URL, in every error
        try:
            async with asyncio.timeout(timeout_s):
                return await self._exchange(self._head(method, path, body, content_type), body)
        except TimeoutError as exc:  # before OSError: TimeoutError is one
            raise ServerTimeoutError(
                f"{where} did not answer {path} within {timeout_s:g} s"
            ) from exc
        except (_ProtocolError, asyncio.LimitOverrunError) as exc:  # Overrun: a line > 64 KiB
            raise ServerError(f"{where} answered {path} with garbage: {exc!r}") from exc
        except (OSError, EOFError) as exc:
            raise ServerDiedError(f"{where} is unreachable ({type(exc).__name__})") from exc

    def decode(self, response: _Response, path: str) -> Any:
        """The answer's value: wire or JSON; HTTP errors as UserInputError / ServerError."""
        if response.status == 400:
            raise UserInputError(str(_json_or_text(response).get("error", response.text())))
        reported = _json_or_text(response)
        if response.status != 200 and "type" in reported:
            exc_type, exc_message = str(reported["type"]), str(reported.get("message", ""))
            raise RemoteError(
                f"{self.where} failed {path}: {exc_type}: {exc_message}", exc_type, exc_message
            )
        if response.status != 200:
            raise ServerError(
                f"{self.where} answered {path} with HTTP {response.status}: "
                f"{response.text()[:300]}"
            )
        if response.content_type.startswith(_WIRE_TYPE):
            return wire.decode(response.body)
        try:
            return response.json()
        except ValueError as exc:
            raise ServerError(
                f"{self.where} answered {path} with neither wire nor JSON: "
                f"{response.text()[:300]!r}"
            ) from exc

    def _head(self, method: bytes, path: str, body: bytes, content_type: bytes) -> bytes:
        target = quote(self._prefix + path, safe="/:@").encode()
        lines = [method + b" " + target + b" HTTP/1.1", b"Host: " + self._host_header]
        if content_type:
            lines.append(b"Content-Type: " + content_type)
        if body or method == b"POST":
            lines.append(b"Content-Length: " + str(len(body)).encode())
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _exchange(self, head: bytes, body: bytes) -> _Response:
        conn = self._take_idle()
        if conn is not None:
            try:
                return await self._use(conn, head, body)
            except (OSError, EOFError):
                if conn.received:
                    raise
                # The server closed this idle connection before reading our request (its
                # keep-alive timeout): the request was not run, so one fresh try is safe.
        return await self._use(await _Connection.open(self._host, self._port), head, body)

    async def _use(self, conn: _Connection, head: bytes, body: bytes) -> _Response:
        try:
            response = await conn.exchange(head, body)
        except BaseException:
            conn.close()  # mid-request (or cancelled): its state is unknown
            raise
        if conn.usable() and len(self._idle) < MAX_IDLE_CONNECTIONS:
            self._idle.append(conn)
        else:
            conn.close()
        return response

    def _take_idle(self) -> _Connection | None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # streams belong to the loop that opened them
            self.close()
            self._loop = loop
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
            conn.close()
        return None

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _json_or_text(response: _Response) -> dict[str, Any]:
    try:
        value = response.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def fetch_manifest(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> NodeSetManifest:
    """GET {url}/manifest; ServerError naming the URL when unreachable."""
    client = _Client("", url.rstrip("/"), timeout_s)
    try:
        value = client.decode(await client.request(b"GET", "/manifest"), "/manifest")
    except ServerError as exc:
        raise ServerError(f"cannot fetch the manifest from {url}: {exc}") from exc
    finally:
        client.close()
    return NodeSetManifest.model_validate(value)


class RemoteNodeSet:
    """A node set behind an auto_host server (one URL, a pool of keep-alive connections)."""

    def __init__(
        self, name: str, url: str, manifest: NodeSetManifest, timeout_s: float | None = None
    ) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self.manifest = manifest
        self.timeout_s = timeout_s  # None: the run's per-step timeout (server.deadlines)
        self._client = _Client(name, self.url, self.timeout_s)

    async def _post_wire(self, path: str, payload: Any) -> Any:
        response = await self._client.request(b"POST", path, wire.encode(payload), _WIRE_TYPE)
        return self._client.decode(response, path)

    async def _post_json(self, path: str, body: dict[str, Any]) -> Any:
        response = await self._client.request(b"POST", path, json.dumps(body).encode(), _JSON_TYPE)
        return self._client.decode(response, path)

    async def _get(self, path: str, timeout_s: float | None = None) -> Any:
        response = await self._client.request(b"GET", path, timeout_s=timeout_s)
        return self._client.decode(response, path)

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

    async def panel_episode(self, fields: list[tuple[str, Any]]) -> LoadInfo:
        """Reset, set fields, play and load in one request (see ``nodes.base.start_episode``)."""
        info = await self._post_wire("/panel/episode", {"fields": [list(f) for f in fields]})
        return LoadInfo.model_validate(info)

    async def panel_load(self) -> LoadInfo:
        return LoadInfo.model_validate(await self._get("/panel/load"))

    async def evict(self, episode_key: str) -> None:
        await self._post_json("/evict", {"episode_key": episode_key})

    async def attach(self, client_id: str) -> int:
        return int((await self._post_json("/attach", {"client": client_id}))["attached"])

    async def detach(self, client_id: str) -> int:
        return int((await self._post_json("/detach", {"client": client_id}))["attached"])

    async def determinism(self) -> dict[str, str]:
        """The server's measured per-node batch modes (e.g. ``{"embed": "padded"}``)."""
        result: dict[str, str] = await self._get("/determinism")
        return result

    async def health(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._get("/health", CONNECT_TIMEOUT_S)
        return result

    async def close(self) -> None:
        """Close the connections only: a proxy never stops the server it talks to."""
        self._client.close()
