"""The local episode, this checkout against another, in alternating runs, with the machine's CPU.

    .venv/bin/python bench/episode_ab.py --other /tmp/old/src [--pairs 6] [--episodes 300]

``--other``: another checkout's ``src`` folder (``git archive <rev> src | tar -x -C DIR``).
Each pair runs ``bench/episode_cost.py``'s episodes (our side only: ``babyai_oracle`` at
W = 1, no latency) in a process with this checkout's package, then one with the other's
(first in turn swapped from pair to pair), each process two runs of ``--episodes`` per level.
A run is measured between its 10th and its 10th-last recorded episode (start-up and the
final drain apart): wall time an episode, and the whole machine's CPU an episode from
``/proc/stat`` — user, kernel (with interrupts) and idle, summed over both cores.

Why beside ``episode_cost.py``: on this VM one run of that bench ranges over ±5 % with the
same code, so a 2-5 % change shows only as the median of many alternating pairs; the CPU
columns say where a change went (less work, or work moved to where a core was idle — which
here did not shorten the wall time: measured, see docs/cluster.md, "Head cost").
Prints each run, then the medians and the paired ratio (this / other) with its 90 %
bootstrap interval (`scaling.median_interval`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaling  # the bench folder is not a package

GRAPH_NAME = "bench_episode_ab"
EDGE = 10  # recorded episodes left out at each end of a run


def _cpu() -> tuple[int, int, int]:
    """(user, kernel, idle) jiffies of the whole machine."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    return fields[0] + fields[1], fields[2] + fields[5] + fields[6], fields[3] + fields[4]


def child(n_per_task: int, runs: int) -> None:
    """One process's runs, as JSON lines on stdout (ms an episode)."""
    from agentcanvas.eval import run_control

    marks: list[tuple[float, tuple[int, int, int]]] = []
    record = run_control.RunControl.record

    async def recorded(self: run_control.RunControl, *args: object, **kwargs: object) -> None:
        await record(self, *args, **kwargs)  # type: ignore[arg-type]
        marks.append((time.perf_counter(), _cpu()))

    run_control.RunControl.record = recorded  # type: ignore[method-assign]
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    with tempfile.TemporaryDirectory(prefix="bench_episode_ab_") as tmp:
        workspace = Path(tmp)
        os.environ["AGENTCANVAS_HOME"] = str(workspace)
        scaling.write_graph(workspace, GRAPH_NAME, 0.0)
        asyncio.run(scaling.run_ours(workspace, GRAPH_NAME, EDGE, 1))  # warm
        for _ in range(runs):
            marks.clear()
            asyncio.run(scaling.run_ours(workspace, GRAPH_NAME, n_per_task, 1))
            (t0, c0), (t1, c1) = marks[EDGE], marks[-EDGE]
            n = len(marks) - 2 * EDGE
            user, kernel, idle = ((b - a) * tick_ms / n for a, b in zip(c0, c1, strict=True))
            row = {"wall": 1000 * (t1 - t0) / n, "user": user, "kernel": kernel, "idle": idle}
            print(json.dumps(row), flush=True)


def _runs(src: Path | None, n_per_task: int, runs: int) -> list[dict[str, float]]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    command = [sys.executable, __file__, "--child", "--episodes", str(n_per_task)]
    out = subprocess.run(
        [*command, "--runs", str(runs)], env=env, capture_output=True, text=True, check=True
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--other", type=Path, help="the other checkout's src folder")
    parser.add_argument("--pairs", type=int, default=6, help="alternating pairs (default 6)")
    parser.add_argument("--episodes", type=int, default=300, help="per level and run")
    parser.add_argument("--runs", type=int, default=2, help="runs per process (default 2)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.episodes, args.runs)
        return 0
    if args.other is None or not (args.other / "agentcanvas").is_dir():
        parser.error("--other: give a folder that holds an agentcanvas package (a src folder)")
    rows: dict[str, list[dict[str, float]]] = {"this": [], "other": []}
    for k in range(args.pairs):
        order = [("this", None), ("other", args.other)]
        for side, src in order if k % 2 == 0 else order[::-1]:
            got = _runs(src, args.episodes, args.runs)
            rows[side] += got
            for row in got:
                print(
                    f"pair {k + 1:>2} {side:>5}: "
                    + "  ".join(f"{n} {v:.2f}" for n, v in row.items())
                )
    _print(rows)
    return 0


def _print(rows: dict[str, list[dict[str, float]]]) -> None:
    print(
        f"{'side':>5} | wall ms/ep (median) | user | kernel | idle   (ms of CPU an episode, means)"
    )
    for side, got in rows.items():
        wall = statistics.median(r["wall"] for r in got)
        means = [statistics.mean(r[n] for r in got) for n in ("user", "kernel", "idle")]
        print(f"{side:>5} | {wall:>19.3f} | {means[0]:.2f} | {means[1]:>6.2f} | {means[2]:.2f}")
    ratios = [a["wall"] / b["wall"] for a, b in zip(rows["this"], rows["other"], strict=True)]
    low, high = scaling.median_interval(ratios)
    print(
        f"this/other wall, median of {len(ratios)} paired runs: {statistics.median(ratios):.3f} "
        f"(90 % interval of the median {low:.3f}-{high:.3f})"
    )


if __name__ == "__main__":
    raise SystemExit(main())
