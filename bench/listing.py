"""Latency of the run listing (GET /api/eval/v2/runs), idle vs with 30 runs submitted at once.

    .venv/bin/python bench/listing.py [--quick] [--runs 30] [--graph NAME] [--serve-arg ARG]

A real ``agentcanvas serve`` on loopback in a temporary workspace. ``--runs`` runs (default
30) are submitted back to back over HTTP; while they are queued or running the listing is
requested over and over for ``--loaded-s`` seconds (``--quick``: 15 s), one request at a time.
Then every run still active is cancelled, and once nothing runs the same listing (the same
runs in it) is requested as many times again: the idle figures. Both come from the same
backend in the same run; the table prints p50/p95 side by side and loaded / idle.

First, on the idle backend, the median latency of a small response (GET /api/graphs) on one
keep-alive connection beside a new connection per request (a listener without TCP_NODELAY
makes the keep-alive one wait ~40 ms for a delayed ACK).

Also printed: the 1-minute load average at the end of the loaded phase and the most runs seen
running at once (GET /api/eval/v2/queue), i.e. what admission let in. ``--serve-arg`` passes
an argument to ``serve`` (repeatable), e.g. ``--serve-arg=--cpu-oversubscription=1.0``.
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
from pathlib import Path

import httpx

SCRIPT = Path(sys.executable).parent / "agentcanvas"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "agentcanvas.cli"]
ANNOUNCE = re.compile(r"agentcanvas backend on (http://\S+)")
START_DEADLINE_S = 60.0
SETTLE_DEADLINE_S = 120.0
LISTING = "/api/eval/v2/runs"
GOAL_P95_S = 0.300


class Backend:
    """``agentcanvas serve --port 0`` in a workspace."""

    def __init__(self, workspace: Path, serve_args: list[str]) -> None:
        self.log = workspace / "serve.log"
        env = {**os.environ, "AGENTCANVAS_HOME": str(workspace), "HF_HUB_OFFLINE": "1"}
        env.pop("AGENTCANVAS_EVAL_SUBPROCESS", None)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*COMMAND, "serve", "--port", "0", *serve_args],
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
        self.http = httpx.Client(base_url=found.group(1), timeout=60.0)
        while True:
            try:
                self.http.get("/api/eval/v2/queue").raise_for_status()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def active(self) -> tuple[list[str], int]:
        """Run ids queued or running, and how many are running."""
        queue = self.http.get("/api/eval/v2/queue").json()
        ids = [e["run_id"] for e in [*queue["queued"], *queue["running"]]]
        return ids, len(queue["running"])

    def close(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def listing_latency(backend: Backend) -> float:
    started = time.perf_counter()
    response = backend.http.get(LISTING, params={"limit": 50})
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return elapsed


KEEPALIVE_PATH = "/api/graphs"
KEEPALIVE_REQUESTS = 60


def keepalive_latency(backend: Backend) -> tuple[list[float], list[float]]:
    """Small responses on one keep-alive connection, and each on a new connection: a
    listener without TCP_NODELAY makes the first wait for the client's delayed ACK."""
    kept: list[float] = []
    fresh: list[float] = []
    base = str(backend.http.base_url)
    with httpx.Client(base_url=base, timeout=30.0) as client:
        client.get(KEEPALIVE_PATH).raise_for_status()  # the connection, opened once
        for _ in range(KEEPALIVE_REQUESTS):
            started = time.perf_counter()
            client.get(KEEPALIVE_PATH).raise_for_status()
            kept.append(time.perf_counter() - started)
    for _ in range(KEEPALIVE_REQUESTS):
        started = time.perf_counter()
        httpx.get(base + KEEPALIVE_PATH, timeout=30.0).raise_for_status()
        fresh.append(time.perf_counter() - started)
    return kept, fresh


def load_shared(backend: Backend, graph: str) -> None:
    """Load the graph's shared node sets first, so that no run pays for it."""
    nodes = backend.http.get(f"/api/graphs/{graph}").json()["nodes"]
    used = {n["type"].split(".")[0] for n in nodes}
    for manifest in backend.http.get("/api/nodesets").json()["nodesets"]:
        if manifest["name"] in used and manifest["parallelism"] == "shared":
            backend.http.post(f"/api/nodesets/{manifest['name']}/load").raise_for_status()


def loaded_phase(backend: Backend, args: argparse.Namespace) -> tuple[list[float], int, float]:
    """Submit the runs back to back, then time the listing while they are active."""
    body = {"graph_name": args.graph, "episode_count": args.episodes, "worker_count": 1}
    for _ in range(args.runs):
        backend.http.post("/api/eval/v2/start", json=body).raise_for_status()
    samples: list[float] = []
    most_running = 0
    end = time.monotonic() + args.loaded_s
    next_queue_check = 0.0
    while time.monotonic() < end:
        samples.append(listing_latency(backend))
        if time.monotonic() >= next_queue_check:
            active, running = backend.active()
            most_running = max(most_running, running)
            if not active:
                break
            next_queue_check = time.monotonic() + 1.0
    return samples, most_running, os.getloadavg()[0]


def settle(backend: Backend) -> None:
    """Cancel what is still active and wait until nothing is queued or running."""
    deadline = time.monotonic() + SETTLE_DEADLINE_S
    cancelled: set[str] = set()
    while True:
        active, _ = backend.active()
        if not active:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"runs still active after {SETTLE_DEADLINE_S:g} s: {active}")
        for run_id in active:
            if run_id not in cancelled:
                backend.http.post(f"/api/eval/v2/cancel/{run_id}")
                cancelled.add(run_id)
        time.sleep(0.2)


def percentile(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def report_keepalive(kept: list[float], fresh: list[float]) -> None:
    k, f = statistics.median(kept), statistics.median(fresh)
    print(
        f"GET {KEEPALIVE_PATH}, {len(kept)} requests each, idle backend: median "
        f"{k * 1e3:.1f} ms on one keep-alive connection | {f * 1e3:.1f} ms on a new connection "
        f"each | keep-alive/new {k / f:.2f}x (a delayed ACK would show as ~40 ms kept)"
    )


def report(
    idle: list[float],
    loaded: list[float],
    most_running: int,
    load1: float,
    args: argparse.Namespace,
) -> None:
    print(
        f"GET {LISTING}?limit=50, {args.runs} runs of {args.graph} ({args.episodes} episodes "
        f"each) submitted at once; {os.cpu_count()} CPU(s); serve {' '.join(args.serve_arg)}"
    )
    print(
        f"loaded: {len(loaded)} requests, at most {most_running} runs running at once, "
        f"load average {load1:.1f}; idle: {len(idle)} requests, nothing running"
    )
    print(f"{'':>6} | {'idle':>10} | {'loaded':>10} | {'loaded/idle':>11}")
    print("-" * 47)
    for name, q in (("p50", 50), ("p95", 95)):
        i, lo = percentile(idle, q), percentile(loaded, q)
        print(f"{name:>6} | {i * 1e3:>7.1f} ms | {lo * 1e3:>7.1f} ms | {lo / i:>10.1f}x")
    p95 = percentile(loaded, 95)
    verdict = "meets" if p95 <= GOAL_P95_S else "MISSES"
    print(f"loaded p95 {p95 * 1e3:.0f} ms {verdict} the {GOAL_P95_S * 1e3:.0f} ms goal")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="15 s of loaded measurement")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--loaded-s", type=float, default=40.0)
    parser.add_argument("--graph", default="cartpole_mlp")
    parser.add_argument("--serve-arg", action="append", default=[])
    args = parser.parse_args()
    if args.quick:
        args.loaded_s = min(args.loaded_s, 15.0)
    with tempfile.TemporaryDirectory(prefix="bench-listing-") as tmp:
        backend = Backend(Path(tmp), args.serve_arg)
        try:
            kept, fresh = keepalive_latency(backend)
            load_shared(backend, args.graph)
            loaded, most_running, load1 = loaded_phase(backend, args)
            settle(backend)
            idle = [listing_latency(backend) for _ in range(max(len(loaded), 20))]
        finally:
            backend.close()
    report_keepalive(kept, fresh)
    report(idle, loaded, most_running, load1, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
