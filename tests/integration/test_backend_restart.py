"""The backend stopped and started again, and killed: queue on disk, no orphan processes.

Each test owns its backend(s) and workspace (the helpers are in ``support.backend``).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import psutil
import pytest

from support.backend import Backend, alive
from support.backend_workspace import (
    HUGE_WORKERS,
    PROCESS_GONE_DEADLINE_S,
    RAM_REASON,
    write_workspace,
)
from support.polling import poll_until


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return write_workspace(tmp_path / "workspace")


def test_restart_keeps_the_queue_and_aborts_what_ran(
    workspace: Path, backends: list[Backend]
) -> None:
    first = Backend(workspace)
    backends.append(first)
    queued = first.start_run("babyai_oracle", 1, HUGE_WORKERS)  # waits for RAM
    poll_until(
        lambda: RAM_REASON.match(first.status(queued)["waiting_reason"] or ""),
        "the run to wait for RAM",
        30.0,
    )
    running = first.start_run("spin", 1, 1, step_budget=10)  # two 1 s episodes
    poll_until(
        lambda: first.status(running)["timings"].get("started_at"),
        "the second run to start its episodes",
    )

    # uvicorn shuts down gracefully, then re-raises the signal: the exit status says SIGTERM.
    assert first.stop(signal.SIGTERM) in (0, -signal.SIGTERM), first.log()

    assert json.loads((first.run_dir(queued) / "summary.json").read_text())["status"] == "queued"
    # The machine "grows": without the calibration the queued run fits after the restart.
    (workspace / "outputs" / "calibration.json").unlink()
    second = Backend(workspace)
    backends.append(second)

    interrupted = second.status(running)
    assert interrupted["status"] == "aborted", interrupted["status"]
    assert "backend stopped" in interrupted["error"]
    assert not (second.run_dir(running) / "_DONE").exists()
    summary = second.wait_status(queued, "completed")
    assert summary["episodes_done"] == 2
    assert (second.run_dir(queued) / "_DONE").is_file()
    resumed = second.http.post(f"/api/eval/v2/resume/{running}")
    assert resumed.status_code == 200, resumed.text
    assert second.wait_status(running, "completed")["episodes_done"] == 2


def test_sigkill_of_the_backend_leaves_no_process_of_it(
    workspace: Path, backends: list[Backend]
) -> None:
    backend = Backend(workspace)
    backends.append(backend)
    loaded = backend.http.post("/api/nodesets/policy_mlp/load")  # a shared server
    assert loaded.status_code == 200, loaded.text
    run_id = backend.start_run("spin", 1, 2)  # two 6 s episodes on two env servers
    poll_until(
        lambda: backend.status(run_id)["timings"].get("started_at"), "the run to start its episodes"
    )
    eval_pid = backend.running_pid(run_id)
    tree = backend.snapshot_tree()
    children = {p.pid for p in psutil.Process(backend.proc.pid).children()}
    assert eval_pid in children and len(children) >= 2, tree  # the run and the shared server
    # its env servers: forked from a template (grandchildren) or spawned (children)
    assert len(psutil.Process(eval_pid).children(recursive=True)) >= 2

    assert backend.stop(signal.SIGKILL) == -signal.SIGKILL

    poll_until(
        lambda: not alive(tree),
        "every process of the killed backend to go",
        PROCESS_GONE_DEADLINE_S,
    )
    # The run died with its parent: resumable, not finished for good.
    summary = json.loads((backend.run_dir(run_id) / "summary.json").read_text())
    assert summary["status"] == "aborted", summary["status"]
    assert not (backend.run_dir(run_id) / "_DONE").exists()
