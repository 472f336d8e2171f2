"""LIBERO: seconds per episode through our runner next to a plain loop, and where they go.

    .venv/bin/python bench/libero_episodes.py [--episodes N] [--steps S] [--size PX]

The same episodes on both sides: ``libero_object:0``, init states 0..N-1, the protocol of
``env_libero`` (``env.seed(7)`` before each reset, ``set_init_state``, 10 no-op settling
steps), then S steps of the same constant action (gripper open, no motion) — the policy
costs nothing, so what differs is our overhead.

- **ours**: ``run_foreground`` of a graph ``env_libero.step`` ← ``core.constant``, W = 1
  (one spawned env server), episodes only: the env build of the first episode is in it, as
  it is in the plain loop's first episode;
- **plain**: the same calls on LIBERO's API in this process (``OffScreenRenderEnv``).

The plain loop's phases are timed: env creation, reset + init state, settling, steps; and
the steps once more with the cameras off, for the rendering's share. Goal: ours /
plain <= 1.1 per episode.
"""

# ruff: noqa: E402  (the imports follow the sys.path fix below)
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/coverage.py would shadow the coverage package numba (robosuite) imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np

from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.run_setup import new_run_dir, run_registry
from agentcanvas.graph.model import parse_graph
from agentcanvas.nodesets.env_libero import NO_OP, prepare_libero
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry

TASK = "libero_object:0"


def graph(steps: int, size: int, images: bool) -> dict[str, Any]:
    return {
        "version": 1,
        "name": "bench_libero",
        "env": {
            "nodeset": "env_libero",
            "fields": {
                "dataset": "LIBERO",
                "split": "libero_object",
                "max_steps": steps,
                "camera_size": size,
                "images": images,
            },
            "tasks": [TASK],
        },
        "nodes": [
            {"id": "act", "type": "core.constant", "config": {"value": NO_OP}},
            {"id": "env", "type": "env_libero.step"},
            {"id": "out", "type": "core.graphOut"},
        ],
        "edges": [
            {"source": "act.value", "target": "env.action"},
            {"source": "env.metrics", "target": "out.metrics"},
        ],
    }


async def ours(workspace: Path, n: int, steps: int, size: int) -> tuple[float, list[float]]:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    g = parse_graph(graph(steps, size, True))
    config = EvalConfig(graph_name="bench_libero", episode_count=n, worker_count=1)
    run_dir = new_run_dir(runs_dir(workspace))
    run = await run_foreground(
        run_registry(registry.catalogue, run_dir), g, config, run_dir=run_dir
    )
    summary = run.summary
    if summary.status_counts != {"completed": n}:
        raise RuntimeError(f"ours: {summary.status_counts}")
    started, finished = summary.timings["started_at"], summary.timings["finished_at"]
    assert started is not None and finished is not None
    return finished - started, [
        e.duration_s for e in sorted(summary.episodes, key=lambda e: e.index)
    ]


def plain(n: int, steps: int, size: int, images: bool) -> dict[str, float]:
    prepare_libero()
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    phases = {"env creation": 0.0, "reset + init state": 0.0, "settling": 0.0, "steps": 0.0}
    start = time.perf_counter()
    bench = benchmark.get_benchmark_dict()["libero_object"]()
    task = bench.get_task(0)
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    kwargs: dict[str, Any] = {"bddl_file_name": bddl}
    if images:
        kwargs.update(camera_heights=size, camera_widths=size)
    else:
        kwargs.update(has_offscreen_renderer=False, use_camera_obs=False)
    env = OffScreenRenderEnv(**kwargs)
    init_states = bench.get_task_init_states(0)
    phases["env creation"] = time.perf_counter() - start
    for i in range(n):
        t0 = time.perf_counter()
        env.seed(7)
        env.reset()
        env.set_init_state(init_states[i])
        t1 = time.perf_counter()
        for _ in range(10):
            env.step(NO_OP)
        t2 = time.perf_counter()
        for _ in range(steps):
            _, _, done, _ = env.step(list(np.asarray(NO_OP)))
            if done:
                break
        t3 = time.perf_counter()
        phases["reset + init state"] += t1 - t0
        phases["settling"] += t2 - t1
        phases["steps"] += t3 - t2
    phases["total"] = time.perf_counter() - start
    env.close()
    return phases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--steps", type=int, default=40, help="policy steps an episode")
    parser.add_argument("--size", type=int, default=128, help="camera side, px (openpi: 256)")
    args = parser.parse_args()
    n, steps, size = args.episodes, args.steps, args.size
    with tempfile.TemporaryDirectory() as tmp:
        ours_wall, per_episode = asyncio.run(ours(Path(tmp), n, steps, size))
    mine = plain(n, steps, size, True)
    blind = plain(n, steps, size, False)
    print(f"LIBERO {TASK}, {n} episodes, 10 settling + {steps} steps, {size} px cameras, W=1")
    print(f"ours : {ours_wall:.1f} s ({ours_wall / n:.2f} s/episode; first {per_episode[0]:.1f} s)")
    print(f"plain: {mine['total']:.1f} s ({mine['total'] / n:.2f} s/episode)")
    print(f"ratio ours/plain: {ours_wall / mine['total']:.2f}")
    print("plain loop, where the time goes (s, all episodes):")
    for name in ("env creation", "reset + init state", "settling", "steps"):
        print(f"  {name:<20} {mine[name]:7.2f}   (cameras off: {blind[name]:7.2f})")
    rendering = mine["steps"] + mine["settling"] - blind["steps"] - blind["settling"]
    print(f"  rendering in steps and settling: {rendering:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
