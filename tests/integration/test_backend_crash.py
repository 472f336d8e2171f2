"""Crashes of a real ``agentcanvas serve`` and what must hold after them.

- the backend SIGKILLed with a long run running and one queued: every process of the run is
  gone within 5 s, the run is ``aborted`` with summary.json equal to its episode folders, the
  backend starts again, and the resumed run has exactly one writer;
- a shared server lost in mid-run ends the run ``aborted`` (resumable), naming the server and
  its URL; the backend SIGKILLed under a run borrowing it ends that run ``aborted`` too;
- two simultaneous starts on a fresh backend launch one shared server, refcounted 2, and
  nothing of it is left after unload;
- spec.json files poisoned on disk never stop the backend from starting: those runs are
  marked ``failed`` with the reason (a torn summary.json is rebuilt from the spec).

Each test owns its backend(s) and workspace (the helpers are in ``support.backend``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from agentcanvas.eval.runlock import holder_pid
from agentcanvas.eval.store import RunDir
from support.backend import Backend, alive
from support.backend_workspace import HUGE_WORKERS, RAM_REASON, write_workspace
from support.polling import poll_until

pytestmark = pytest.mark.timeout(240)

GONE_WITHIN_S = 5.0  # the requirement: every process of the run gone this soon
LONG_EPISODES = 3000  # per task: far more than a test lets finish


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return write_workspace(tmp_path / "workspace")


def compact(backend: Backend, run_id: str) -> dict[str, Any]:
    response = backend.http.get(f"/api/eval/v2/status/{run_id}", params={"compact": True})
    assert response.status_code == 200, response.text
    summary: dict[str, Any] = response.json()
    return summary


def group_members(pgid: int) -> list[int]:
    """Living processes of the process group ``pgid`` (the run's: its eval process leads it)."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def on_disk(run_dir: Path) -> dict[int, str]:
    """index → status of every episode.json of the run."""
    return {
        int(path.parent.name[2:]): json.loads(path.read_text())["status"]
        for path in (run_dir / "episodes").glob("ep*/episode.json")
    }


def assert_agrees(run_dir: Path) -> dict[str, Any]:
    """summary.json lists exactly the episode folders' records, counts included."""
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    listed = {e["index"]: e["status"] for e in summary["episodes"]}
    assert listed == on_disk(run_dir), summary["status"]
    finished = sum(1 for status in listed.values() if status != "cancelled")
    assert summary["episodes_done"] == finished
    assert summary["status_counts"].get("cancelled", 0) == len(listed) - finished
    return summary


def kill_backend(backend: Backend, eval_pid: int) -> float:
    """SIGKILL the backend; seconds until none of its processes (the run's group included)
    is left."""
    pgid = os.getpgid(eval_pid)
    tree = backend.snapshot_tree()
    killed_at = time.monotonic()
    assert backend.stop(signal.SIGKILL) == -signal.SIGKILL
    poll_until(
        lambda: not alive(tree) and not group_members(pgid),
        "every process of the killed backend to go",
        30.0,
    )
    return time.monotonic() - killed_at


def test_backend_sigkill_mid_run_then_restart_and_one_writer(
    workspace: Path, backends: list[Backend]
) -> None:
    first = Backend(workspace)
    backends.append(first)
    queued = first.start_run("babyai_oracle", 2, HUGE_WORKERS)  # waits for RAM for ever
    poll_until(
        lambda: RAM_REASON.match(first.status(queued)["waiting_reason"] or ""),
        "the run to wait for RAM",
        30.0,
    )
    assert compact(first, queued)["episodes_total"] == 4  # known from submit, not 0/0
    run_id = first.start_run("babyai_oracle", LONG_EPISODES, 2)
    poll_until(lambda: compact(first, run_id)["episodes_done"] >= 10, "episodes to finish")
    eval_pid = first.running_pid(run_id)
    # its env servers: forked from a template (grandchildren) or spawned (children)
    assert len(psutil.Process(eval_pid).children(recursive=True)) >= 2

    gone_s = kill_backend(first, eval_pid)
    print(f"every process of the run gone {gone_s:.2f} s after the backend's SIGKILL")
    assert gone_s < GONE_WITHIN_S

    run_dir = first.run_dir(run_id)
    summary = assert_agrees(run_dir)
    assert summary["status"] == "aborted", summary["status"]
    assert summary["status_counts"].get("cancelled", 0) <= 2  # at most those in flight
    assert not (run_dir / "_DONE").exists()

    second = Backend(workspace)
    backends.append(second)
    assert compact(second, run_id)["status"] == "aborted"
    assert compact(second, queued)["status"] == "queued"
    assert any(j["run_id"] == queued for j in second.queue()["queued"])
    assert second.http.post(f"/api/eval/v2/resume/{run_id}").status_code == 200
    again = second.http.post(f"/api/eval/v2/resume/{run_id}")
    assert again.status_code == 409, again.text
    pid = second.running_pid(run_id)
    poll_until(lambda: holder_pid(RunDir(run_dir)) == pid, "the eval process to hold the lock")
    done_before = summary["episodes_done"]
    poll_until(
        lambda: compact(second, run_id)["episodes_done"] > done_before + 5,
        "the resumed run to record episodes",
    )
    assert second.cancel(run_id)["status"] == "cancelling"
    second.wait_status(run_id, "cancelled")
    final = assert_agrees(run_dir)
    assert final["episodes_total"] == 2 * LONG_EPISODES
    assert final["status_counts"].get("cancelled", 0) <= 2


def policy_servers(backend: Backend) -> list[psutil.Process]:
    found = []
    for proc in psutil.Process(backend.proc.pid).children(recursive=True):
        try:
            if "policy_mlp" in proc.cmdline() and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.NoSuchProcess:
            continue
    return found


def test_a_lost_shared_server_aborts_the_run_naming_it(
    workspace: Path, backends: list[Backend]
) -> None:
    backend = Backend(workspace)
    backends.append(backend)
    run_id = backend.start_run("cartpole_mlp", LONG_EPISODES, 2)
    poll_until(lambda: compact(backend, run_id)["episodes_done"] >= 1, "an episode to finish")
    url = backend.http.get("/api/nodesets").json()["servers"]["policy_mlp"]["url"]
    [server] = policy_servers(backend)
    server.kill()

    summary = backend.wait_status(run_id, "aborted")
    assert "policy_mlp" in summary["error"] and url in summary["error"], summary["error"]
    assert "ExceptionGroup" not in summary["error"]
    run_dir = backend.run_dir(run_id)
    assert_agrees(run_dir)
    assert not (run_dir / "_DONE").exists()

    # Resumed: the dead shared server is launched again; then the backend itself is killed.
    assert backend.http.post(f"/api/eval/v2/resume/{run_id}").status_code == 200
    done_before = summary["episodes_done"]
    poll_until(
        lambda: compact(backend, run_id)["episodes_done"] > done_before,
        "the resumed run to record an episode",
    )
    gone_s = kill_backend(backend, backend.running_pid(run_id))
    assert gone_s < GONE_WITHIN_S
    summary = assert_agrees(run_dir)
    assert summary["status"] == "aborted", (summary["status"], summary["error"])
    assert "ExceptionGroup" not in (summary["error"] or "")


def test_concurrent_starts_launch_one_shared_server(
    workspace: Path, backends: list[Backend]
) -> None:
    backend = Backend(workspace)
    backends.append(backend)
    barrier = threading.Barrier(2)
    started: list[str] = []

    def start() -> None:
        with httpx.Client(base_url=backend.url, timeout=120.0) as client:
            barrier.wait(10.0)
            body = {"graph_name": "cartpole_mlp", "episode_count": 1, "worker_count": 1}
            response = client.post("/api/eval/v2/start", json=body)
            assert response.status_code == 200, response.text
            started.append(response.json()["run_id"])

    threads = [threading.Thread(target=start) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120.0)
    assert len(started) == 2
    # The starts answer before the model loads; both runs then borrow the one server.
    for run_id in started:
        backend.wait_status(run_id, "completed")
    assert len(policy_servers(backend)) == 1  # a second launch would have left its process
    urls = [json.loads((backend.run_dir(r) / "shared_urls.json").read_text()) for r in started]
    assert urls[0] == urls[1] and set(urls[0]) == {"policy_mlp"}, urls
    assert backend.http.get("/api/nodesets").json()["servers"]["policy_mlp"]["refcount"] == 0
    unloaded = backend.http.post("/api/nodesets/policy_mlp/unload").json()
    assert unloaded["status"] == "unloaded", unloaded
    poll_until(lambda: not policy_servers(backend), "no policy_mlp process to be left", 30.0)


POISONS = {
    "not JSON": (lambda spec: None, "is not valid JSON"),
    "null count": (lambda spec: spec["config"].update(episode_count=None), "episode_count"),
    "null priority": (lambda spec: spec["scheduling"].update(priority=None), "priority"),
    "no graph": (lambda spec: spec.pop("graph"), "graph"),
    "bad graph": (lambda spec: spec["graph"].update(nodes=[{"id": 3}]), "graph"),
}


def test_poisoned_specs_never_stop_the_backend(workspace: Path, backends: list[Backend]) -> None:
    first = Backend(workspace)
    backends.append(first)
    runs = {name: first.start_run("babyai_oracle", 1, HUGE_WORKERS) for name in POISONS}
    healthy = first.start_run("babyai_oracle", 1, HUGE_WORKERS)
    torn_summary = first.start_run("babyai_oracle", 1, HUGE_WORKERS)
    assert first.stop(signal.SIGTERM) in (0, -signal.SIGTERM), first.log()

    for name, (poison, _) in POISONS.items():
        path = first.run_dir(runs[name]) / "spec.json"
        spec = json.loads(path.read_text())
        if poison(spec) is None and name == "not JSON":
            path.write_text('{"config": {"episode_count": ')
        else:
            path.write_text(json.dumps(spec))
    (first.run_dir(torn_summary) / "summary.json").write_text('{"status": "runn')

    second = Backend(workspace)  # starts: that is the first check
    backends.append(second)
    for name, (_, reason) in POISONS.items():
        summary = compact(second, runs[name])
        assert summary["status"] == "failed", (name, summary)
        assert reason in summary["error"] and "spec.json" in summary["error"], summary["error"]
        assert (second.run_dir(runs[name]) / "_DONE").exists()
    rebuilt = compact(second, torn_summary)  # from spec.json and the episode folders
    assert rebuilt["status"] == "aborted" and rebuilt["episodes_total"] == 2, rebuilt
    queued = [j["run_id"] for j in second.queue()["queued"]]
    assert queued == [healthy]
    listing = second.http.get("/api/eval/v2/runs")
    assert listing.status_code == 200 and listing.json()["total"] == len(POISONS) + 2
