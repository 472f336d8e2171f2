"""After the app's lifespan ends, no task the backend started is left pending.

The app runs under its real lifespan with an in-process run going (``via_subprocess:
false``: a task the backend owns, with node-set servers of its own), and, on a real uvicorn
on loopback, with a WebSocket client connected (the per-connection sender task). Shutting
down must cancel and await every one of them, and the interrupted run must be finalised.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import websockets

from agentcanvas.api.app import create_app
from agentcanvas.eval.run_state import TERMINAL_RUN_STATUSES

DEADLINE_S = 60.0


def others() -> set[asyncio.Task[Any]]:
    """Every task of this loop but the test's own."""
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def poll(check: Any, what: str, deadline_s: float = DEADLINE_S) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while loop.time() < end:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_an_in_process_run_is_stopped_and_awaited_at_shutdown(tmp_path: Path) -> None:
    app = create_app(tmp_path, "http://127.0.0.1:9")
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            body = {"graph_name": "babyai_oracle", "episode_count": 500, "via_subprocess": False}
            started = await http.post("/api/eval/v2/start", json=body)
            assert started.status_code == 200, started.text
            run_id = started.json()["run_id"]

            async def one_episode_done() -> bool:
                response = await http.get(f"/api/eval/v2/status/{run_id}?compact=true")
                return response.status_code == 200 and response.json()["episodes_done"] >= 1

            await poll(one_episode_done, "the in-process run's first episode")
            assert app.state.services.inprocess.get(run_id) is not None
            assert others(), "the run and the backend loops are running"

    assert others() == set()
    summary_path = tmp_path / "outputs" / "eval_runs" / run_id / "summary.json"
    summary = json.loads(summary_path.read_text())
    assert summary["status"] in TERMINAL_RUN_STATUSES, summary["status"]
    assert summary["episodes_done"] < summary["episodes_total"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_a_websocket_sender_is_awaited_at_shutdown(tmp_path: Path) -> None:
    port = free_port()
    app = create_app(tmp_path, f"http://127.0.0.1:{port}")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    await poll(_true_when(lambda: server.started), "uvicorn to start", 20.0)

    async with websockets.connect(f"ws://127.0.0.1:{port}/ws") as client:
        services = app.state.services
        await poll(_true_when(lambda: bool(services.ws_connections)), "the client to register")
        server.should_exit = True
        await asyncio.wait_for(serving, DEADLINE_S)
        await asyncio.wait_for(client.wait_closed(), DEADLINE_S)

    assert services.ws_connections == set()
    assert others() == set()


def _true_when(condition: Any) -> Any:
    async def check() -> bool:
        return bool(condition())

    return check
