"""Flush policies of the shared inference server, side by side, on the real text encoder.

    .venv/bin/python bench/coalescer.py [--quick] [--cell-s S] [--repeats N]

A load generator with babyai_goto's call pattern: K concurrent clients (K = 1, 2, 4, 8), each
attached to the server as a run's worker is, loop "simulated env step (a sleep), then one
``embed`` call of a short text". Two patterns:

- ``lockstep``: a constant 3 ms env step, one endless episode per client;
- ``episodic``: what a babyai_goto run looks like (measured here: episodes of 2-12 steps,
  ``env.step`` ~6 ms, and a gap between episodes for the episode's records and the next
  reset): episodes of 2-12 steps, steps of 3-8 ms, 40-120 ms between episodes. The draws
  are seeded per client, so every policy sees the same sequence.

The server is the real ``text_encoder`` node set under ``auto_host``, started once per
policy (``AGENTCANVAS_FLUSH_POLICY`` = none, restart_on_submit, ours;
``AGENTCANVAS_MAX_BATCH`` = 8):

- ``none``: one forward pass per request (no coalescing);
- ``restart_on_submit``: the design note's 50 ms window restarted on every submit;
- ``ours``: flush when full, when every attached client waits, or 10 ms after the first.

Reported per (pattern, K, policy): forward passes per step (from the server's ``/stats`` before and
after), steps per second, the mean batch and the median call latency; then the ratios of
ours to the others. Cells are interleaved (each repeat runs the policies in a rotated order)
and steps/s is the median over repeats, so a load change on the machine hits every policy.
In padded mode every forward pass has the fixed ``max_batch`` shape: coalescing saves whole
passes. Goal: at K = 1 ours no slower than none (within noise); at K = 8 forward
passes per step <= 1/4 of none and steps/s above both others.

The batch audit (``server.batch_audit``): every server above runs it at its default rate
(``AGENTCANVAS_AUDIT_RATE``, 1 batch in 16, plus the first). A fourth server, ``ours``
with ``AGENTCANVAS_AUDIT_RATE=0`` (audit off), is then measured against ``ours`` at K = 8,
the two alternating cell by cell (cells of at least 2.5 s; 5 pairs with --quick, else 10);
the audit table prints their median steps/s side by side, the ratio of the medians, the
median of the pairwise ratios (each on/off pair ran back to back, so a load change on the
machine hits both alike), the audit's extra single-row passes per step and per forward
pass (its share of the server's compute in padded mode). Goal:
audit on/off >= 0.85 at K = 8 (the pairwise median).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from agentcanvas.nodes.base import CallContext
from agentcanvas.server.launcher import LaunchedServer, LocalProcessLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest

POLICIES = ("none", "restart_on_submit", "ours")
AUDIT_OFF = "ours_audit_off"
"""The label of the ``ours`` server with the audit off (measured at K = 8 only)."""
WORKER_COUNTS = (1, 2, 4, 8)
MAX_BATCH = 8
WARMUP_STEPS = 3
TEXTS = [
    "go to the red ball",
    "go to the blue key",
    "go to a purple box",
    "go to the grey door",
    "go to the green ball",
    "go to a yellow key",
    "go to the red box",
    "go to a blue ball",
]


@dataclass(frozen=True)
class Pattern:
    """How a simulated worker spends its time between two model calls."""

    name: str
    step_s: tuple[float, float]
    """Env step, drawn uniformly from this range."""
    episode_steps: tuple[int, int] | None
    """Steps per episode (uniform); None: one endless episode."""
    between_episodes_s: tuple[float, float] = (0.0, 0.0)


PATTERNS = (
    Pattern("lockstep", (0.003, 0.003), None),
    Pattern("episodic", (0.003, 0.008), (2, 12), (0.040, 0.120)),
)


@dataclass
class Cell:
    """One (K, policy) measurement, accumulated over repeats."""

    steps: int = 0
    forward_passes: int = 0
    audit_passes: int = 0
    steps_per_s: list[float] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)

    @property
    def passes_per_step(self) -> float:
        return self.forward_passes / self.steps

    @property
    def median_steps_per_s(self) -> float:
        return statistics.median(self.steps_per_s)


@dataclass
class Server:
    policy: str
    process: LaunchedServer
    handle: RemoteNodeSet

    async def stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.handle.url, timeout=30.0) as client:
            response = await client.get("/stats")
            response.raise_for_status()
            stats: dict[str, Any] = response.json()
            return stats


async def start(label: str, workspace: Path) -> Server:
    """A text_encoder server; ``label`` is its flush policy, or AUDIT_OFF (ours, audit off)."""
    policy = "ours" if label == AUDIT_OFF else label
    env = {
        "AGENTCANVAS_FLUSH_POLICY": policy,
        "AGENTCANVAS_MAX_BATCH": str(MAX_BATCH),
        "AGENTCANVAS_HOME": str(workspace),
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "AGENTCANVAS_AUDIT_RATE": "0"
        if label == AUDIT_OFF
        else os.environ.get("AGENTCANVAS_AUDIT_RATE", ""),
    }
    process = await LocalProcessLauncher(env=env).launch("text_encoder", None)
    handle = RemoteNodeSet("text_encoder", process.url, await fetch_manifest(process.url))
    server = Server(label, process, handle)
    stats = await server.stats()
    assert stats["policy"] == policy, stats
    return server


async def client_loop(
    server: Server, client: str, pattern: Pattern, deadline: float, latencies_s: list[float]
) -> int:
    """Env steps and embed calls, episode after episode, until the deadline; returns steps."""
    ctx = CallContext(node_id="ground", step=0, client=client)
    draw = random.Random(f"{pattern.name}/{client}")  # the same sequence for every policy
    text = TEXTS[int(client.rsplit("w", 1)[1]) % len(TEXTS)]
    steps = 0
    while True:
        if pattern.episode_steps is None:
            n_steps = 1 << 30
        else:
            n_steps = draw.randint(*pattern.episode_steps)
            await asyncio.sleep(draw.uniform(*pattern.between_episodes_s))
        for _ in range(n_steps):
            await asyncio.sleep(draw.uniform(*pattern.step_s))  # this worker's env step
            started = time.perf_counter()
            outputs = await server.handle.call("embed", {}, {"text": text}, ctx)
            latencies_s.append(time.perf_counter() - started)
            if "error" in outputs:
                raise RuntimeError(f"{server.policy}: embed failed: {outputs['error']}")
            steps += 1
            if time.perf_counter() >= deadline:
                return steps


async def measure(server: Server, k: int, pattern: Pattern, cell_s: float, cell: Cell) -> None:
    """K attached clients drive the server for ``cell_s`` seconds (after a warm-up)."""
    clients = [f"bench/w{i}" for i in range(k)]
    for client in clients:
        await server.handle.attach(client)
    try:
        warm: list[float] = []
        await asyncio.gather(
            *(
                client_loop(server, c, PATTERNS[0], 0.0, warm)
                for c in clients
                for _ in range(WARMUP_STEPS)
            )
        )
        before = await server.stats()
        started = time.perf_counter()
        counts = await asyncio.gather(
            *(client_loop(server, c, pattern, started + cell_s, cell.latencies_s) for c in clients)
        )
        elapsed = time.perf_counter() - started
        after = await server.stats()
    finally:
        for client in clients:
            await server.handle.detach(client)
    steps = sum(counts)
    assert after["requests_served"] - before["requests_served"] == steps
    cell.steps += steps
    cell.forward_passes += after["forward_passes"] - before["forward_passes"]
    cell.audit_passes += after["audit_passes"] - before["audit_passes"]
    cell.steps_per_s.append(steps / elapsed)


CellKey = tuple[str, int, str]  # (pattern, K, policy)


AUDIT = "audit"  # the pattern-name prefix of the audit section's cells


async def run(cell_s: float, repeats: int, audit_repeats: int) -> dict[CellKey, Cell]:
    cells = {(pat.name, k, p): Cell() for pat in PATTERNS for k in WORKER_COUNTS for p in POLICIES}
    cells |= {
        (f"{AUDIT}/{pat.name}", 8, p): Cell() for pat in PATTERNS for p in ("ours", AUDIT_OFF)
    }
    labels = (*POLICIES, AUDIT_OFF)
    with tempfile.TemporaryDirectory(prefix="agentcanvas-bench-") as workspace:
        print(
            f"starting {len(labels)} text_encoder servers (each checks its invariance) ...",
            flush=True,
        )
        started = time.perf_counter()
        servers = await asyncio.gather(*(start(p, Path(workspace)) for p in labels))
        print(f"  started in {time.perf_counter() - started:.1f} s", flush=True)
        by_label = {server.policy: server for server in servers}
        try:
            for repeat in range(repeats):
                order = [by_label[p] for p in POLICIES[repeat % 3 :] + POLICIES[: repeat % 3]]
                for pattern in PATTERNS:
                    for k in WORKER_COUNTS:
                        for server in order:
                            key = (pattern.name, k, server.policy)
                            await measure(server, k, pattern, cell_s, cells[key])
                print(f"  repeat {repeat + 1}/{repeats} done", flush=True)
            # The audit's cost: ours with the audit on and off at K = 8, alternating.
            pair = [by_label["ours"], by_label[AUDIT_OFF]]
            audit_cell_s = max(cell_s, 2.5)
            for repeat in range(audit_repeats):
                for pattern in PATTERNS:
                    for server in pair[repeat % 2 :] + pair[: repeat % 2]:
                        key = (f"{AUDIT}/{pattern.name}", 8, server.policy)
                        await measure(server, 8, pattern, audit_cell_s, cells[key])
            print(f"  audit on/off: {audit_repeats} alternating repeat(s) done", flush=True)
        finally:
            for server in servers:
                await server.handle.close()
                await server.process.stop()
    return cells


def print_table(cells: dict[CellKey, Cell], pattern: str) -> None:
    print(f"\n{pattern}")
    print(
        f"{'K':>2}  {'policy':<18} {'fwd/step':>9} {'steps/s':>9} {'mean batch':>11} "
        f"{'p50 call ms':>12} {'steps':>7}"
    )
    for k in WORKER_COUNTS:
        for policy in POLICIES:
            c = cells[(pattern, k, policy)]
            print(
                f"{k:>2}  {policy:<18} {c.passes_per_step:>9.3f} {c.median_steps_per_s:>9.1f} "
                f"{1 / c.passes_per_step:>11.2f} "
                f"{statistics.median(c.latencies_s) * 1e3:>12.1f} {c.steps:>7}"
            )
    print(
        f"{'K':>2}  {'fwd/step ours/none':>19} {'steps/s ours/none':>18} "
        f"{'steps/s ours/restart':>21}"
    )
    for k in WORKER_COUNTS:
        ours, none, restart = (
            cells[(pattern, k, p)] for p in ("ours", "none", "restart_on_submit")
        )
        print(
            f"{k:>2}  {ours.passes_per_step / none.passes_per_step:>19.3f} "
            f"{ours.median_steps_per_s / none.median_steps_per_s:>18.2f} "
            f"{ours.median_steps_per_s / restart.median_steps_per_s:>21.2f}"
        )


def print_audit_table(cells: dict[CellKey, Cell]) -> list[tuple[str, bool]]:
    """Steps/s of ``ours`` at K = 8 with the audit on and off, side by side; the goal lines."""
    print("\nbatch audit at K=8 (ours): steps/s with the audit on vs off, same run")
    print(
        f"{'pattern':<9} {'audit off':>10} {'audit on':>10} {'on/off':>7} "
        f"{'pairwise on/off':>16} {'audit passes/step':>18} {'fwd/step on':>12} "
        f"{'audit/fwd':>10}"
    )
    goals = []
    for pattern in PATTERNS:
        key = f"{AUDIT}/{pattern.name}"
        on, off = cells[(key, 8, "ours")], cells[(key, 8, AUDIT_OFF)]
        assert off.audit_passes == 0, "the audit-off server audited"
        ratio = on.median_steps_per_s / off.median_steps_per_s
        pairwise = statistics.median(
            a / b for a, b in zip(on.steps_per_s, off.steps_per_s, strict=True)
        )
        print(
            f"{pattern.name:<9} {off.median_steps_per_s:>10.1f} {on.median_steps_per_s:>10.1f} "
            f"{ratio:>7.2f} {pairwise:>16.2f} {on.audit_passes / on.steps:>18.3f} "
            f"{on.passes_per_step:>12.3f} {on.audit_passes / on.forward_passes:>10.3f}"
        )
        print(
            f"{'':<9} per pair, off: {' '.join(f'{v:.1f}' for v in off.steps_per_s)}; "
            f"on: {' '.join(f'{v:.1f}' for v in on.steps_per_s)}"
        )
        goals.append(
            (
                f"{pattern.name}, K=8: steps/s audit on/off = {pairwise:.2f} "
                f"(pairwise median; >= 0.85)",
                pairwise >= 0.85,
            )
        )
    return goals


def goal_lines(cells: dict[CellKey, Cell], pattern: str) -> list[tuple[str, bool]]:
    one = (
        cells[(pattern, 1, "ours")].median_steps_per_s
        / cells[(pattern, 1, "none")].median_steps_per_s
    )
    eight = {p: cells[(pattern, 8, p)] for p in POLICIES}
    fewer = eight["ours"].passes_per_step / eight["none"].passes_per_step
    faster = min(
        eight["ours"].median_steps_per_s / eight[p].median_steps_per_s
        for p in ("none", "restart_on_submit")
    )
    return [
        (
            f"{pattern}, K=1: ours/none steps/s = {one:.2f} (no slower, within noise: >= 0.90)",
            one >= 0.90,
        ),
        (
            f"{pattern}, K=8: ours/none forward passes per step = {fewer:.3f} (<= 0.25)",
            fewer <= 0.25,
        ),
        (
            f"{pattern}, K=8: ours steps/s over the better of the others = {faster:.2f}x (> 1)",
            faster > 1.0,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="short cells, one repeat")
    parser.add_argument("--cell-s", type=float, default=None, help="seconds per (K, policy)")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    cell_s = args.cell_s or (1.2 if args.quick else 3.0)
    repeats = args.repeats or (1 if args.quick else 2)
    audit_repeats = 5 if args.quick else 10
    print(
        f"bench/coalescer.py: text_encoder.embed, max_batch {MAX_BATCH}, K = {WORKER_COUNTS}, "
        f"{cell_s:g} s per cell, {repeats} repeat(s); python {sys.version.split()[0]}"
    )
    cells = asyncio.run(run(cell_s, repeats, audit_repeats))
    goals = []
    for pattern in PATTERNS:
        print_table(cells, pattern.name)
        goals += goal_lines(cells, pattern.name)
    goals += print_audit_table(cells)
    print()
    for line, ok in goals:
        print(f"  [{'ok' if ok else 'MISSED'}] {line}")
    return 0 if all(ok for _, ok in goals) else 1


if __name__ == "__main__":
    raise SystemExit(main())
