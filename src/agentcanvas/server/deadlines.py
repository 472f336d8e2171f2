"""Call deadlines of node-set servers: the run's per-step timeout, else a process default.

A run (or a play) sets its ``per_step_timeout_s`` for the episode it runs with
`call_deadline`; every proxied call inside it — ``call``, ``panel_episode`` and the other
panel requests, ``evict`` — then waits at most that long for the server's answer. Outside an
episode (tools, the API's one-off panel requests) a call waits env
``AGENTCANVAS_CALL_TIMEOUT_S`` (``envsettings.CALL_TIMEOUT_S``, default 60 s). A ContextVar
carries the value, so episodes of different runs sharing one server (a shared model) each
keep their own deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token

from agentcanvas import envsettings

__all__ = [
    "DEFAULT_CALL_TIMEOUT_S",
    "call_deadline",
    "call_timeout_s",
    "reset_call_timeout",
    "set_call_timeout",
]

DEFAULT_CALL_TIMEOUT_S = envsettings.CALL_TIMEOUT_S.default

_RUN_CALL_TIMEOUT_S: ContextVar[float | None] = ContextVar(
    "agentcanvas_call_timeout_s", default=None
)


def call_timeout_s() -> float:
    """This context's call deadline: the run's setting, else ``AGENTCANVAS_CALL_TIMEOUT_S``.

    A proxy made with an explicit ``timeout_s`` (a tool's deliberate choice) keeps it."""
    run_s = _RUN_CALL_TIMEOUT_S.get()
    return run_s if run_s is not None else envsettings.CALL_TIMEOUT_S.get()


def set_call_timeout(seconds: float | None) -> Token[float | None]:
    """Set this context's call deadline (None: the default); `reset_call_timeout` undoes it."""
    if seconds is not None and not seconds > 0:
        raise ValueError(f"a call deadline must be > 0 s, not {seconds!r}")
    return _RUN_CALL_TIMEOUT_S.set(seconds)


def reset_call_timeout(token: Token[float | None]) -> None:
    _RUN_CALL_TIMEOUT_S.reset(token)


@contextmanager
def call_deadline(seconds: float | None) -> Iterator[None]:
    """Within the block (and tasks created in it) every proxied call waits at most
    ``seconds``."""
    token = set_call_timeout(seconds)
    try:
        yield
    finally:
        reset_call_timeout(token)
