"""Batch formation for the shared inference server: plain synchronous decisions, no event loop.

Three flush policies (the third is ours):

- ``none``: every request is its own forward pass, at once (no coalescing).
- ``restart_on_submit``: the design note's policy — flush ``window_s`` after the *last*
  arrival (the timer restarts on every submit), or when the batch is full. It adds the whole
  window at one worker and has no upper bound while requests keep arriving.
- ``ours``: flush when the batch is full, or when every attached client has a request
  waiting, or ``cap_s`` after the *first* arrival. With one worker a request flushes at once.
  A request that queued while its queue's previous pass ran counts the cap from that pass's
  end instead: it could not have run earlier anyway, and the clients that pass served get
  ``cap_s`` to come back and join. Without it, workers split into two groups that alternate,
  each group's requests flushed by the cap while the other's pass runs, in half-full passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from agentcanvas import envsettings
from agentcanvas.errors import ConfigError

__all__ = [
    "MAX_BATCH_LIMIT",
    "BatchQueue",
    "FlushPolicy",
    "PendingRequest",
    "PolicyKind",
    "flush_due_at",
    "policy_from_env",
]

PolicyKind = Literal["none", "restart_on_submit", "ours"]


@dataclass(frozen=True)
class FlushPolicy:
    """How a queue decides to flush; ``max_batch`` bounds a forward pass."""

    kind: PolicyKind = "ours"
    max_batch: int = 8
    cap_s: float = 0.010
    window_s: float = 0.050

    def __post_init__(self) -> None:
        if self.kind not in ("none", "restart_on_submit", "ours"):
            raise ConfigError(
                f"flush policy kind must be none, restart_on_submit or ours, not {self.kind!r}"
            )
        if (
            isinstance(self.max_batch, bool)
            or not isinstance(self.max_batch, int)
            or (self.max_batch < 1)
        ):
            raise ConfigError(f"max_batch must be an integer >= 1, not {self.max_batch!r}")
        for name in ("cap_s", "window_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigError(f"{name} must be a finite number >= 0, not {value!r}")


@dataclass
class PendingRequest:
    """One queued request: who sent it, when, its payload, and the future to resolve."""

    client: str
    arrived_s: float
    item: Any
    future: Any  # asyncio.Future; typed loosely to keep this module loop-free
    episode_key: str = ""
    """The episode the request belongs to (the batch audit records who it affected)."""


@dataclass
class BatchQueue:
    """The requests of one (function_name, config_hash) key, in arrival order."""

    pending: list[PendingRequest] = field(default_factory=list)
    last_pass_end_s: float = float("-inf")
    """When this queue's latest forward pass ended (the server's clock)."""

    def live(self) -> list[PendingRequest]:
        """Drop requests whose caller went away (cancelled futures) and return the rest."""
        self.pending = [r for r in self.pending if not r.future.done()]
        return self.pending

    def take(self, max_batch: int) -> list[PendingRequest]:
        batch, self.pending = self.live()[:max_batch], self.pending[max_batch:]
        return batch


def flush_due_at(
    policy: FlushPolicy, queue: BatchQueue, attached: int, now_s: float
) -> float | None:
    """When this queue should flush: ``now_s`` or earlier means now; None means empty."""
    live = queue.live()
    if not live:
        return None
    if policy.kind == "none" or len(live) >= policy.max_batch:
        return now_s
    if policy.kind == "restart_on_submit":
        return live[-1].arrived_s + policy.window_s
    waiting_clients = len({r.client for r in live})
    if attached <= 1 or waiting_clients >= attached:
        return now_s  # every attached client is waiting: nobody else can join this batch
    return max(live[0].arrived_s, queue.last_pass_end_s) + policy.cap_s


MAX_BATCH_LIMIT = envsettings.MAX_BATCH.high


def policy_from_env() -> FlushPolicy:
    """The policy a server uses: env ``AGENTCANVAS_FLUSH_POLICY`` (default ``ours``) and
    ``AGENTCANVAS_MAX_BATCH`` (default 8). A bad value raises ConfigError naming the variable.
    """
    kind = envsettings.FLUSH_POLICY.get()
    return FlushPolicy(kind=kind, max_batch=envsettings.MAX_BATCH.get())  # type: ignore[arg-type]
