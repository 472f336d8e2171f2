"""Settings read from the environment: each declared once here, with its accepted range.

A value outside its range is a ConfigError naming the variable, what it accepts and its
default — never a silent clamp or a bare ``ValueError``. Settings are read when used (a
test or a child process may set them late); :func:`check_all` reads every one of them, so a
command can refuse a bad setting before it starts anything. An empty value means unset.

The scheduler's own settings (``scheduler.settings``) and the fake GPU
(``scheduler.resources``) check theirs where they are read.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from agentcanvas.errors import ConfigError

__all__ = [
    "ALL",
    "AUDIT_RATE",
    "AUDIT_SEED",
    "CALL_SHARED_MEMORY",
    "CALL_TIMEOUT_S",
    "CALL_TRANSPORT",
    "EVAL_SUBPROCESS",
    "FLUSH_POLICY",
    "FORK_SERVERS",
    "MAX_BATCH",
    "NUM_THREADS",
    "PYTHON_SUMMARIES",
    "SERVER_READY_TIMEOUT_S",
    "ChoiceSetting",
    "FloatSetting",
    "IntSetting",
    "check_all",
]


def _text(name: str) -> str | None:
    text = os.environ.get(name)
    return None if text is None or not text.strip() else text.strip()


def _refused(name: str, accepted: str, default: object) -> ConfigError:
    return ConfigError(
        f"{name} must be {accepted}, not {os.environ.get(name)!r} "
        f"(unset it for the default, {default})"
    )


@dataclass(frozen=True)
class IntSetting:
    """An integer from ``low`` to ``high``."""

    name: str
    default: int
    low: int
    high: int

    def get(self) -> int:
        text = _text(self.name)
        if text is None:
            return self.default
        try:
            value: int | None = int(text)
        except ValueError:
            value = None
        if value is None or not self.low <= value <= self.high:
            accepted = f"an integer from {self.low} to {self.high}"
            raise _refused(self.name, accepted, self.default)
        return value


@dataclass(frozen=True)
class FloatSetting:
    """A finite number of seconds (or other unit) from ``low`` to ``high``."""

    name: str
    default: float
    low: float
    high: float

    def get(self) -> float:
        text = _text(self.name)
        if text is None:
            return self.default
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and self.low <= value <= self.high):
            accepted = f"a number from {self.low:g} to {self.high:g}"
            raise _refused(self.name, accepted, f"{self.default:g}")
        return value


@dataclass(frozen=True)
class ChoiceSetting:
    """One of a few words."""

    name: str
    default: str
    choices: tuple[str, ...]

    def get(self) -> str:
        text = _text(self.name)
        if text is None:
            return self.default
        if text not in self.choices:
            raise _refused(self.name, f"one of {', '.join(self.choices)}", self.default)
        return text


MAX_BATCH = IntSetting("AGENTCANVAS_MAX_BATCH", 8, 1, 1024)
"""Requests per forward pass of a shared server's batcher."""
FLUSH_POLICY = ChoiceSetting(
    "AGENTCANVAS_FLUSH_POLICY", "ours", ("none", "restart_on_submit", "ours")
)
"""When the batcher flushes (``server.batching``)."""
CALL_TIMEOUT_S = FloatSetting("AGENTCANVAS_CALL_TIMEOUT_S", 60.0, 0.001, 86_400.0)
"""Deadline of a call to a node-set server outside a run (``server.deadlines``)."""
SERVER_READY_TIMEOUT_S = FloatSetting("AGENTCANVAS_SERVER_READY_TIMEOUT_S", 120.0, 1.0, 3_600.0)
"""How long a node-set server may take to start and report ready."""
NUM_THREADS = IntSetting("AGENTCANVAS_NUM_THREADS", 1, 1, 1024)
"""Threads per process for numeric libraries (``server.runtime``)."""
FORK_SERVERS = ChoiceSetting("AGENTCANVAS_FORK_SERVERS", "1", ("0", "1"))
"""``0``: spawn every node-set server instead of forking it from a template."""
CALL_TRANSPORT = ChoiceSetting("AGENTCANVAS_CALL_TRANSPORT", "ipc", ("ipc", "tcp"))
"""How node calls travel to a server: abstract unix sockets (Linux) or TCP."""
CALL_SHARED_MEMORY = ChoiceSetting("AGENTCANVAS_CALL_SHARED_MEMORY", "1", ("0", "1"))
"""``0``: big arrays of requests and replies travel on the unix socket, not through the
connection's shared memory (``server.rpc_shared``)."""
AUDIT_RATE = FloatSetting("AGENTCANVAS_AUDIT_RATE", 0.0625, 0.0, 1.0)
"""Share of a shared server's multi-request batches re-checked row by row
(``server.batch_audit``): 0 turns the audit off, 1 audits every batch."""
AUDIT_SEED = IntSetting("AGENTCANVAS_AUDIT_SEED", 0, 0, 10**18 - 1)
"""Seed of the hash that picks the audited batches and rows."""
EVAL_SUBPROCESS = ChoiceSetting("AGENTCANVAS_EVAL_SUBPROCESS", "1", ("0", "1"))
"""``0``: the backend runs every run inside its own process, even when a request asks for an
eval subprocess (``api.eval``)."""
PYTHON_SUMMARIES = ChoiceSetting("AGENTCANVAS_PYTHON_SUMMARIES", "0", ("0", "1"))
"""``1``: the firing log's summaries by the Python walk even where its compiled copy is built
(``graph.summarize``): the same summaries, slower. Read once, when a process first imports
that module."""

ALL: tuple[IntSetting | FloatSetting | ChoiceSetting, ...] = (
    MAX_BATCH,
    FLUSH_POLICY,
    CALL_TIMEOUT_S,
    SERVER_READY_TIMEOUT_S,
    NUM_THREADS,
    FORK_SERVERS,
    CALL_TRANSPORT,
    CALL_SHARED_MEMORY,
    AUDIT_RATE,
    AUDIT_SEED,
    EVAL_SUBPROCESS,
    PYTHON_SUMMARIES,
)


def check_all() -> None:
    """Read every setting; the first bad one raises ConfigError naming it."""
    for setting in ALL:
        setting.get()
