"""Live progress of runs in eval subprocesses, pushed to the backend's WebSocket clients.

:class:`ProgressRelay` tails each running run's ``events.jsonl``
(:mod:`agentcanvas.eval.live_events`) a few times a second, so every episode's end reaches the
clients within a second, and sends ``eval_complete`` exactly once per run: when the scheduler
has reaped the process and the final status is known (after the last episode events).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agentcanvas.eval.events import Broadcast, EvalComplete, EvalProgress
from agentcanvas.eval.live_events import RELAYED_TYPES, EventTail, events_path
from agentcanvas.eval.run_state import TERMINAL_RUN_STATUSES

__all__ = ["POLL_S", "ProgressRelay"]

POLL_S: Final = 0.2


@dataclass
class ProgressRelay:
    """Per running run: the tail of its events file, and the last status announced."""

    runs_dir: Path
    broadcast: Broadcast
    tails: dict[str, EventTail] = field(default_factory=dict)
    statuses: dict[str, str] = field(default_factory=dict)

    def poll(self, running: Mapping[str, Path]) -> None:
        """Relay what each running run (id → run folder) appended since the last poll.

        A run seen for the first time is tailed from the end of its file: events left by an
        earlier process of the same run (before a resume) are not replayed.
        """
        for run_id, root in running.items():
            tail = self.tails.get(run_id)
            if tail is None:
                tail = self.tails[run_id] = EventTail(events_path(root))
            self._relay(run_id, tail)

    def on_summary(self, run_id: str, summary: dict[str, Any]) -> None:
        """A run's summary.json changed: announce a change of its (non-final) status."""
        status = str(summary.get("status"))
        if status in TERMINAL_RUN_STATUSES or self.statuses.get(run_id) == status:
            return
        self.statuses[run_id] = status
        compact = {k: v for k, v in summary.items() if k != "episodes"}
        self.broadcast(EvalProgress(run_id=run_id, summary=compact))

    def finish(self, run_id: str, status: str) -> None:
        """The run's process is reaped: its last events, then ``eval_complete`` (once)."""
        path = events_path(self.runs_dir / run_id)
        tail = self.tails.pop(run_id, None) or EventTail(path, from_start=True)
        self._relay(run_id, tail)
        self.statuses.pop(run_id, None)
        with contextlib.suppress(OSError):  # relayed: the records themselves are on disk
            path.unlink(missing_ok=True)
        self.broadcast(EvalComplete(run_id=run_id, status=status))

    def _relay(self, run_id: str, tail: EventTail) -> None:
        for event in tail.read_new():
            if isinstance(event, RELAYED_TYPES):
                self.broadcast(event.model_copy(update={"run_id": run_id}))
