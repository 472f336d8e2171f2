"""``ProcessServices.broadcast`` drops a WebSocket client whose outbox is full; it never
raises into the scheduler or a runner that called it. A ``WebSocketClient`` sends what was
queued for it, in order, through its own socket."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agentcanvas.api.app import build_services
from agentcanvas.api.ws_clients import WebSocketClient
from agentcanvas.eval.events import EvalProgress

DEADLINE_S = 10.0


class Recorder:
    """A connection as the client sees it (the ``Socket`` protocol): what was sent on it."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_text(self, data: str) -> None:
        self.sent.append(data)


async def drain(client: WebSocketClient) -> None:
    """Let the client send everything queued for it (within a deadline)."""
    async with asyncio.timeout(DEADLINE_S), asyncio.TaskGroup() as group:
        pump = group.create_task(client.pump())
        while client.pending:
            await asyncio.sleep(0)
        pump.cancel()


async def test_broadcast_drops_a_client_whose_outbox_is_full(tmp_path: Path) -> None:
    svc = build_services(tmp_path, "http://127.0.0.1:8765", None)
    stalled = WebSocketClient(Recorder(), max_queued=1)
    received = Recorder()
    reading = WebSocketClient(received, max_queued=10)
    assert stalled.offer("an event it never read")
    svc.ws_connections.update({stalled, reading})

    svc.broadcast(EvalProgress(run_id="r1", episodes_done=0, episodes_total=1))  # no QueueFull
    svc.relay_progress("r1", {"status": "running"})  # nor a later broadcast
    svc.progress.finish("r1", "completed")

    assert svc.ws_connections == {reading}
    assert stalled.pending == 1  # nothing more was pushed into it
    await drain(reading)
    types = [json.loads(text)["type"] for text in received.sent]
    assert types == ["eval_progress", "eval_progress", "eval_complete"]


async def test_a_client_sends_what_was_queued_in_order() -> None:
    socket = Recorder()
    client = WebSocketClient(socket)
    for n in range(3):
        assert client.offer(json.dumps({"n": n}))

    await drain(client)

    assert [json.loads(text)["n"] for text in socket.sent] == [0, 1, 2]
    assert client.pending == 0
