"""The openpi policy-server protocol, on ``websockets`` and ``msgpack`` (both ours already).

The contract many VLA policy servers speak (openpi's ``serve_policy``;
``openpi_client.WebsocketClientPolicy`` is its client):

- a WebSocket connection, optionally with an ``Authorization: Api-Key <key>`` header;
- the server first sends its metadata (a packed dict);
- then, strictly one request at a time: the client sends one binary message (a packed
  observation dict), the server answers with one binary message (a packed dict of outputs,
  e.g. ``{"actions": <chunk>}``); a **text** message instead is an error (openpi sends the
  traceback, then closes the connection with 1011);
- packing is msgpack with NumPy arrays as ``{b"__ndarray__": True, b"data": <raw bytes>,
  b"dtype": <dtype.str>, b"shape": <shape>}`` and NumPy scalars as ``{b"__npgeneric__": True,
  b"data": <item>, b"dtype": <dtype.str>}`` (``openpi_client.msgpack_numpy``), arrays of
  object, void or complex dtype refused.

Why it is written here rather than imported: ``openpi-client`` requires ``numpy < 2`` and
everything else we pin runs on NumPy 2; the protocol is small and fully specified, and the
tests hold this module to ``openpi-client`` itself (its client against our server, our
client against a server packing with its ``msgpack_numpy``), run in a separate NumPy-1
environment that ``make test`` creates (``.venv-openpi``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import http
import itertools
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.frames import CloseCode
from websockets.http11 import Request, Response

__all__ = [
    "ConnectionClosed",
    "InvalidHandshake",
    "PolicyClient",
    "PolicyServerError",
    "connection_id",
    "pack",
    "serve_policy",
    "unpack",
]


class PolicyServerError(RuntimeError):
    """The server answered with an error, or not in the protocol's shape."""


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray | np.generic) and obj.dtype.kind in ("V", "O", "c"):
        raise ValueError(f"the policy protocol cannot carry arrays of dtype {obj.dtype}")
    if isinstance(obj, np.ndarray):
        return {
            b"__ndarray__": True,
            b"data": np.ascontiguousarray(obj).tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"the policy protocol cannot carry a {type(obj).__name__}")


def _unpack_hook(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return obj


def pack(obj: Any) -> bytes:
    """``obj`` as one protocol message (``openpi_client.msgpack_numpy.packb``)."""
    return bytes(msgpack.packb(obj, default=_pack_default))


def unpack(data: bytes) -> Any:
    """One protocol message (``openpi_client.msgpack_numpy.unpackb``); arrays are read-only
    views of the message."""
    return msgpack.unpackb(data, object_hook=_unpack_hook)


def _headers(api_key: str | None) -> dict[str, str] | None:
    return {"Authorization": f"Api-Key {api_key}"} if api_key else None


class PolicyClient:
    """One connection to a policy server; ``infer`` one request at a time (a lock keeps it
    so when several tasks share the client)."""

    def __init__(self, url: str, api_key: str | None = None) -> None:
        self.url = url
        self.api_key = api_key
        self.metadata: dict[str, Any] = {}
        self._ws: ClientConnection | None = None
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._ws is not None

    async def connect(self, timeout_s: float) -> dict[str, Any]:
        """Open the connection and read the server's metadata."""
        await self.close()
        ws = await connect(
            self.url,
            compression=None,
            max_size=None,
            additional_headers=_headers(self.api_key),
            open_timeout=timeout_s,
            ping_interval=None,  # a policy may take longer than a ping's timeout to answer
        )
        try:
            async with asyncio.timeout(timeout_s):
                first = await ws.recv()
        except BaseException:
            await ws.close()
            raise
        if isinstance(first, str):
            await ws.close()
            raise PolicyServerError(f"sent text instead of its metadata: {first[:500]}")
        metadata = unpack(first)
        self._ws, self.metadata = ws, metadata if isinstance(metadata, dict) else {}
        return self.metadata

    async def infer(self, obs: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send ``obs``, return the server's reply. A text reply raises PolicyServerError;
        a reply that does not come within ``timeout_s`` raises TimeoutError and closes the
        connection (a late reply would answer the next request)."""
        async with self._lock:
            if self._ws is None:
                raise ConnectionError("not connected")
            ws = self._ws
            try:
                async with asyncio.timeout(timeout_s):
                    await ws.send(pack(obs))
                    reply = await ws.recv()
            except (TimeoutError, ConnectionClosed, OSError):
                await self.close()
                raise
        if isinstance(reply, str):
            await self.close()  # openpi closes the connection after an error
            raise PolicyServerError(reply)
        result = unpack(reply)
        if not isinstance(result, dict):
            raise PolicyServerError(f"replied with a {type(result).__name__}, not a dict")
        return result

    async def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()


InferFn = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
_CONNECTION: contextvars.ContextVar[str] = contextvars.ContextVar("policy_connection", default="")


def connection_id() -> str:
    """Inside ``serve_policy``'s ``infer``: which connection the request came on ("c0",
    "c1", … in the order they opened); "" elsewhere."""
    return _CONNECTION.get()


async def serve_policy(
    infer: InferFn,
    metadata: dict[str, Any],
    host: str,
    port: int,
    api_key: str | None = None,
) -> Server:
    """A policy server speaking the protocol: ``infer`` answers each request of each
    connection, one at a time per connection (connections run concurrently). An exception
    is sent as text (its traceback), then the connection is closed with 1011, as openpi's
    server does; ``connection_id()`` tells ``infer`` which connection asks. ``GET /healthz``
    answers 200. With ``api_key``, a connection without
    ``Authorization: Api-Key <key>`` is refused with 401."""

    def check(connection: ServerConnection, request: Request) -> Response | None:
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if api_key and request.headers.get("Authorization") != f"Api-Key {api_key}":
            return connection.respond(http.HTTPStatus.UNAUTHORIZED, "a valid Api-Key is needed\n")
        return None

    opened = itertools.count()

    async def handler(ws: ServerConnection) -> None:
        _CONNECTION.set(f"c{next(opened)}")
        await ws.send(pack(metadata))
        while True:
            try:
                message = await ws.recv()
            except ConnectionClosed:
                return
            try:
                if isinstance(message, str):
                    raise PolicyServerError("requests are binary (msgpack) messages, not text")
                obs = unpack(message)
                if not isinstance(obs, dict):
                    raise PolicyServerError(f"a request is a dict, not a {type(obs).__name__}")
                reply = pack(await infer(obs))
            except Exception:
                with contextlib.suppress(ConnectionClosed):
                    await ws.send(traceback.format_exc())
                    await ws.close(CloseCode.INTERNAL_ERROR, "Internal server error")
                return
            try:
                await ws.send(reply)
            except ConnectionClosed:
                return

    return await serve(
        handler,
        host,
        port,
        compression=None,
        max_size=None,
        process_request=check,
        ping_interval=None,
    )
