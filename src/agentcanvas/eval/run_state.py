"""A run's lifecycle: its statuses, the moves between them, and the error for a wrong one.

::

    pending ──► queued ──► running ──► completed
       │          │           ├──────► failed ─────┐
       │          │           ├──────► cancelled ──┤ resume: back to queued
       │          │           └──────► aborted ────┘
       └──────────┴──► failed / cancelled / aborted (ended before it ran)

``completed`` is final. ``failed``, ``cancelled`` and ``aborted`` runs may be resumed
(``queued`` again). A ``cancelled`` run whose parent died before seeing it end becomes
``aborted`` (resumable), and an ``aborted`` run that is cancelled becomes ``cancelled``.
Staying in a status is always allowed (an end written twice is the same end).

Every change of a run's status goes through :func:`check_move` (``EvalRun.move_to`` for a
summary in memory); nothing else assigns one.
"""

from __future__ import annotations

import enum

from agentcanvas.errors import StateError

__all__ = ["TERMINAL_RUN_STATUSES", "RunStateError", "RunStatus", "check_move"]


class RunStatus(enum.StrEnum):
    """Where a run is in its lifecycle (summary.json's ``status``)."""

    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ABORTED = "aborted"


_S = RunStatus
_ENDS = frozenset({_S.COMPLETED, _S.FAILED, _S.CANCELLED, _S.ABORTED})
_MOVES: dict[RunStatus, frozenset[RunStatus]] = {
    _S.PENDING: frozenset({_S.QUEUED, _S.RUNNING}) | _ENDS - {_S.COMPLETED},
    _S.QUEUED: frozenset({_S.RUNNING, _S.FAILED, _S.CANCELLED, _S.ABORTED}),
    _S.RUNNING: _ENDS,
    _S.COMPLETED: frozenset(),
    _S.FAILED: frozenset({_S.QUEUED, _S.RUNNING}),
    _S.CANCELLED: frozenset({_S.QUEUED, _S.RUNNING, _S.ABORTED}),
    _S.ABORTED: frozenset({_S.QUEUED, _S.RUNNING, _S.CANCELLED, _S.FAILED}),
}

TERMINAL_RUN_STATUSES: frozenset[RunStatus] = _ENDS
"""Statuses in which no process works on the run (``completed`` for good)."""


class RunStateError(StateError):
    """A run was asked to move between two statuses its lifecycle does not connect."""


def check_move(current: RunStatus | str, new: RunStatus | str, run_id: str = "") -> RunStatus:
    """``new`` as a RunStatus when a run may move to it from ``current``; else RunStateError."""
    old, target = RunStatus(current), RunStatus(new)
    if target != old and target not in _MOVES[old]:
        who = f"run {run_id}" if run_id else "a run"
        raise RunStateError(f"{who} cannot go from {old} to {target}")
    return target
