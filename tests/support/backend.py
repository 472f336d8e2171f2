"""A real ``agentcanvas serve --port 0`` on loopback, as a child of the test process.

``Server``/``serve`` speak raw HTTP (``http.client`` sends a path byte for byte); ``Backend``
drives the eval API through httpx and cleans up the whole process tree.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from support.cli import COMMAND
from support.polling import poll_until

START_DEADLINE_S = 60.0
RUN_DEADLINE_S = 120.0
STOP_DEADLINE_S = 30.0
ANNOUNCE = re.compile(r"agentcanvas backend on (http://\S+)")
ANNOUNCED_PORT = re.compile(r"agentcanvas backend on http://[^:]+:(\d+)")
TERMINAL = frozenset({"completed", "failed", "cancelled", "aborted"})
QUEUE = "/api/eval/v2/queue"
DROPPED_ENV = ("AGENTCANVAS_EVAL_SUBPROCESS", "AGENTCANVAS_TOKEN")


def spawn_serve(
    workspace: Path, log: Path, *args: str, drop_env: Iterable[str] = DROPPED_ENV
) -> subprocess.Popen[bytes]:
    """Start ``agentcanvas serve --port 0 *args`` in ``workspace`` (its AGENTCANVAS_HOME),
    stdout and stderr appended to ``log``; ``drop_env`` are left out of its environment."""
    dropped = set(drop_env)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(AGENTCANVAS_HOME=str(workspace), HF_HUB_OFFLINE="1")
    with log.open("ab") as out:
        return subprocess.Popen(
            [*COMMAND, "serve", "--port", "0", *args],
            cwd=workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )


def stop_process(proc: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> int:
    """Signal ``proc`` and reap it (SIGKILL if it outlives the deadline); its exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_DEADLINE_S)
    return proc.returncode


# -- raw HTTP ---------------------------------------------------------------------------------
@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """Send ``path`` byte for byte with exactly these headers (Host defaults to ours);
        the status and the answer's JSON (or text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            sent = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
            if body is not None:
                sent.setdefault("Content-Type", "application/json")
                sent["Content-Length"] = str(len(body))
            for name, value in sent.items():
                conn.putheader(name, value)
            conn.endheaders(body)
            response = conn.getresponse()
            text = response.read().decode(errors="replace")
        finally:
            conn.close()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text

    def post_json(
        self, path: str, payload: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        return self.request("POST", path, json.dumps(payload).encode(), headers)


def serve(workspace: Path, *args: str, log: Path, ready_path: str) -> Iterator[Server]:
    """Generator (for a fixture, or a ``for``): a Server once ``ready_path`` answers at all;
    the backend is stopped when the generator is closed."""
    proc = spawn_serve(workspace, log, *args)
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while (found := ANNOUNCED_PORT.search(log.read_text())) is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no announcement: {log.read_text()}"
            time.sleep(0.05)
        server = Server(proc, int(found.group(1)), log)
        while True:
            try:
                server.request("GET", ready_path)
                break
            except OSError:
                assert time.monotonic() < deadline, f"backend does not answer: {log.read_text()}"
                time.sleep(0.05)
        yield server
    finally:
        stop_process(proc)


# -- the eval API, with process-tree cleanup --------------------------------------------------
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
        self.proc = spawn_serve(
            workspace,
            self.log_path,
            *args,
            drop_env=(*DROPPED_ENV, "AGENTCANVAS_FAKE_VRAM_MB", "ACTIVE_WORKSPACE_DIR"),
        )
        self._tree: list[psutil.Process] = []
        try:
            self.url = poll_until(
                self._announced_url, "the backend to announce its URL", START_DEADLINE_S
            )
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
            return self.http.get(QUEUE).status_code == 200
        except httpx.TransportError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    # -- the API ---------------------------------------------------------------------------
    def start_run(
        self, graph_name: str, episode_count: int, worker_count: int, **extra: Any
    ) -> str:
        body = {
            "graph_name": graph_name,
            "episode_count": episode_count,
            "worker_count": worker_count,
            **extra,
        }
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
        listing: dict[str, list[dict[str, Any]]] = self.http.get(QUEUE).json()
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

    def wait_status(
        self, run_id: str, wanted: str, deadline_s: float = RUN_DEADLINE_S
    ) -> dict[str, Any]:
        """Poll until the run's status is ``wanted`` and its process is reaped; fail at once
        on another final status."""

        def check() -> dict[str, Any] | None:
            summary = self.status(run_id)
            if summary["status"] == wanted:
                return None if self.is_active(run_id) else self.status(run_id)
            if summary["status"] in TERMINAL:
                stderr = self.run_dir(run_id) / "stderr.log"
                tail = stderr.read_text()[-3000:] if stderr.exists() else ""
                raise AssertionError(
                    f"{run_id} ended {summary['status']}, not {wanted}: "
                    f"{summary.get('error')}\n{tail}"
                )
            return None

        return poll_until(check, f"run {run_id} to become {wanted}", deadline_s)

    def run_dir(self, run_id: str) -> Path:
        return self.workspace / "outputs" / "eval_runs" / run_id

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        """``method path``'s JSON answer; an HTTP error status fails the caller."""
        response = self.http.request(method, path, **kwargs)
        response.raise_for_status()
        return response.json()

    def diagnostics(self, run_id: str) -> str:
        """What a failed wait needs: the run's status and the tails of its logs."""
        run_dir = self.run_dir(run_id)
        logs = sorted(run_dir.glob("*.log")) + sorted(run_dir.glob("servers/*.log"))
        tails = [
            f"--- {p.relative_to(run_dir)}\n{p.read_text(errors='replace')[-2000:]}" for p in logs
        ]
        summary = run_dir / "summary.json"
        status = json.loads(summary.read_text()).get("status") if summary.exists() else None
        return "\n".join(
            [f"run {run_id}: status {status}", *tails, "--- backend", self.log()[-2000:]]
        )

    def wait_finished(
        self, run_ids: list[str], deadline_s: float = RUN_DEADLINE_S
    ) -> dict[str, dict[str, Any]]:
        """Each run's compact status once all of them have a final status."""
        done: dict[str, dict[str, Any]] = {}

        def all_final() -> bool:
            for run_id in set(run_ids) - set(done):
                summary = self.api("GET", f"/api/eval/v2/status/{run_id}", params={"compact": True})
                if summary["status"] in TERMINAL:
                    done[run_id] = summary
            return len(done) == len(run_ids)

        try:
            poll_until(all_final, f"runs {run_ids} to finish", deadline_s)
        except AssertionError as exc:
            missing = sorted(set(run_ids) - set(done))
            details = "\n".join(self.diagnostics(run_id) for run_id in missing)
            raise AssertionError(f"{exc}: {missing}\n{details}") from exc
        return done

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
        return stop_process(self.proc, sig)

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Finaliser: stop the backend and kill whatever of its tree survived it."""
        try:
            self.stop()
        finally:
            if hasattr(self, "http"):
                self.http.close()
            for proc in alive(self._tree):
                proc.kill()
