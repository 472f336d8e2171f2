"""The backend end to end: a real ``agentcanvas serve`` on loopback, real eval subprocesses.

One backend serves the module; every test leaves nothing of its own queued or running. The
workspace holds graphs of its own: ``slow_oracle`` (the oracle on an env with a step latency,
so a run lasts long enough to be interrupted), ``spin`` (turns on the spot until the step
budget ends: an episode of known length) and ``leaky`` (``spin`` plus a helper process that
ignores SIGTERM). A calibration recorded before the backend starts makes (babyai_oracle,
HUGE_WORKERS workers) need more RAM than any machine has: such a run waits for admission for
as long as a test needs it to, with nothing faked.

The helpers at the top are shared with ``test_backend_restart.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import psutil
import pytest

from agentcanvas.eval.config import EpisodeResult
from agentcanvas.scheduler.calibration import SAFETY_MARGIN, CalibrationStore

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

T = TypeVar("T")

SCRIPT = Path(sys.executable).parent / "agentcanvas"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "agentcanvas.cli"]
START_DEADLINE_S = 60.0
RUN_DEADLINE_S = 120.0
STOP_DEADLINE_S = 30.0
PROCESS_GONE_DEADLINE_S = 30.0
POLL_S = 0.05
TERMINAL = frozenset({"completed", "failed", "cancelled", "aborted"})
ANNOUNCE = re.compile(r"agentcanvas backend on (http://\S+)")

HUGE_WORKERS = 3
HUGE_RAM_MB = 1e9  # recorded peak for (babyai_oracle, HUGE_WORKERS): never fits
RAM_REASON = re.compile(r"^ram: needs (\d+) MB, (\d+) MB available$")
SLOW_ORACLE_LATENCY_MS = 200
SPIN_LATENCY_MS = 100

# A local node set that starts a helper process ignoring SIGTERM, as a leaky simulator might:
# it lives in the run's process group, and only a kill of that group ends it.
STRAGGLER_NODESET = """
import subprocess
import sys

from agentcanvas.nodes.base import NodeSet
from agentcanvas.nodes.manifest import PortSpec

IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"


class State:
    def __init__(self):
        self.proc = None


NODESET = NodeSet(name="straggler", version="0.1.0", parallelism="local",
                  description="Starts a helper that ignores SIGTERM.", state_factory=State)


@NODESET.node("spawn", outputs=[PortSpec(name="pid", type="int")])
def spawn(inputs, config, state, ctx):
    if state.proc is None:
        state.proc = subprocess.Popen([sys.executable, "-c", IGNORE_TERM])
    return {"pid": state.proc.pid}
"""

_ORACLE = json.loads(
    (Path(__file__).resolve().parents[2] / "src/agentcanvas/graphs/babyai_oracle.json").read_text()
)


def poll_until(check: Callable[[], T | None], what: str, deadline_s: float = RUN_DEADLINE_S) -> T:
    """Call ``check`` until it returns something other than None/False; fail at the deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {deadline_s:g} s waiting for {what}")
        time.sleep(POLL_S)


def write_workspace(root: Path) -> Path:
    """The module's workspace: the two graphs and the never-fitting calibration."""
    graphs = root / "graphs"
    graphs.mkdir(parents=True, exist_ok=True)
    slow = {**_ORACLE, "name": "slow_oracle",
            "env": {**_ORACLE["env"], "fields": {**_ORACLE["env"]["fields"],
                                                 "step_latency_ms": SLOW_ORACLE_LATENCY_MS}}}
    spin = {
        "version": 1, "name": "spin", "description": "Turns on the spot until the budget ends.",
        "env": {"nodeset": "env_minigrid", "tasks": ["BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0"],
                "fields": {"dataset": "babyai", "split": "GoTo", "task_id": "BabyAI-GoToObj-v0",
                           "step_latency_ms": SPIN_LATENCY_MS}},
        "nodes": [{"id": "env", "type": "env_minigrid.step"},
                  {"id": "turn", "type": "core.constant", "config": {"value": 0}},
                  {"id": "out", "type": "core.graphOut"}],
        "edges": [{"source": "turn.value", "target": "env.action", "next_iteration": True},
                  {"source": "env.metrics", "target": "out.metrics"}],
    }
    leaky = {**spin, "name": "leaky",
             "nodes": [*spin["nodes"], {"id": "helper", "type": "straggler.spawn"}],
             "edges": [*spin["edges"], {"source": "helper.pid", "target": "out.helper_pid"}]}
    for graph in (slow, spin, leaky):
        (graphs / f"{graph['name']}.json").write_text(json.dumps(graph, indent=1))
    nodeset = root / "graph_nodes" / "straggler"
    nodeset.mkdir(parents=True, exist_ok=True)
    (nodeset / "__init__.py").write_text(STRAGGLER_NODESET)
    calibration = CalibrationStore(root / "outputs" / "calibration.json")
    calibration.record("babyai_oracle", HUGE_WORKERS, {"ram": HUGE_RAM_MB})
    return root


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (a zombie has exited; is_running guards pid reuse)."""
    living = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                living.append(proc)
        except psutil.NoSuchProcess:
            continue
    return living


def process_tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


class Backend:
    """``agentcanvas serve --port 0`` in a workspace, as a child of the test process."""

    def __init__(self, workspace: Path, *args: str) -> None:
        self.workspace = workspace
        logs = workspace / "serve-logs"
        logs.mkdir(exist_ok=True)
        self.log_path = logs / f"serve-{time.time_ns()}.log"
        env = {k: v for k, v in os.environ.items()
               if k not in ("AGENTCANVAS_EVAL_SUBPROCESS", "AGENTCANVAS_FAKE_VRAM_MB",
                            "AGENTCANVAS_TOKEN", "ACTIVE_WORKSPACE_DIR")}
        env.update(AGENTCANVAS_HOME=str(workspace), HF_HUB_OFFLINE="1")
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([*COMMAND, "serve", "--port", "0", *args], cwd=workspace,
                                         env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self._tree: list[psutil.Process] = []
        try:
            self.url = poll_until(self._announced_url, "the backend to announce its URL",
                                  START_DEADLINE_S)
            self.http = httpx.Client(base_url=self.url, timeout=30.0)
            poll_until(self._answers, "/api/eval/v2/queue to answer", START_DEADLINE_S)
        except BaseException:
            self.close()
            raise

    def _announced_url(self) -> str | None:
        if self.proc.poll() is not None:
            raise AssertionError(f"backend exited with {self.proc.returncode}:\n{self.log()}")
        found = ANNOUNCE.search(self.log())
        return found.group(1) if found else None

    def _answers(self) -> bool:
        try:
            return self.http.get("/api/eval/v2/queue").status_code == 200
        except httpx.TransportError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    # -- the API ---------------------------------------------------------------------------
    def start_run(self, graph_name: str, episode_count: int, worker_count: int,
                  **extra: Any) -> str:
        body = {"graph_name": graph_name, "episode_count": episode_count,
                "worker_count": worker_count, **extra}
        response = self.http.post("/api/eval/v2/start", json=body)
        assert response.status_code == 200, response.text
        started = response.json()
        assert started["status"] == "queued" and started["via_subprocess"] is True, started
        return str(started["run_id"])

    def status(self, run_id: str) -> dict[str, Any]:
        response = self.http.get(f"/api/eval/v2/status/{run_id}")
        assert response.status_code == 200, response.text
        summary: dict[str, Any] = response.json()
        return summary

    def queue(self) -> dict[str, list[dict[str, Any]]]:
        listing: dict[str, list[dict[str, Any]]] = self.http.get("/api/eval/v2/queue").json()
        return listing

    def cancel(self, run_id: str) -> dict[str, Any]:
        response = self.http.post(f"/api/eval/v2/cancel/{run_id}")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def running_pid(self, run_id: str) -> int:
        """The pid of the run's eval subprocess (waits for the spawn)."""

        def pid() -> int | None:
            entries = [r for r in self.queue()["running"] if r["run_id"] == run_id]
            return int(entries[0]["pid"]) if entries else None

        return poll_until(pid, f"{run_id} to be spawned")

    def is_active(self, run_id: str) -> bool:
        listing = self.queue()
        return any(j["run_id"] == run_id for j in [*listing["queued"], *listing["running"]])

    def wait_status(self, run_id: str, wanted: str, deadline_s: float = RUN_DEADLINE_S
                    ) -> dict[str, Any]:
        """Poll until the run's status is ``wanted`` and its process is reaped; fail at once
        on another final status."""

        def check() -> dict[str, Any] | None:
            summary = self.status(run_id)
            if summary["status"] == wanted:
                return None if self.is_active(run_id) else self.status(run_id)
            if summary["status"] in TERMINAL:
                stderr = (self.run_dir(run_id) / "stderr.log")
                tail = stderr.read_text()[-3000:] if stderr.exists() else ""
                raise AssertionError(f"{run_id} ended {summary['status']}, not {wanted}: "
                                     f"{summary.get('error')}\n{tail}")
            return None

        return poll_until(check, f"run {run_id} to become {wanted}", deadline_s)

    def run_dir(self, run_id: str) -> Path:
        return self.workspace / "outputs" / "eval_runs" / run_id

    # -- stopping --------------------------------------------------------------------------
    def snapshot_tree(self) -> list[psutil.Process]:
        """Remember every descendant now, so that close() can clean up what survives it."""
        try:
            self._tree = process_tree(self.proc.pid)
        except psutil.NoSuchProcess:
            self._tree = []
        return list(self._tree)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Signal the backend and reap it (SIGKILL if it outlives the deadline)."""
        if self.proc.poll() is None:
            self.snapshot_tree()
            self.proc.send_signal(sig)
            try:
                self.proc.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_DEADLINE_S)
        return self.proc.returncode

    def close(self) -> None:
        """Finaliser: stop the backend and kill whatever of its tree survived it."""
        try:
            self.stop()
        finally:
            if hasattr(self, "http"):
                self.http.close()
            for proc in alive(self._tree):
                proc.kill()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_workspace(tmp_path_factory.mktemp("backend") / "workspace")


@pytest.fixture(scope="module")
def backend(workspace: Path) -> Iterator[Backend]:
    server = Backend(workspace)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def huge_run(backend: Backend) -> Iterator[str]:
    """A queued run that can never be admitted (RAM): cancelled after the test."""
    run_id = backend.start_run("babyai_oracle", 1, HUGE_WORKERS)
    poll_until(lambda: RAM_REASON.match(backend.status(run_id)["waiting_reason"] or ""),
               "the huge run to be refused for RAM", 30.0)
    try:
        yield run_id
    finally:
        if backend.status(run_id)["status"] == "queued":
            backend.cancel(run_id)


def identities(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [EpisodeResult.model_validate(e).identity()
            for e in sorted(summary["episodes"], key=lambda e: e["index"])]


# -- start → completed ---------------------------------------------------------------------
def test_start_queues_then_runs_to_completion_with_a_complete_run_folder(backend: Backend
                                                                         ) -> None:
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
    for name in ("spec.json", "shared_urls.json", "summary.json", "graph.json", "stdout.log",
                 "stderr.log", "_DONE"):
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
        assert (episode / "assets").is_dir()
    assert run_id not in [r["run_id"] for r in backend.queue()["running"]]
    listed = backend.http.get("/api/eval/v2/runs").json()["runs"]
    assert {"run_id": run_id, "status": "completed"}.items() <= next(
        r for r in listed if r["run_id"] == run_id).items()
    # The finished run's peak memory is recorded for the next admission of this config.
    store = CalibrationStore(backend.workspace / "outputs" / "calibration.json")
    assert store.observations("babyai_oracle", 2)[-1]["ram"] > 0


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
        poll_until(lambda: not alive(tree), f"no process of {run_id} left",
                   PROCESS_GONE_DEADLINE_S)
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
    poll_until(lambda: not alive(tree), "the killed run's env servers to go",
               PROCESS_GONE_DEADLINE_S)
    kept = {e["index"]: (backend.run_dir(victim) / "episodes" / f"ep{e['index']:04d}"
                         / "episode.json").read_text()
            for e in aborted["episodes"]}
    assert 1 <= len(kept) < aborted["episodes_total"]

    resumed = backend.http.post(f"/api/eval/v2/resume/{victim}")
    assert resumed.json() == {"run_id": victim, "status": "queued"}, resumed.text
    final = backend.wait_status(victim, "completed")
    uninterrupted = backend.wait_status(reference, "completed")

    assert identities(final) == identities(uninterrupted)
    for key in ("episodes_total", "episodes_done", "aggregate_metrics", "aggregate_by_task",
                "status_counts"):
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
        reason = poll_until(lambda: backend.status(run_id)["waiting_reason"],
                            "an admission decision on the new run", 30.0)
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
        pytest.fail("uvicorn has no WebSocket library, so /ws cannot work: the project must "
                    "depend on 'websockets' (or uvicorn[standard])")
    from websockets.sync.client import connect
    from websockets.typing import Origin

    url = backend.url.replace("http://", "ws://", 1) + "/ws"
    return connect(url, origin=Origin(origin) if origin else None, proxy=None, open_timeout=30)


def test_websocket_pushes_subprocess_progress(backend: Backend) -> None:
    with _ws_connect(backend, origin=backend.url) as ws:
        # Two 2.5 s episodes on one worker: the ~1 s relay sees the run between them.
        run_id = backend.start_run("spin", 1, 1, step_budget=25)
        deadline = time.monotonic() + WS_DEADLINE_S
        progress: list[dict[str, Any]] = []
        while True:
            event = json.loads(ws.recv(timeout=max(0.0, deadline - time.monotonic())))
            if event.get("run_id") != run_id:
                continue
            assert event["source"] == "eval", event
            if event["type"] == "eval_complete":
                break
            assert event["type"] == "eval_progress", event
            progress.append(event["summary"])

    assert event["status"] == "completed"
    midway = [s for s in progress if s["status"] == "running" and 0 < s["episodes_done"] < 2]
    assert midway, [(s["status"], s["episodes_done"]) for s in progress]
    assert progress[-1]["status"] == "completed" and progress[-1]["episodes_done"] == 2
    assert "episodes" not in progress[-1]  # compact: per-episode records stay on disk


def test_websocket_from_a_foreign_origin_is_refused(backend: Backend) -> None:
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as refused:
        _ws_connect(backend, origin="http://evil.example")

    assert refused.value.response.status_code == 403
