"""The backend end to end: a real ``agentcanvas serve`` on loopback, real eval subprocesses.

One backend serves the module; every test leaves nothing of its own queued or running. The
workspace holds graphs of its own: ``slow_oracle`` (the oracle on an env with a step latency,
so a run lasts long enough to be interrupted), ``spin`` (turns on the spot until the step
budget ends: an episode of known length) and ``leaky`` (``spin`` plus a helper process that
ignores SIGTERM). A calibration recorded before the backend starts makes (babyai_oracle,
HUGE_WORKERS workers) need more RAM than any machine has: such a run waits for admission for
as long as a test needs it to, with nothing faked.

The workspace and the ``Backend`` helper live in ``support`` (shared with
``test_backend_restart.py``).
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import pytest

from agentcanvas.eval.config import EpisodeResult
from agentcanvas.scheduler.calibration import SAFETY_MARGIN, CalibrationStore
from support.backend import RUN_DEADLINE_S, TERMINAL, Backend, alive, process_tree
from support.backend_workspace import (
    HUGE_RAM_MB,
    HUGE_WORKERS,
    ORACLE_KEY,
    PROCESS_GONE_DEADLINE_S,
    RAM_REASON,
    write_workspace,
)
from support.polling import poll_until

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_workspace(tmp_path_factory.mktemp("backend") / "workspace")


@pytest.fixture(scope="module")
def backend(workspace: Path) -> Iterator[Backend]:
    with Backend(workspace) as server:
        yield server


@pytest.fixture
def huge_run(backend: Backend) -> Iterator[str]:
    """A queued run that can never be admitted (RAM): cancelled after the test."""
    run_id = backend.start_run("babyai_oracle", 1, HUGE_WORKERS)
    poll_until(
        lambda: RAM_REASON.match(backend.status(run_id)["waiting_reason"] or ""),
        "the huge run to be refused for RAM",
        30.0,
    )
    try:
        yield run_id
    finally:
        if backend.status(run_id)["status"] == "queued":
            backend.cancel(run_id)


def identities(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        EpisodeResult.model_validate(e).identity()
        for e in sorted(summary["episodes"], key=lambda e: e["index"])
    ]


# -- start → completed ---------------------------------------------------------------------
def test_start_queues_then_runs_to_completion_with_a_complete_run_folder(backend: Backend) -> None:
    run_id = backend.start_run("babyai_oracle", 2, 2)
    seen: list[str] = []

    def finished() -> bool:
        status = backend.status(run_id)["status"]
        if not seen or seen[-1] != status:
            seen.append(status)
        return status in TERMINAL and not backend.is_active(run_id)  # and reaped

    poll_until(finished, f"run {run_id} to finish")

    assert seen[-1] == "completed", seen
    assert "running" in seen, seen
    assert set(seen) <= {"queued", "running", "completed"}, seen
    folder = backend.run_dir(run_id)
    for name in (
        "spec.json",
        "shared_urls.json",
        "summary.json",
        "graph.json",
        "stdout.log",
        "stderr.log",
        "_DONE",
    ):
        assert (folder / name).is_file(), name
    spec = json.loads((folder / "spec.json").read_text())
    assert spec["run_id"] == run_id and spec["config"]["worker_count"] == 2
    assert json.loads((folder / "shared_urls.json").read_text()) == {}
    assert json.loads((folder / "graph.json").read_text())["name"] == "babyai_oracle"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["episodes_total"] == summary["episodes_done"] == 4  # 2 tasks × 2
    assert [e["index"] for e in summary["episodes"]] == [0, 1, 2, 3]
    assert summary["aggregate_metrics"]["success"]["mean"] == 1.0  # the oracle
    for index in range(4):
        episode = folder / "episodes" / f"ep{index:04d}"
        record = json.loads((episode / "episode.json").read_text())
        assert record["run_id"] == run_id and record["index"] == index
        assert (episode / "log.jsonl").stat().st_size > 0
        assert not (episode / "assets").exists()  # no frames asked for: no assets folder
    assert run_id not in [r["run_id"] for r in backend.queue()["running"]]
    listed = backend.http.get("/api/eval/v2/runs").json()["runs"]
    assert {"run_id": run_id, "status": "completed"}.items() <= next(
        r for r in listed if r["run_id"] == run_id
    ).items()
    # The finished run's peak memory is recorded for the next run of this graph content.
    store = CalibrationStore(backend.workspace / "outputs" / "calibration.json")
    assert store.observations(ORACLE_KEY, 2)[-1]["ram"] > 0


# -- cancel ----------------------------------------------------------------------------------
def test_cancel_while_queued_is_final_at_once(backend: Backend) -> None:
    run_id = backend.start_run("babyai_oracle", 1, HUGE_WORKERS)
    poll_until(lambda: backend.status(run_id)["waiting_reason"], "an admission decision", 30.0)

    assert backend.cancel(run_id) == {"run_id": run_id, "status": "cancelled"}

    # No waiting: the answer is final when cancel returns, and nothing was ever spawned.
    assert backend.status(run_id)["status"] == "cancelled"
    assert (backend.run_dir(run_id) / "_DONE").is_file()
    assert not (backend.run_dir(run_id) / "stdout.log").exists()
    assert run_id not in [j["run_id"] for j in backend.queue()["queued"]]
    again = backend.http.post(f"/api/eval/v2/cancel/{run_id}")
    assert again.status_code == 409, again.text


def test_cancel_while_running_leaves_no_process_of_the_run(backend: Backend) -> None:
    run_id = backend.start_run("leaky", 1, 2)  # two 6 s episodes on two env servers
    pid = backend.running_pid(run_id)

    def tree_with_helper() -> list[psutil.Process] | None:
        tree = process_tree(pid)
        helper = [p for p in tree if "SIG_IGN" in " ".join(p.cmdline())]  # after its exec
        return tree if helper and len(tree) >= 4 else None

    # The eval subprocess, its two env servers, and the helper that ignores SIGTERM.
    tree = poll_until(tree_with_helper, "the run's env servers and helper to start")
    try:
        assert backend.cancel(run_id) == {"run_id": run_id, "status": "cancelling"}

        summary = backend.wait_status(run_id, "cancelled", 30.0)
        assert summary["status_counts"].get("completed", 0) < summary["episodes_total"]
        assert (backend.run_dir(run_id) / "_DONE").is_file()
        poll_until(lambda: not alive(tree), f"no process of {run_id} left", PROCESS_GONE_DEADLINE_S)
    finally:
        for proc in alive(tree):  # an orphan no longer belongs to the backend's tree
            proc.kill()


# -- crash and resume ------------------------------------------------------------------------
def test_killed_eval_subprocess_is_aborted_and_resume_equals_an_uninterrupted_run(
    backend: Backend,
) -> None:
    reference = backend.start_run("slow_oracle", 4, 2)
    victim = backend.start_run("slow_oracle", 4, 2)  # the same config

    def partly_done() -> bool:
        summary = backend.status(victim)
        assert summary["status"] not in TERMINAL, "the run ended before it could be killed"
        return 1 <= summary["episodes_done"] < summary["episodes_total"]

    poll_until(partly_done, f"{victim} to finish some but not all episodes")
    tree = process_tree(backend.running_pid(victim))
    tree[0].kill()  # SIGKILL of the eval subprocess

    aborted = backend.wait_status(victim, "aborted", 30.0)
    assert not (backend.run_dir(victim) / "_DONE").exists()
    poll_until(
        lambda: not alive(tree), "the killed run's env servers to go", PROCESS_GONE_DEADLINE_S
    )
    kept = {
        e["index"]: (
            backend.run_dir(victim) / "episodes" / f"ep{e['index']:04d}" / "episode.json"
        ).read_text()
        for e in aborted["episodes"]
    }
    assert 1 <= len(kept) < aborted["episodes_total"]

    resumed = backend.http.post(f"/api/eval/v2/resume/{victim}")
    assert resumed.json() == {"run_id": victim, "status": "queued"}, resumed.text
    final = backend.wait_status(victim, "completed")
    uninterrupted = backend.wait_status(reference, "completed")

    assert identities(final) == identities(uninterrupted)
    for key in (
        "episodes_total",
        "episodes_done",
        "aggregate_metrics",
        "aggregate_by_task",
        "status_counts",
    ):
        assert final[key] == uninterrupted[key], key
    # Only the missing episodes ran again: the records kept from before the kill are untouched.
    for index, text in kept.items():
        path = backend.run_dir(victim) / "episodes" / f"ep{index:04d}" / "episode.json"
        assert path.read_text() == text, index
    assert (backend.run_dir(victim) / "_DONE").is_file()
    again = backend.http.post(f"/api/eval/v2/resume/{victim}")
    assert again.status_code == 409 and "completed" in again.json()["detail"], again.text


# -- admission -------------------------------------------------------------------------------
def test_run_that_does_not_fit_ram_waits_and_does_not_block_others(
    backend: Backend, huge_run: str
) -> None:
    small = backend.start_run("babyai_oracle", 1, 1)  # queued after the huge one

    backend.wait_status(small, "completed")

    waiting = backend.status(huge_run)
    assert waiting["status"] == "queued"
    reason = RAM_REASON.match(waiting["waiting_reason"])
    assert reason is not None, waiting["waiting_reason"]
    assert int(reason.group(1)) == round(HUGE_RAM_MB * SAFETY_MARGIN)
    queued = {j["run_id"]: j for j in backend.queue()["queued"]}
    assert queued[huge_run]["waiting_reason"] == waiting["waiting_reason"]


def _play(url: str, body: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=RUN_DEADLINE_S) as client:
        return client.post("/api/canvas/play", json=body)


PLAY_STEPS = 50  # × SPIN_LATENCY_MS: the canvas holds the guard for about 5 s


def test_admission_is_refused_while_canvas_play_holds_the_guard(
    backend: Backend, huge_run: str
) -> None:
    def huge_reason() -> str:
        return str(backend.status(huge_run)["waiting_reason"])

    with ThreadPoolExecutor(max_workers=1) as pool:
        play = pool.submit(_play, backend.url, {"graph_name": "spin", "step_budget": PLAY_STEPS})
        # The huge run's reason turns to the canvas once a tick sees the guard held.
        poll_until(lambda: "canvas" in huge_reason(), "a tick to see the canvas guard held", 30.0)
        run_id = backend.start_run("babyai_oracle", 1, 1)
        reason = poll_until(
            lambda: backend.status(run_id)["waiting_reason"],
            "an admission decision on the new run",
            30.0,
        )
        assert "canvas" in reason
        assert backend.status(run_id)["status"] == "queued"
        assert not play.done(), "the canvas finished before the refusal could be observed"

        played = play.result(timeout=RUN_DEADLINE_S)

    assert played.status_code == 200, played.text
    assert played.json()["steps"] == PLAY_STEPS
    backend.wait_status(run_id, "completed")
    poll_until(lambda: RAM_REASON.match(huge_reason()), "the huge run to wait for RAM again", 30.0)


# -- WebSocket -------------------------------------------------------------------------------
WS_DEADLINE_S = 90.0


def _ws_connect(backend: Backend, origin: str | None = None) -> ClientConnection:
    if not any(importlib.util.find_spec(name) for name in ("websockets", "wsproto")):
        pytest.fail(
            "uvicorn has no WebSocket library, so /ws cannot work: the project must "
            "depend on 'websockets' (or uvicorn[standard])"
        )
    from websockets.sync.client import connect
    from websockets.typing import Origin

    url = backend.url.replace("http://", "ws://", 1) + "/ws"
    return connect(url, origin=Origin(origin) if origin else None, proxy=None, open_timeout=30)


def test_websocket_pushes_subprocess_progress(backend: Backend) -> None:
    with _ws_connect(backend, origin=backend.url) as ws:
        # Two 2.5 s episodes on one worker: the ~1 s relay sees the run between them.
        run_id = backend.start_run("spin", 1, 1, step_budget=25)
        deadline = time.monotonic() + WS_DEADLINE_S
        events: list[dict[str, Any]] = []
        while True:
            event = json.loads(ws.recv(timeout=max(0.0, deadline - time.monotonic())))
            if event.get("run_id") != run_id:
                continue
            assert event["source"] == "eval", event
            if event["type"] == "eval_complete":
                break
            assert event["type"] in ("eval_progress", "eval_episode_done"), event
            events.append(event)

    assert event["status"] == "completed"
    # The status change is pushed with the compact summary (no per-episode records) ...
    statuses = [e["summary"] for e in events if "summary" in e]
    assert [s["status"] for s in statuses] == ["running"], statuses
    assert "episodes" not in statuses[0]
    # ... and every episode's end as it happens: the first before the second has ended.
    kinds = [(e["type"], e.get("episodes_done")) for e in events if "summary" not in e]
    assert kinds == [
        ("eval_episode_done", None),
        ("eval_progress", 1),
        ("eval_episode_done", None),
        ("eval_progress", 2),
    ], kinds


def test_websocket_from_a_foreign_origin_is_refused(backend: Backend) -> None:
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as refused:
        _ws_connect(backend, origin="http://evil.example")

    assert refused.value.response.status_code == 403
