"""policy_server: a policy that already runs behind the openpi WebSocket protocol, by URL.

``act`` sends the episode's observation to the server (``agentcanvas.policy_protocol``: the
contract of openpi's ``serve_policy`` and ``openpi_client.WebsocketClientPolicy``) and
returns one action. The request is a dict built from the node's inputs under the names in
``keys`` (default openpi's LIBERO example: ``observation/state``, ``observation/image``,
``observation/wrist_image``, ``prompt``) plus the constant ``extra`` fields; the reply's
``action_key`` entry (default ``actions``) is one action or a chunk of them (rows). Of each
chunk the first ``execute_steps`` rows are executed, one per step (all of them when unset),
then the server is asked again: the chunk belongs to the episode, and a new episode always
starts with a fresh request. Other reply entries (openpi's ``server_timing``) are ignored.

**Connections.** One per worker (the protocol answers one request at a time per connection),
opened on the worker's first call, with the optional API key (``api_key``, or the
environment variable named by ``api_key_env``). A request has ``timeout_s`` to be answered;
a connection that drops, or a reply that does not come in time, is reopened and the request
sent again, ``reconnects`` times at most; then the episode ends with an error naming the
server. A text reply is the server's error (its traceback): the episode's error carries it.

**Determinism.** The answers come from a process outside the run: the run's determinism
level is at most ``unverified`` — nothing here shows that the server answers an observation
the same way at any load. With ``repeat_check`` on, every request is sent twice and the two
answers must be bit-identical (an episode whose answers differ ends with an error saying
so); the level then rests on that check (``sampled``).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agentcanvas.nodes import CallContext, NodeSet, NodeSetError, PortSpec
from agentcanvas.policy_protocol import (
    ConnectionClosed,
    InvalidHandshake,
    PolicyClient,
    PolicyServerError,
)

DEFAULT_KEYS = {
    "obs": "observation/state",
    "image": "observation/image",
    "wrist_image": "observation/wrist_image",
    "prompt": "prompt",
}


class ActConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(
        default="ws://127.0.0.1:8000",
        pattern=r"^wss?://",
        description="The policy server, ws://host:port (openpi's serve_policy listens on 8000).",
    )
    api_key: str | None = Field(default=None, description="Sent as 'Authorization: Api-Key …'.")
    api_key_env: str | None = Field(
        default=None, description="Name of an environment variable holding the API key."
    )
    keys: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_KEYS),
        description="Request key of each input port (obs, image, wrist_image, prompt).",
    )
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Constant fields added to every request."
    )
    action_key: str = Field(default="actions", description="The reply's action (or chunk).")
    execute_steps: int | None = Field(
        default=None,
        ge=1,
        description="Rows of each chunk executed before the server is asked again "
        "(openpi's replan_steps; unset: the whole chunk).",
    )
    timeout_s: float = Field(default=30.0, gt=0, le=3600, description="Per request.")
    connect_timeout_s: float = Field(default=10.0, gt=0, le=600)
    reconnects: int = Field(default=2, ge=0, le=20)
    repeat_check: bool = Field(
        default=False, description="Send every request twice; the answers must be identical."
    )


@dataclass
class _Chunk:
    actions: np.ndarray
    next_row: int
    rows: int
    last_step: int


@dataclass
class PolicyServerState:
    """Connections (one per worker and event loop) and each episode's current chunk."""

    clients: dict[tuple[int, str, str, str | None], PolicyClient] = field(default_factory=dict)
    chunks: dict[str, _Chunk] = field(default_factory=dict)
    requests: int = 0
    repeat_checked: int = 0
    urls: set[str] = field(default_factory=set)
    # the validated config of each config dict a caller passes again and again (the local
    # instance passes its cached, validated dict): id → (that dict, its ActConfig)
    settings: dict[int, tuple[dict[str, Any], ActConfig]] = field(default_factory=dict)

    def settings_of(self, config: dict[str, Any]) -> ActConfig:
        known = self.settings.get(id(config))
        if known is not None and known[0] is config:
            return known[1]
        parsed = ActConfig.model_validate(config)
        if len(self.settings) < 64:  # configs passed once (over the wire) are not kept
            self.settings[id(config)] = (config, parsed)
        return parsed

    async def close(self) -> None:
        """Close the connections opened on this event loop (the others went with theirs)."""
        loop = id(asyncio.get_running_loop())
        for key, client in list(self.clients.items()):
            if key[0] == loop:
                await client.close()
        self.clients.clear()


def _evict(state: PolicyServerState, episode_key: str) -> None:
    state.chunks.pop(episode_key, None)


def _determinism(state: PolicyServerState) -> dict[str, str]:
    servers = ", ".join(sorted(state.urls)) or "its server"
    if state.repeat_checked and state.repeat_checked == state.requests:
        return {"act": f"external ({servers}); {state.repeat_checked} requests repeat-checked"}
    return {"act": f"external ({servers})"}


NODESET = NodeSet(
    name="policy_server",
    version="0.1.0",
    parallelism="local",
    description="A policy behind the openpi WebSocket protocol (by URL).",
    state_factory=PolicyServerState,
    evict=_evict,
    determinism=_determinism,
)


def _api_key(config: ActConfig) -> str | None:
    if config.api_key:
        return config.api_key
    if config.api_key_env:
        key = os.environ.get(config.api_key_env)
        if not key:
            raise NodeSetError(
                f"policy_server: api_key_env names {config.api_key_env!r}, which is not set"
            )
        return key
    return None


def _request(inputs: dict[str, Any], config: ActConfig) -> dict[str, Any]:
    request = dict(config.extra)
    for port, value in inputs.items():
        if value is None:
            continue
        key = config.keys.get(port)
        if key is None:
            raise NodeSetError(f"policy_server: config 'keys' has no request key for {port!r}")
        request[key] = value
    return request


async def _client(state: PolicyServerState, config: ActConfig, ctx: CallContext) -> PolicyClient:
    api_key = _api_key(config)
    key = (id(asyncio.get_running_loop()), ctx.client, config.url, api_key)
    client = state.clients.get(key)
    if client is None:
        client = state.clients[key] = PolicyClient(config.url, api_key)
        state.urls.add(config.url)
    return client


async def _ask(client: PolicyClient, request: dict[str, Any], config: ActConfig) -> dict[str, Any]:
    """One answer, reconnecting up to ``reconnects`` times; errors name the server."""
    failures: list[str] = []
    for _ in range(config.reconnects + 1):
        try:
            if not client.connected:
                await client.connect(config.connect_timeout_s)
            return await client.infer(request, config.timeout_s)
        except PolicyServerError as exc:
            raise NodeSetError(f"policy_server: {config.url} replied with an error: {exc}") from exc
        except InvalidHandshake as exc:  # 401, or no WebSocket server there: retrying won't help
            raise NodeSetError(
                f"policy_server: {config.url} refused the connection: {exc}"
            ) from exc
        except TimeoutError:
            failures.append(f"no answer within {config.timeout_s:g} s")
        except (ConnectionClosed, OSError) as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
    raise NodeSetError(
        f"policy_server: {config.url} failed {len(failures)} time(s): " + "; ".join(failures)
    )


def _chunk(reply: dict[str, Any], config: ActConfig) -> np.ndarray:
    if config.action_key not in reply:
        raise NodeSetError(
            f"policy_server: {config.url}'s reply has no {config.action_key!r} "
            f"(it has: {sorted(map(str, reply))}); set action_key"
        )
    actions = np.asarray(reply[config.action_key])
    if actions.ndim == 0 or actions.size == 0:
        raise NodeSetError(f"policy_server: {config.url} answered an empty action")
    return actions[None, :] if actions.ndim == 1 else actions


def _same(one: dict[str, Any], other: dict[str, Any], key: str) -> bool:
    a, b = np.asarray(one.get(key)), np.asarray(other.get(key))
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@NODESET.node(
    "act",
    inputs=[
        PortSpec(name="obs", type="array", description="The state (observation/state)."),
        PortSpec(name="image", type="array", required=False),
        PortSpec(name="wrist_image", type="array", required=False),
        PortSpec(name="prompt", type="str", required=False, description="The instruction."),
    ],
    outputs=[
        PortSpec(name="action", type="array", description="One row of the current chunk."),
        PortSpec(name="chunk_row", type="int", description="Its row in the chunk (0: new)."),
    ],
    config=ActConfig,
    external=True,
)
async def act(
    inputs: dict[str, Any], config: dict[str, Any], state: PolicyServerState, ctx: CallContext
) -> dict[str, Any]:
    """One action from the policy server (a new request when the chunk is used up)."""
    settings = state.settings_of(config)
    chunk = state.chunks.get(ctx.episode_key)
    if chunk is not None and (ctx.step <= chunk.last_step or chunk.next_row >= chunk.rows):
        chunk = None  # a new attempt of the episode, or the chunk is used up
    if chunk is None:
        client = await _client(state, settings, ctx)
        request = _request(inputs, settings)
        reply = await _ask(client, request, settings)
        state.requests += 1
        if settings.repeat_check:
            again = await _ask(client, request, settings)
            if not _same(reply, again, settings.action_key):
                raise NodeSetError(
                    f"policy_server: {settings.url} answered the same observation differently "
                    f"twice (repeat_check): its answers are not reproducible"
                )
            state.repeat_checked += 1
        actions = _chunk(reply, settings)
        rows = min(len(actions), settings.execute_steps or len(actions))
        chunk = state.chunks[ctx.episode_key] = _Chunk(actions, 0, rows, ctx.step)
    row = chunk.next_row
    chunk.next_row += 1
    chunk.last_step = ctx.step
    return {"action": np.array(chunk.actions[row]), "chunk_row": row}
