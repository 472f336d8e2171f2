"""The call socket's calling side: `RpcClient` sends requests to one node-set server.

A client keeps a small pool of connections (`rpc_channel.ChannelPool`), one request in
flight on each — two when a request is sent with the one that follows it
(`RpcClient.request_then`: an episode's panel request and its opening call; the second's
answer is a `Pending` until claimed). A client decodes a reply straight into the struct of
its op's reply (`protocol.RpcReply`, one pass, no dict).

Every request has a finite deadline, and errors name the server::

    no answer within the deadline    -> ServerTimeoutError  "... did not answer OP within T s"
    the connection dropped / refused -> ServerDiedError     "... is unreachable (...)"
    the handler raised               -> UserInputError (bad input) / RemoteError (type, message)
    an answer that does not fit      -> ProtocolError       "... answered OP with a reply that
                                                             does not fit: <field>"

A dead server is noticed at once, not at the deadline: its connections close (end of
stream, or a refused connect), which ends the wait.
"""

from __future__ import annotations

import itertools
from typing import Any, Generic, TypeVar

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
from agentcanvas.server import protocol, rpc_shared
from agentcanvas.server.rpc_channel import Answer, Channel, ChannelLost, ChannelPool, answer_within
from agentcanvas.server.rpc_framing import encode

__all__ = ["Pending", "RpcClient"]

Reply = TypeVar("Reply")
Then = TypeVar("Then")

_reply_decoders: dict[Any, wire.Decoder[Any]] = {}


def _replies(kind: type[Reply]) -> wire.Decoder[protocol.RpcReply[Reply]]:
    """The decoder of rpc replies carrying ``kind``, built once per kind."""
    decoder = _reply_decoders[kind] = wire.Decoder(protocol.rpc_reply(kind))
    return decoder


class Pending(Generic[Then]):
    """The answer to the second request of `RpcClient.request_then`, not claimed yet.

    `value` waits for it (within its own deadline) and decodes it, exactly as `request`
    would have; `drain` waits for it and drops it; `abandon` drops it at once. Either way
    the connection goes back to the pool once it is in step, else it is closed.

    Dropping an answer that has not come yet means the server may still be running the
    request: `drain` is for when nothing may overlap it (the next episode on a replicated
    server), `abandon` for when the connection is lost or the run is being cancelled anyway.
    """

    def __init__(
        self,
        pool: ChannelPool,
        channel: Channel,
        answer: Answer,
        request_id: int,
        what: str,
        reply: type[Then],
    ) -> None:
        self._pool, self._channel, self._answer = pool, channel, answer
        self._id, self._what, self._reply = request_id, what, reply
        self.claimed = False

    async def value(self, timeout_s: float) -> Then:
        """The answer, decoded (errors as `RpcClient.request`'s); once only."""
        if self.claimed:
            raise RuntimeError(f"the answer to {self._what} was claimed already")
        self.claimed = True
        return await _settle(
            self._pool, self._channel, self._answer, (self._id, self._what, self._reply), timeout_s
        )

    async def drain(self, timeout_s: float) -> str | None:
        """Wait for the answer and drop it; None once it came (the connection is pooled
        again), else why it did not — no answer within ``timeout_s``, or the connection was
        lost — when the request may still be running on the server (closed connection)."""
        if self.claimed:
            return None
        self.claimed = True
        try:
            await answer_within(self._answer, timeout_s)
        except TimeoutError:
            self._channel.close()
            return f"no answer within {timeout_s:g} s"
        except ChannelLost:
            self._channel.close()
            return f"the connection was lost ({self._channel.dead or 'gone'})"
        except BaseException:
            self._channel.close()
            raise
        self._pool.give_back(self._channel)
        return None

    def abandon(self) -> None:
        """Drop the answer: the connection is pooled again if the answer is in (nothing more
        to come on it), else closed (an answer still on its way would be out of step)."""
        if self.claimed:
            return
        self.claimed = True
        if self._answer.done() and not self._answer.cancelled():
            self._answer.exception()  # retrieved: no "never retrieved" warning
            self._pool.give_back(self._channel)
        else:
            self._answer.cancel()
            self._channel.close()


class RpcClient:
    """Requests to one server's call endpoint; `where` names the server in every error."""

    def __init__(self, endpoint: str, where: str, attaches: bool = True) -> None:
        """``attaches``: False for a server that takes no attach (`protocol.attaches_memory`);
        else connections attach shared memory when this process uses it (`rpc_shared`)."""
        if not endpoint.startswith(("tcp://", "ipc://")):
            raise ServerError(f"{where}: {endpoint!r} is not a tcp:// or ipc:// endpoint")
        self.endpoint, self.where = endpoint, where
        self.pool = ChannelPool(endpoint, where, attaches and rpc_shared.usable())
        self._ids = itertools.count(1)

    async def request(
        self, op: str, args: dict[str, Any], what: str, timeout_s: float, reply: type[Reply]
    ) -> Reply:
        """Send ``op(args)`` and return the handler's value as ``reply`` (a msgspec type: see
        `protocol`); errors as in the module doc."""
        request_id, frames = self._encode(op, args, what)
        channel = await self.pool.take(what, timeout_s)
        (answer,) = self._send(channel, frames)
        return await _settle(self.pool, channel, answer, (request_id, what, reply), timeout_s)

    async def request_then(
        self,
        first: tuple[str, dict[str, Any], str, type[Reply]],
        then: tuple[str, dict[str, Any], str, type[Then]],
        timeout_s: float,
    ) -> tuple[Reply, Pending[Then]]:
        """Send two requests, each ``(op, args, what, reply)``, in one write on one
        connection, and return the first's value with the second still to come: the server
        runs them one after the other, so the second costs no round trip of its own when it
        is claimed (`Pending.value`). Errors of the first as in `request`; the second's are
        the caller's when it claims it. The second runs only if the first succeeded (it is
        sent ``after`` it); when the server refuses the first, the second's answer (that it
        was not run) is drained before the first's error is raised."""
        first_id, first_frames = self._encode(first[0], first[1], first[2])
        then_id, then_frames = self._encode(then[0], then[1], then[2], after=first_id)
        channel = await self.pool.take(first[2], timeout_s)
        answer, later = self._send(channel, first_frames, then_frames)
        pending = Pending(self.pool, channel, later, then_id, then[2], then[3])
        try:
            expected = (first_id, first[2], first[3])
            value = await _settle(self.pool, channel, answer, expected, timeout_s, keep=True)
        except (UserInputError, RemoteError) as exc:  # refused in step: the second's answer
            why = await pending.drain(timeout_s)  # (not run) comes next: read it
            if why is not None:
                raise ServerTimeoutError(
                    f"{self.where}: {then[2]} after {first[2]} failed ({exc}): {why}"
                ) from exc
            raise
        except BaseException:
            pending.abandon()  # the connection is lost or out of step, or we are cancelled
            raise
        return value, pending

    def _encode(
        self, op: str, args: dict[str, Any], what: str, after: int | None = None
    ) -> tuple[int, list[wire.Buffer]]:
        request_id = next(self._ids)
        header: dict[str, Any] = {"id": request_id, "op": op, "args": args}
        if after is not None:
            header["after"] = after
        try:
            return request_id, encode(header)
        except WireError as exc:
            raise UserInputError(f"cannot send {what} to {self.where}: {exc}") from exc

    def _send(self, channel: Channel, *messages: list[wire.Buffer]) -> list[Answer]:
        try:
            return channel.send(*messages)
        except ChannelLost as exc:
            channel.close()
            raise ServerDiedError(
                f"{self.where} is unreachable ({channel.dead or 'gone'})"
            ) from exc
        except BaseException:
            channel.close()
            raise

    def close(self) -> None:
        """Close the pooled connections."""
        self.pool.close()


async def _settle(
    pool: ChannelPool,
    channel: Channel,
    answer: Answer,
    expected: tuple[int, str, type[Reply]],
    timeout_s: float,
    *,
    keep: bool = False,
) -> Reply:
    """Wait for ``answer`` to the request ``expected`` (its id, what it is, its reply type)
    and decode it; the connection goes back to the pool when it is in step and idle
    (``keep``: an answer is still to come on it; its owner decides)."""
    _, what, _ = expected
    try:
        frames = await answer_within(answer, timeout_s)
    except TimeoutError as exc:
        channel.close()  # its answer may still come: the connection is no longer in step
        raise ServerTimeoutError(
            f"{pool.where} did not answer {what} within {timeout_s:g} s"
        ) from exc
    except ChannelLost as exc:
        death = channel.dead or "gone"
        channel.close()
        raise ServerDiedError(f"{pool.where} is unreachable ({death})") from exc
    except BaseException:
        channel.close()  # cancelled mid-request: its state is unknown
        raise
    try:
        value = _decoded(frames, expected, pool.where)
    except ProtocolError:
        channel.close()  # not our answer: the connection is out of step
        raise
    except BaseException:
        if not keep:
            pool.give_back(channel)  # the server's own error, answered in step
        raise
    if not keep:
        pool.give_back(channel)
    return value


def _decoded(frames: list[memoryview], expected: tuple[int, str, type[Reply]], where: str) -> Reply:
    """The reply's value, or the error it reports (the module doc's table)."""
    request_id, what, reply = expected
    decoder: wire.Decoder[protocol.RpcReply[Reply]]
    decoder = _reply_decoders.get(reply) or _replies(reply)
    try:
        decoded = decoder.decode(frames)
    except WireError as exc:
        raise protocol.not_fitting(where, what, str(exc)) from exc
    if decoded.id is None and decoded.err is not msgspec.UNSET:  # the server could not read it
        raise protocol.not_fitting(where, what, f"the server refused it: {decoded.err.message}")
    if decoded.id != request_id:
        raise protocol.not_fitting(
            where, what, f"the reply to request {decoded.id}, not {request_id}"
        )
    if decoded.err is not msgspec.UNSET:
        raise _failure(decoded.err, where, what)
    if decoded.ok is msgspec.UNSET:
        raise protocol.not_fitting(where, what, "neither `ok` nor `err`")
    return decoded.ok


def _failure(err: protocol.RpcError, where: str, what: str) -> ServerError | UserInputError:
    if err.status == 400:
        return UserInputError(
            f"{what}: {err.message}"
            if err.type == "UserInputError"
            else f"{what}: {err.type}: {err.message}"
        )
    return RemoteError(f"{where} failed {what}: {err.type}: {err.message}", err.type, err.message)
