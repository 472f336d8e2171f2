"""An episode's opening call: its first env call, sent in the same write as its panel request.

When the episode's first firing on the env is known before it starts
(`graph.executor.opening_firing`: the step node with no action yet), the env's proxy sends
that call right after the panel request, on the same connection, in one write
(`RemoteNodeSet.panel_episode`, `RpcClient.request_then`): the server runs both, one after
the other, and the executor's call gets the answer already on its way — a round trip per
episode fewer, the same calls in the same order on the server.

`OpeningCall` is the one owner of that answer, one per proxy. Its life::

    idle --sent--> in flight --claim (the executor's same call)--> idle   (the answer is used)
                             --claim (another call) / settle-----> idle   (waited for, dropped)
                             --drop (cancelled, closing)---------> idle   (dropped at once)

Nothing of one episode may run on the server beside the next one: an answer nobody claims
is waited for (`settle`) before the proxy's next call or panel request, unless the
episode's task is ending anyway (`drop`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentcanvas.errors import ServerTimeoutError
from agentcanvas.nodes.base import CallContext
from agentcanvas.server import protocol
from agentcanvas.server.rpc_client import Pending

__all__ = ["Opening", "OpeningCall", "call_args"]

Opening = tuple[str, dict[str, Any], dict[str, Any], CallContext]
"""An episode's opening call: node name, config, inputs, context."""


def call_args(
    node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
) -> dict[str, Any]:
    """The rpc arguments of a node call (`protocol.CallRequest`)."""
    return {"node": node_name, "config": config, "inputs": inputs, "ctx": ctx.__dict__}


class OpeningCall:
    """The answer of an episode's opening call on one server, until it is claimed, settled
    or dropped; ``where`` names the server, ``deadline_s`` gives the proxy's deadline."""

    def __init__(self, where: str, deadline_s: Callable[[], float]) -> None:
        self._where, self._deadline_s = where, deadline_s
        self._sent: tuple[dict[str, Any], Pending[protocol.CallReply]] | None = None

    @property
    def in_flight(self) -> bool:
        """Whether an answer is still unclaimed."""
        return self._sent is not None

    def sent(self, args: dict[str, Any], pending: Pending[protocol.CallReply]) -> None:
        """The call ``args`` went out with a panel request; ``pending`` is its answer."""
        if self._sent is not None:  # the proxy settles the last one before it sends again
            raise RuntimeError(f"{self._where}: an opening call is in flight already")
        self._sent = (args, pending)

    async def claim(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The outputs of the call ``args`` when it is the opening call (its answer is on its
        way: no request of its own); else None, once the opening's answer is in and dropped
        (it must not overlap ``args`` on the server)."""
        sent, self._sent = self._sent, None
        if sent is None:
            return None
        if _same_call(sent[0], args):
            return (await sent[1].value(self._deadline_s())).outputs
        await self._drain(sent[1])
        return None

    async def settle(self) -> None:
        """Wait for an answer nobody claimed (the episode ended before its first firing) and
        drop it; ServerTimeoutError when it did not come in time (the call may still be
        running: the worker replaces its servers, as after any timeout)."""
        sent, self._sent = self._sent, None
        if sent is not None:
            await self._drain(sent[1])

    def drop(self) -> None:
        """Forget the answer at once (cancelled, or closing): its connection is closed unless
        the answer is in."""
        sent, self._sent = self._sent, None
        if sent is not None:
            sent[1].abandon()

    async def _drain(self, pending: Pending[protocol.CallReply]) -> None:
        why = await pending.drain(self._deadline_s())
        if why is not None:  # it may still run there: the worker's servers are replaced
            raise ServerTimeoutError(f"{self._where}: the episode's opening call: {why}")


def _same_call(sent: dict[str, Any], args: dict[str, Any]) -> bool:
    """Whether ``args`` is the call ``sent`` (identity and context first: an array among the
    inputs of another call must not be compared with ``==``)."""
    if sent["node"] != args["node"] or sent["ctx"] != args["ctx"]:
        return False
    try:
        return bool(sent["config"] == args["config"] and sent["inputs"] == args["inputs"])
    except (TypeError, ValueError):  # arrays: not the opening's inputs (JSON values)
        return False
