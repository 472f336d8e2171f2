"""The backend's path from submit to the first episode, and the eval subprocess's cold start.

    .venv/bin/python bench/scheduler.py [--quick] [--graph NAME] [--repeats R]

A real ``agentcanvas serve`` on loopback in a temporary workspace; runs are submitted one at
a time over HTTP, at worker counts N = 1, 4, 8 (``--quick``: one repeat each; otherwise the
median of ``--repeats``). For each run:

- ``submit→spawn``: POST /api/eval/v2/start until the scheduler spawned the eval subprocess
  (its ``started_at`` in /api/eval/v2/queue);
- the cold start of the eval subprocess, from its summary.json ``timings``: ``python`` (spawn
  → its main() runs: interpreter start and imports), ``scan`` (``scan_all``),
  ``borrow`` (``register_remote_nodeset`` for each shared server of the backend) and
  ``N servers`` (``ensure_nodesets_for_graph``: start N env servers — forked from a template
when the node set is forkable, else spawned — and wait until ready);
- ``→1st ep``: submit until the first episode.json is written.

The default graph is ``cartpole_mlp`` (a shared ``policy_mlp`` server, borrowed, and a
replicated ``env_gym``) with a step budget of 5, one episode per worker. The shared server is
loaded, and one run made, before anything is timed. Ratios are against N = 1 in this run.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

SCRIPT = Path(sys.executable).parent / "agentcanvas"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "agentcanvas.cli"]
ANNOUNCE = re.compile(r"agentcanvas backend on (http://\S+)")
START_DEADLINE_S = 60.0
RUN_DEADLINE_S = 300.0
POLL_S = 0.005
WORKER_COUNTS = (1, 4, 8)
STEP_BUDGET = 5
PHASES = ("submit→spawn", "python", "scan", "borrow", "N servers", "cold start", "→1st ep")


@dataclass
class Sample:
    """One run's phases, in seconds."""

    phases: dict[str, float]


class Backend:
    """``agentcanvas serve --port 0`` in a workspace."""

    def __init__(self, workspace: Path) -> None:
        self.log = workspace / "serve.log"
        env = {**os.environ, "AGENTCANVAS_HOME": str(workspace), "HF_HUB_OFFLINE": "1"}
        env.pop("AGENTCANVAS_EVAL_SUBPROCESS", None)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*COMMAND, "serve", "--port", "0"],
                cwd=workspace,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        deadline = time.monotonic() + START_DEADLINE_S
        while (found := ANNOUNCE.search(self.log.read_text())) is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"backend did not start:\n{self.log.read_text()}")
            time.sleep(0.05)
        self.http = httpx.Client(base_url=found.group(1), timeout=RUN_DEADLINE_S)
        while True:
            try:
                self.http.get("/api/eval/v2/queue").raise_for_status()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def _spawned_at(backend: Backend, run_id: str, deadline: float) -> float:
    while time.monotonic() < deadline:
        for entry in backend.http.get("/api/eval/v2/queue").json()["running"]:
            if entry["run_id"] == run_id:
                return float(entry["started_at"])
        time.sleep(POLL_S)
    raise SystemExit(f"{run_id} was not spawned in time")


def _finished(backend: Backend, run_id: str, deadline: float) -> dict[str, Any]:
    while time.monotonic() < deadline:
        summary: dict[str, Any] = backend.http.get(f"/api/eval/v2/status/{run_id}").json()
        listing = backend.http.get("/api/eval/v2/queue").json()
        active = {e["run_id"] for e in [*listing["queued"], *listing["running"]]}
        if (
            summary["status"] in ("completed", "failed", "cancelled", "aborted")
            and run_id not in active
        ):
            if summary["status"] != "completed":
                raise SystemExit(f"{run_id} ended {summary['status']}: {summary.get('error')}")
            return summary
        time.sleep(0.05)
    raise SystemExit(f"{run_id} did not finish in time")


def measure(backend: Backend, runs_dir: Path, graph: str, workers: int) -> Sample:
    """Submit one run of ``workers`` episodes on ``workers`` workers and time its phases."""
    body = {
        "graph_name": graph,
        "episode_count": workers,
        "worker_count": workers,
        "step_budget": STEP_BUDGET,
        "tasks": None,
    }
    submitted_at = time.time()
    response = backend.http.post("/api/eval/v2/start", json=body)
    response.raise_for_status()
    run_id = response.json()["run_id"]
    deadline = time.monotonic() + RUN_DEADLINE_S
    spawned_at = _spawned_at(backend, run_id, deadline)
    t = _finished(backend, run_id, deadline)["timings"]
    first_episode_at = min(
        p.stat().st_mtime for p in (runs_dir / run_id / "episodes").glob("ep*/episode.json")
    )
    return Sample(
        {
            "submit→spawn": spawned_at - submitted_at,
            "python": t["main_started_at"] - spawned_at,
            "scan": t["registry_scanned_at"] - t["main_started_at"],
            "borrow": t["shared_borrowed_at"] - t["registry_scanned_at"],
            "N servers": t["servers_ready_at"] - t["shared_borrowed_at"],
            "cold start": t["servers_ready_at"] - spawned_at,
            "→1st ep": first_episode_at - submitted_at,
        }
    )


def _median(samples: list[Sample], phase: str) -> float:
    return statistics.median(s.phases[phase] for s in samples)


def print_table(results: dict[int, list[Sample]], graph: str) -> None:
    repeats = len(next(iter(results.values())))
    print(
        f"graph {graph}, step budget {STEP_BUDGET}, one episode per worker; "
        f"median of {repeats} run(s) per N; {os.cpu_count()} CPU(s); times in seconds"
    )
    head = "  N | " + " ".join(f"{p:>12}" for p in PHASES)
    print(head)
    print("-" * len(head))
    for workers, samples in results.items():
        print(f"{workers:>3} | " + " ".join(f"{_median(samples, p):>12.3f}" for p in PHASES))
    base = results[WORKER_COUNTS[0]]
    print("\nratio vs N = 1 (same run)")
    ratio_phases = ("N servers", "cold start", "→1st ep")
    print("  N | " + " ".join(f"{p:>12}" for p in ratio_phases))
    for workers, samples in results.items():
        print(
            f"{workers:>3} | "
            + " ".join(f"{_median(samples, p) / _median(base, p):>11.2f}x" for p in ratio_phases)
        )
    print(
        "\npython: spawn → main() (interpreter + imports); cold start: spawn → N env servers "
        "ready (python + scan + borrow + N servers)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one run per worker count")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--graph", default="cartpole_mlp")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    with tempfile.TemporaryDirectory(prefix="bench-scheduler-") as tmp:
        workspace = Path(tmp)
        backend = Backend(workspace)
        try:
            runs_dir = workspace / "outputs" / "eval_runs"
            graph = backend.http.get(f"/api/graphs/{args.graph}").json()
            used = {n["type"].split(".")[0] for n in graph["nodes"]}
            for manifest in backend.http.get("/api/nodesets").json()["nodesets"]:
                if manifest["name"] in used and manifest["parallelism"] == "shared":
                    backend.http.post(f"/api/nodesets/{manifest['name']}/load").raise_for_status()
            measure(backend, runs_dir, args.graph, 1)  # warm-up: disk caches, first imports
            results = {
                w: [measure(backend, runs_dir, args.graph, w) for _ in range(repeats)]
                for w in WORKER_COUNTS
            }
        finally:
            backend.close()
    print_table(results, args.graph)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
