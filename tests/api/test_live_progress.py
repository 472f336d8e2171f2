"""Live progress of subprocess runs over the WebSocket, against a real backend.

Every episode's end reaches the client as an ``eval_episode_done`` and an ``eval_progress``
(episodes_done 1, 2, ... N: no jump from 0 to N), and ``eval_complete`` comes exactly once,
after the last episode, with the run's final status. To be sure no second ``eval_complete``
follows, a second run is started after the first and waited for to its own end: every tick
that could have sent a duplicate has happened by then.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Origin

from support.backend import RUN_DEADLINE_S, Backend

EPISODES_PER_TASK = 2
TASKS = 2  # babyai_oracle's


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with Backend(tmp_path_factory.mktemp("live")) as server:
        yield server


def _events_until_complete(ws: ClientConnection, run_id: str, seen: list[dict[str, Any]]) -> None:
    """Append every eval event of any run to ``seen`` until ``run_id``'s eval_complete."""
    deadline = time.monotonic() + RUN_DEADLINE_S
    while True:
        event = json.loads(ws.recv(timeout=max(0.0, deadline - time.monotonic())))
        if event.get("source") == "eval":
            seen.append(event)
        if event.get("type") == "eval_complete" and event.get("run_id") == run_id:
            return


def test_each_episode_is_pushed_and_the_end_once(backend: Backend) -> None:
    url = backend.url.replace("http://", "ws://", 1) + "/ws"
    seen: list[dict[str, Any]] = []
    with connect(url, origin=Origin(backend.url), proxy=None, open_timeout=30) as ws:
        run_id = backend.start_run("babyai_oracle", EPISODES_PER_TASK, 2)
        _events_until_complete(ws, run_id, seen)
        later = backend.start_run("babyai_oracle", 1, 1, tasks=["BabyAI-GoToObj-v0"])
        _events_until_complete(ws, later, seen)

    mine = [e for e in seen if e["run_id"] == run_id]
    total = EPISODES_PER_TASK * TASKS
    done = [e for e in mine if e["type"] == "eval_episode_done"]
    assert sorted(e["episode"]["index"] for e in done) == list(range(total))
    assert all(e["episode"]["status"] == "completed" for e in done), done
    per_episode = [e for e in mine if e["type"] == "eval_progress" and "summary" not in e]
    counts = [e["episodes_done"] for e in per_episode]
    assert counts == list(range(1, total + 1)), counts
    completes = [e for e in mine if e["type"] == "eval_complete"]
    assert completes == [
        {"type": "eval_complete", "source": "eval", "run_id": run_id, "status": "completed"}
    ]
    assert mine[-1]["type"] == "eval_complete"  # after every episode event
    assert [e["type"] for e in seen if e["run_id"] == later].count("eval_complete") == 1
    assert backend.status(run_id)["episodes_done"] == total
    assert not (Path(backend.run_dir(run_id)) / "events.jsonl").exists()  # relayed, removed
