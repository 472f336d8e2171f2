"""A backend answers while a shared model loads: a start queues the run at once (its model is
started off the request and off the event loop), the run waits ``queued`` with a reason
that names the model, and the queue answers within a second meanwhile. Also after a restart
with such a run queued.

The model is real and really slow: ``gated_model`` (support.gated_model) loads in its own
server process until the test opens its gate, so "while it loads" is a fact the test
controls, not a guess about timings.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.backend import Backend
from support.gated_model import gate_folder, write_gated_workspace
from support.polling import poll_until

QUEUE = "/api/eval/v2/queue"
ANSWER_S = 1.0
REASON = "loading the shared model gated_model"
LOAD_STARTED_S = 60.0


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return write_gated_workspace(tmp_path / "workspace")


@pytest.fixture
def backends() -> Iterator[list[Backend]]:
    started: list[Backend] = []
    try:
        yield started
    finally:
        for backend in started:
            backend.close()


def queue_within_a_second(backend: Backend) -> dict[str, Any]:
    began = time.monotonic()
    answer = backend.http.get(QUEUE)
    took = time.monotonic() - began
    assert answer.status_code == 200, answer.text
    assert took < ANSWER_S, f"GET {QUEUE} took {took:.2f} s while a shared model loads"
    listing: dict[str, Any] = answer.json()
    return listing


def assert_waits_loading(backend: Backend, run_id: str, gate: Path) -> None:
    """While the model loads (the gate still shut): queued, with the reason, and the queue
    answers within a second each time it is asked."""
    poll_until(lambda: (gate / "loading").exists(), "the model to start loading", LOAD_STARTED_S)
    for _ in range(5):
        listing = queue_within_a_second(backend)
        (entry,) = [e for e in listing["queued"] if e["run_id"] == run_id]
        assert entry["waiting_reason"] == REASON and entry["loading"] == ["gated_model"]
        assert listing["running"] == []
    assert not (gate / "gate").exists()  # all of that while the model was still loading
    assert backend.status(run_id)["status"] == "queued"


def test_the_backend_answers_while_a_shared_model_loads(
    workspace: Path, backends: list[Backend]
) -> None:
    backend = Backend(workspace)
    backends.append(backend)
    gate = gate_folder(workspace)

    cancelled = backend.start_run("gated_graph", 1, 1)  # answered with the gate shut
    assert_waits_loading(backend, cancelled, gate)
    assert backend.cancel(cancelled)["status"] == "cancelled"  # at once, while it loads
    run_id = backend.start_run("gated_graph", 1, 1)
    assert_waits_loading(backend, run_id, gate)

    (gate / "gate").write_text("")

    summary = backend.wait_status(run_id, "completed")
    assert summary["episodes_done"] == 2
    assert backend.status(cancelled)["status"] == "cancelled"
    servers = backend.api("GET", "/api/nodesets")["servers"]
    assert servers["gated_model"]["refcount"] == 0  # the cancelled run's hold given back


def test_after_a_restart_the_backend_answers_before_the_model_of_a_queued_run_loads(
    workspace: Path, backends: list[Backend]
) -> None:
    gate = gate_folder(workspace)
    first = Backend(workspace)
    backends.append(first)
    run_id = first.start_run("gated_graph", 1, 1)
    assert_waits_loading(first, run_id, gate)
    # SIGTERM while the model loads: the backend ends the load and exits by itself, uvicorn
    # re-raising the signal after its shutdown (it had waited for the model to come up, until
    # the test's deadline SIGKILLed it)
    assert first.stop() == -signal.SIGTERM
    (gate / "loading").unlink()

    second = Backend(workspace)  # answers GET /queue before it returns
    backends.append(second)

    assert_waits_loading(second, run_id, gate)
    (gate / "gate").write_text("")
    assert second.wait_status(run_id, "completed")["episodes_done"] == 2
