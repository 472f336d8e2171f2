"""``ProcessServices.broadcast`` drops a WebSocket client whose outbox is full; it never
raises into the scheduler or a runner that called it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agentcanvas.api.app import build_services
from agentcanvas.eval.events import EvalProgress


class StalledSocket:
    """A WebSocket client as broadcast sees it: only its outbox (full when it stops reading)."""

    def __init__(self, maxsize: int) -> None:
        self.outbox: asyncio.Queue[str] = asyncio.Queue(maxsize=maxsize)


def test_broadcast_drops_a_client_whose_outbox_is_full(tmp_path: Path) -> None:
    svc = build_services(tmp_path, "http://127.0.0.1:8765", None)
    stalled, reading = StalledSocket(maxsize=1), StalledSocket(maxsize=10)
    stalled.outbox.put_nowait("an event it never read")
    svc.ws_connections.update({stalled, reading})

    svc.broadcast(EvalProgress(run_id="r1", episodes_done=0, episodes_total=1))  # no QueueFull
    svc.relay_progress("r1", {"status": "running"})  # nor a later broadcast
    svc.progress.finish("r1", "completed")

    assert svc.ws_connections == {reading}
    assert stalled.outbox.qsize() == 1  # nothing more was pushed into it
    received = [json.loads(reading.outbox.get_nowait()) for _ in range(reading.outbox.qsize())]
    assert [e["type"] for e in received] == ["eval_progress", "eval_progress", "eval_complete"]
