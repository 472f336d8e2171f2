"""Batch-eval scaling with workers on a latency-bound env, next to Gymnasium ``AsyncVectorEnv``.

    .venv/bin/python bench/scaling.py [--quick] [--episodes N] [--workers 1,2,4,8]
                                      [--latency-ms MS]

Both sides run the same episodes: the BabyAI levels of ``babyai_oracle``, the episode seeds
of ``agentcanvas.eval.seeding.episode_seed``, the same BFS policy
(``agentcanvas.gridnav.shortest_plan`` on the full grid toward the true target) and the same
simulated renderer latency (``time.sleep`` per action, inside the env process):

- ours: ``run_foreground`` of a copy of ``babyai_oracle`` whose ``env.fields`` set the panel
  field ``step_latency_ms``, at W workers (W tagged ``env_minigrid`` servers), once with the
  work-stealing dispatch (the default) and once with fixed contiguous chunks
  (``BatchEvalRunner.work_stealing = False``, what the dispatch was before);
- ``AsyncVectorEnv``: ``num_envs = W`` subprocess envs used the way a user would: on
  (same-step) autoreset each env slot takes the next pending episode from a shared counter;
  the policy runs in the main process.

Wall time is the episodes only; start-up (spawning servers or vector-env workers) is shown
apart. ``ideal`` is the speedup each policy allows given the episode lengths (total env steps
/ steps of the busiest worker, simulated with every action costing the same): fixed
contiguous chunks, work stealing (the real ``WorkStealingDispatcher``), and next-pending (the
AsyncVectorEnv side). Goal: work stealing >= 0.9 x W at W = 8 with >= 24 episodes
per worker (``--episodes 192``), and no slower than AsyncVectorEnv.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import io
import json
import multiprocessing
import os
import random
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

from agentcanvas.eval.config import EvalConfig, WorkerStats
from agentcanvas.eval.dispatch import WorkStealingDispatcher
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.run_setup import new_run_dir, run_registry
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.worker_pool import partition_contiguous
from agentcanvas.gridnav import LEFT, shortest_plan
from agentcanvas.nodesets.env_minigrid import MiniGridState
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry

GRAPH_NAME = "bench_scaling"
NO_LATENCY_GRAPH = "bench_scaling_no_latency"
TASKS = ["BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0"]  # the levels of babyai_oracle
RUN_SEED = 0
MAX_SIDE = 32  # grids are padded to MAX_SIDE x MAX_SIDE in the vector env's observation
MAX_TARGETS = 8
HEADER_LEN = 9  # active, episode, width, height, x, y, dir, mode, n_targets
OBS_LEN = HEADER_LEN + 2 * MAX_TARGETS + MAX_SIDE * MAX_SIDE * 3


@dataclass(frozen=True)
class Episode:
    index: int
    task: str
    episode_index: int
    seed: int


@dataclass
class Timing:
    """One side at one W: start-up, episode wall time, and each episode's action count."""

    startup_s: float
    wall_s: float
    steps: dict[int, int]
    successes: int
    workers: list[WorkerStats] | None = None  # ours: the summary's per-worker stats


def plan(n_per_task: int) -> list[Episode]:
    """The run's episodes in index order, seeded exactly as a batch eval seeds them."""
    return [
        Episode(k * n_per_task + i, task, i, episode_seed(RUN_SEED, task, i))
        for k, task in enumerate(TASKS)
        for i in range(n_per_task)
    ]


def write_graph(workspace: Path, name: str, latency_ms: float) -> None:
    """babyai_oracle with the simulated latency set through the graph's env fields."""
    graph = {
        "version": 1,
        "name": name,
        "description": "babyai_oracle with a simulated step latency (bench/scaling.py)",
        "env": {
            "nodeset": "env_minigrid",
            "fields": {"dataset": "babyai", "split": "GoTo", "step_latency_ms": latency_ms},
            "tasks": TASKS,
        },
        "nodes": [
            {"id": "env", "type": "env_minigrid.step"},
            {"id": "nav", "type": "planner.navigate"},
            {"id": "out", "type": "core.graphOut"},
        ],
        "edges": [
            {"source": "env.grid", "target": "nav.grid"},
            {"source": "env.agent_pos", "target": "nav.agent_pos"},
            {"source": "env.agent_dir", "target": "nav.agent_dir"},
            {"source": "env.target", "target": "nav.target"},
            {"source": "nav.action", "target": "env.action", "next_iteration": True},
            {"source": "env.metrics", "target": "out.metrics"},
        ],
    }
    (workspace / "graphs").mkdir(parents=True, exist_ok=True)
    (workspace / "graphs" / f"{name}.json").write_text(json.dumps(graph), encoding="utf-8")


# -- ours ---------------------------------------------------------------------------------------


async def run_ours(
    workspace: Path,
    name: str,
    n_per_task: int,
    workers: int,
    steal: bool = True,
    record_log: bool = True,
) -> Timing:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    graph = registry.load_graph(name)
    config = EvalConfig(
        graph_name=name,
        episode_count=n_per_task,
        worker_count=workers,
        seed=RUN_SEED,
        record_log=record_log,
    )
    called = time.time()
    BatchEvalRunner.work_stealing = steal
    try:
        run_dir = new_run_dir(runs_dir(workspace))  # as `agentcanvas eval` does
        run_reg = run_registry(registry.catalogue, run_dir)
        run = await run_foreground(run_reg, graph, config, run_dir=run_dir)
    finally:
        BatchEvalRunner.work_stealing = True
    summary = run.summary
    if summary.status_counts != {"completed": summary.episodes_total}:
        raise RuntimeError(f"ours at W={workers}: {summary.status_counts}")
    started, finished = summary.timings["started_at"], summary.timings["finished_at"]
    assert started is not None and finished is not None
    return Timing(
        startup_s=started - called,
        wall_s=finished - started,
        steps={e.index: int(e.metrics["steps"] or 0) for e in summary.episodes},
        successes=sum(int(e.metrics["success"] or 0) for e in summary.episodes),
        workers=summary.workers,
    )


# -- AsyncVectorEnv -----------------------------------------------------------------------------


def take_pending(counter: Any, total: int) -> int:
    """The next of ``total`` pending episodes from a ``multiprocessing.Value`` counter shared
    by every env process; -1 once none is left."""
    with counter.get_lock():
        taken = int(counter.value)
        counter.value = taken + 1
    return taken if taken < total else -1


class PendingEnv(gym.Env[np.ndarray, Any]):
    """On each reset takes the next pending (level, seed) episode from a shared counter, the
    way a user feeds a vector env a list of episodes; idles once none is left.

    The simulator is agentcanvas's own ``MiniGridState`` (same level construction, reset and
    ground-truth targets as the env_minigrid node set); each action sleeps ``latency_s``.
    """

    def __init__(self, episodes: list[tuple[str, int]], counter: Any, latency_s: float) -> None:
        self.episodes = episodes
        self.counter = counter  # a multiprocessing.Value shared by every env process
        self.latency_s = latency_s
        self.current = -1
        self.sim = MiniGridState()
        self.observation_space = gym.spaces.Box(-1, 255, shape=(OBS_LEN,), dtype=np.int16)
        self.action_space = gym.spaces.Discrete(7)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self.current = take_pending(self.counter, len(self.episodes))
        if self.current >= 0:
            level, level_seed = self.episodes[self.current]
            with contextlib.redirect_stdout(io.StringIO()):  # BabyAI's "Sampling rejected"
                self.sim.start(level, level_seed)
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.current < 0:
            return self._obs(), 0.0, False, False, {}
        time.sleep(self.latency_s)
        _, reward, terminated, truncated, _ = self.sim.env.step(int(action))
        return self._obs(), float(reward), bool(terminated), bool(truncated), {}

    def _obs(self) -> np.ndarray:
        obs = np.full(OBS_LEN, -1, dtype=np.int16)
        obs[0] = int(self.current >= 0)
        if self.current < 0:
            return obs
        grid = self.sim.grid()
        cells, mode = self.sim.targets()
        width, height = grid.shape[:2]
        obs[1:9] = [
            self.current,
            width,
            height,
            *self.sim.agent_state(),
            int(mode == "face"),
            len(cells),
        ]
        obs[HEADER_LEN : HEADER_LEN + 2 * len(cells)] = np.asarray(cells).reshape(-1)
        padded = np.zeros((MAX_SIDE, MAX_SIDE, 3), dtype=np.int16)
        padded[:width, :height] = grid
        obs[HEADER_LEN + 2 * MAX_TARGETS :] = padded.reshape(-1)
        return obs

    def close(self) -> None:
        self.sim.close()


def bfs_action(obs: np.ndarray) -> int:
    """The planner node's rule: first action of a BFS plan to the true target, else LEFT."""
    if obs[0] != 1:
        return LEFT
    width, height, x, y, d, face, n_targets = (int(v) for v in obs[2:9])
    flat = obs[HEADER_LEN : HEADER_LEN + 2 * n_targets]
    cells = [(int(flat[2 * i]), int(flat[2 * i + 1])) for i in range(n_targets)]
    padded = obs[HEADER_LEN + 2 * MAX_TARGETS :].reshape(MAX_SIDE, MAX_SIDE, 3)
    grid = padded[:width, :height].astype(np.uint8)
    plan_ = shortest_plan(grid, (x, y, d), cells, "face" if face else "reach")
    return plan_[0] if plan_ else LEFT


def run_ave(episodes: list[Episode], workers: int, latency_s: float) -> Timing:
    counter = multiprocessing.get_context("fork").Value("l", 0)
    plays = [(e.task, e.seed) for e in episodes]

    def make() -> PendingEnv:
        return PendingEnv(plays, counter, latency_s)

    called = time.perf_counter()
    envs = AsyncVectorEnv([make] * workers, autoreset_mode=AutoresetMode.SAME_STEP, context="fork")
    started = time.perf_counter()
    try:
        steps, successes = _drive(envs, len(episodes))
    finally:
        finished = time.perf_counter()
        envs.close()
    return Timing(started - called, finished - started, steps, successes)


def _drive(envs: AsyncVectorEnv, n_episodes: int) -> tuple[dict[int, int], int]:
    obs, _ = envs.reset()
    current = [int(i) for i in obs[:, 1]]  # the episode each slot plays (-1: none left)
    length = [0] * len(current)
    steps: dict[int, int] = {}
    successes = 0
    while len(steps) < n_episodes:
        actions = np.array([bfs_action(o) for o in obs])
        active = obs[:, 0] == 1
        obs, rewards, terminated, truncated, _ = envs.step(actions)
        for k in np.flatnonzero(active):
            length[k] += 1
            if terminated[k] or truncated[k]:
                steps[current[k]] = length[k]
                successes += int(bool(terminated[k]) and rewards[k] > 0)  # as env_minigrid
                current[k], length[k] = int(obs[k, 1]), 0  # autoreset took the next one
    return steps, successes


# -- the table ----------------------------------------------------------------------------------


def simulated_speedup(
    steps: dict[int, int], workers: int, next_for: Callable[[int], int | None]
) -> float:
    """Total actions / the busiest worker's, every action costing the same, when an idle
    worker (the earliest free, lowest id on a tie) gets ``next_for(worker)``."""
    free = [(0, w) for w in range(workers)]
    makespan = 0
    while free:
        at, worker = heapq.heappop(free)
        index = next_for(worker)
        if index is None:
            makespan = max(makespan, at)
        else:
            heapq.heappush(free, (at + steps[index], worker))
    return sum(steps.values()) / makespan


def ideal_speedups(steps: dict[int, int], workers: int) -> dict[str, float]:
    """What the episode lengths allow: contiguous chunks, work stealing, next pending."""
    chunks = partition_contiguous(sorted(steps), workers)
    pending = iter(sorted(steps))
    return {
        "contiguous": simulated_speedup(
            steps, workers, WorkStealingDispatcher(chunks, steal=False).next_for
        ),
        "stealing": simulated_speedup(steps, workers, WorkStealingDispatcher(chunks).next_for),
        "pending": simulated_speedup(steps, workers, lambda w: next(pending, None)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 episodes, W = 1, 2, 4")
    parser.add_argument("--episodes", type=int, help="episodes in all (default 48; quick 16)")
    parser.add_argument("--workers", help="comma-separated W, 1 first (default 1,2,4,8)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="per action (default 20)")
    args = parser.parse_args()
    n_total = args.episodes or (16 if args.quick else 48)
    n_per_task = max(1, n_total // len(TASKS))
    worker_counts = [1, 2, 4] if args.quick else [1, 2, 4, 8]
    if args.workers:
        worker_counts = [int(w) for w in args.workers.split(",")]
    if worker_counts[0] != 1:
        parser.error("--workers: the first W must be 1 (speedups are relative to it)")
    episodes = plan(n_per_task)
    warnings.filterwarnings("ignore")

    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        workspace = Path(tmp)
        os.environ["AGENTCANVAS_HOME"] = str(workspace)
        write_graph(workspace, GRAPH_NAME, args.latency_ms)
        write_graph(workspace, NO_LATENCY_GRAPH, 0.0)
        sides: dict[str, dict[int, Timing]] = {"steal": {}, "chunks": {}, "ave": {}}
        for w in worker_counts:
            sides["steal"][w] = asyncio.run(run_ours(workspace, GRAPH_NAME, n_per_task, w))
            sides["chunks"][w] = (  # at W = 1 both policies are one chunk in order
                sides["steal"][w]
                if w == 1
                else asyncio.run(run_ours(workspace, GRAPH_NAME, n_per_task, w, steal=False))
            )
            sides["ave"][w] = run_ave(episodes, w, args.latency_ms / 1000.0)
        # The same episodes without latency, one worker: what each side adds to the env.
        bare = (
            asyncio.run(run_ours(workspace, NO_LATENCY_GRAPH, n_per_task, 1)),
            run_ave(episodes, 1, 0.0),
        )
    _print_table(episodes, worker_counts, sides, args.latency_ms)
    _print_overhead(episodes, *bare)
    return 0


def _print_table(
    episodes: list[Episode],
    worker_counts: list[int],
    sides: dict[str, dict[int, Timing]],
    latency_ms: float,
) -> None:
    steal, chunks, ave = sides["steal"], sides["chunks"], sides["ave"]
    reference = steal[1].steps
    agree = all(t.steps == reference for side in sides.values() for t in side.values())
    total_steps = sum(reference.values())
    print(
        f"{len(episodes)} episodes of {', '.join(TASKS)}; {total_steps} actions in all, "
        f"{latency_ms:g} ms simulated latency each "
        f"(serial floor {total_steps * latency_ms / 1000:.2f} s); "
        f"same per-episode action counts on every side at every W: {agree}; "
        f"successes ours {steal[1].successes}, AsyncVectorEnv {ave[1].successes}"
    )
    head = (
        f"{'W':>2} | {'steal wall s':>12} {'/W':>5} {'steals':>6} | {'chunks wall s':>13} "
        f"{'/W':>5} | {'AVE wall s':>10} {'/W':>5} | {'steal/AVE':>9} | "
        f"{'ideal chunks':>12} {'steal':>5} {'AVE':>5} | {'start s ours':>12} "
        f"{'AVE':>5}"
    )
    print(head)
    print("-" * len(head))
    for w in worker_counts:
        s, c, a = steal[w], chunks[w], ave[w]
        ideal = ideal_speedups(reference, w)
        n_steals = sum(x.steals for x in s.workers or [])
        print(
            f"{w:>2} | {s.wall_s:>12.2f} {steal[1].wall_s / s.wall_s / w:>5.2f} "
            f"{n_steals:>6} | {c.wall_s:>13.2f} {chunks[1].wall_s / c.wall_s / w:>5.2f} | "
            f"{a.wall_s:>10.2f} {ave[1].wall_s / a.wall_s / w:>5.2f} | "
            f"{s.wall_s / a.wall_s:>9.2f} | {ideal['contiguous'] / w:>12.2f} "
            f"{ideal['stealing'] / w:>5.2f} {ideal['pending'] / w:>5.2f} | "
            f"{s.startup_s:>12.2f} {a.startup_s:>5.2f}"
        )
    print(
        "steal: ours, work-stealing dispatch; chunks: ours, fixed contiguous chunks; AVE: "
        "AsyncVectorEnv, each slot takes the next pending episode on autoreset. /W: "
        "wall(W=1) / wall(W) / W on the same side (parallel efficiency; goal for steal "
        ">= 0.9 at W = 8); steals: episodes taken from another worker's chunk; steal/AVE: "
        "wall-time ratio (goal <= 1); ideal: the efficiency each policy allows given the "
        "episode lengths (total actions / the busiest worker's, over W); start: servers or "
        "vector-env workers, not in wall."
    )
    for w in worker_counts[1:]:
        per_worker = ", ".join(
            f"w{x.worker_id} {x.episodes} ep/{x.task_switches} sw/{x.steals} st"
            for x in steal[w].workers or []
        )
        print(f"  W = {w} steal per worker (episodes/task switches/steals): {per_worker}")


def _print_overhead(episodes: list[Episode], ours: Timing, ave: Timing) -> None:
    n_actions = sum(ours.steps.values())
    print(
        f"without latency, W = 1: ours {ours.wall_s:.2f} s, AsyncVectorEnv {ave.wall_s:.2f} s "
        f"for {len(episodes)} episodes / {n_actions} actions: wall per episode ours "
        f"{1000 * ours.wall_s / len(episodes):.1f} ms, AsyncVectorEnv "
        f"{1000 * ave.wall_s / len(episodes):.1f} ms (ratio {ours.wall_s / ave.wall_s:.1f}x)"
    )


def median_interval(ratios: list[float], draws: int = 2000) -> tuple[float, float]:
    """A 90 % bootstrap interval of the median of ``ratios`` (percentile bootstrap, Efron
    1979; a fixed seed: the same rounds give the same interval)."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.05 * draws)], medians[int(0.95 * draws) - 1]


if __name__ == "__main__":
    raise SystemExit(main())
