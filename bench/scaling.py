"""Batch-eval scaling with workers on a latency-bound env, next to Gymnasium ``AsyncVectorEnv``.

    .venv/bin/python bench/scaling.py [--quick] [--episodes N] [--latency-ms MS]

Both sides run the same episodes: the BabyAI levels of ``babyai_oracle``, the episode seeds
of ``agentcanvas.eval.seeding.episode_seed``, the same BFS policy
(``agentcanvas.gridnav.shortest_plan`` on the full grid toward the true target) and the same
simulated renderer latency (``time.sleep`` per action, inside the env process):

- ours: ``run_foreground`` of a copy of ``babyai_oracle`` whose ``env.fields`` set the panel
  field ``step_latency_ms``, at W workers (W tagged ``env_minigrid`` servers);
- ``AsyncVectorEnv``: ``num_envs = W`` subprocess envs, each running the same contiguous chunk
  of episodes one after another (same-step autoreset), the policy in the main process.

Wall time is the episodes only; start-up (spawning servers or vector-env workers) is shown
apart. ``ideal`` is the speedup the chunking allows (total env steps / steps of the longest
chunk). Goal (issue 4): speedup >= 0.8 x W up to W = 8, and no slower than AsyncVectorEnv.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import tempfile
import time
import warnings
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.worker_pool import partition_contiguous
from agentcanvas.gridnav import LEFT, shortest_plan
from agentcanvas.nodes.registry import WorkspaceComponentRegistry
from agentcanvas.nodesets.env_minigrid import MiniGridState

GRAPH_NAME = "bench_scaling"
NO_LATENCY_GRAPH = "bench_scaling_no_latency"
TASKS = ["BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0"]  # the levels of babyai_oracle
RUN_SEED = 0
MAX_SIDE = 32  # grids are padded to MAX_SIDE x MAX_SIDE in the vector env's observation
MAX_TARGETS = 8
HEADER_LEN = 8  # active, width, height, x, y, dir, mode, n_targets
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


async def run_ours(workspace: Path, name: str, n_per_task: int, workers: int) -> Timing:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    graph = registry.load_graph(name)
    config = EvalConfig(graph_name=name, episode_count=n_per_task, worker_count=workers,
                        seed=RUN_SEED)
    called = time.time()
    run = await run_foreground(registry, graph, config)
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
    )


# -- AsyncVectorEnv -----------------------------------------------------------------------------


class ChunkEnv(gym.Env[np.ndarray, int]):
    """Plays a fixed list of (level, seed) episodes in order, then idles.

    The simulator is agentcanvas's own ``MiniGridState`` (same level construction, reset and
    ground-truth targets as the env_minigrid node set); each action sleeps ``latency_s``.
    """

    def __init__(self, episodes: list[tuple[str, int]], latency_s: float) -> None:
        self.episodes = episodes
        self.latency_s = latency_s
        self.cursor = 0
        self.active = False
        self.sim = MiniGridState()
        self.observation_space = gym.spaces.Box(-1, 255, shape=(OBS_LEN,), dtype=np.int16)
        self.action_space = gym.spaces.Discrete(7)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self.active = self.cursor < len(self.episodes)
        if self.active:
            level, level_seed = self.episodes[self.cursor]
            self.cursor += 1
            with contextlib.redirect_stdout(io.StringIO()):  # BabyAI's "Sampling rejected"
                self.sim.start(level, level_seed)
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.active:
            return self._obs(), 0.0, False, False, {}
        time.sleep(self.latency_s)
        _, reward, terminated, truncated, _ = self.sim.env.step(int(action))
        return self._obs(), float(reward), bool(terminated), bool(truncated), {}

    def _obs(self) -> np.ndarray:
        obs = np.full(OBS_LEN, -1, dtype=np.int16)
        obs[0] = int(self.active)
        if not self.active:
            return obs
        grid = self.sim.grid()
        cells, mode = self.sim.targets()
        width, height = grid.shape[:2]
        obs[1:8] = [width, height, *self.sim.agent_state(), int(mode == "face"), len(cells)]
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
    width, height, x, y, d, face, n_targets = (int(v) for v in obs[1:8])
    flat = obs[HEADER_LEN : HEADER_LEN + 2 * n_targets]
    cells = [(int(flat[2 * i]), int(flat[2 * i + 1])) for i in range(n_targets)]
    padded = obs[HEADER_LEN + 2 * MAX_TARGETS :].reshape(MAX_SIDE, MAX_SIDE, 3)
    grid = padded[:width, :height].astype(np.uint8)
    plan_ = shortest_plan(grid, (x, y, d), cells, "face" if face else "reach")
    return plan_[0] if plan_ else LEFT


def run_ave(episodes: list[Episode], workers: int, latency_s: float) -> Timing:
    chunks = partition_contiguous([e.index for e in episodes], workers)
    fns = [partial(ChunkEnv, [(episodes[i].task, episodes[i].seed) for i in chunk], latency_s)
           for chunk in chunks]
    called = time.perf_counter()
    envs = AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
    started = time.perf_counter()
    try:
        steps, successes = _drive(envs, chunks)
    finally:
        finished = time.perf_counter()
        envs.close()
    return Timing(started - called, finished - started, steps, successes)


def _drive(envs: AsyncVectorEnv, chunks: list[list[int]]) -> tuple[dict[int, int], int]:
    obs, _ = envs.reset()
    done_in_chunk = [0] * len(chunks)
    length = [0] * len(chunks)
    steps: dict[int, int] = {}
    successes = 0
    while sum(done_in_chunk) < sum(map(len, chunks)):
        actions = np.array([bfs_action(o) for o in obs])
        active = obs[:, 0] == 1
        obs, rewards, terminated, truncated, _ = envs.step(actions)
        for k in np.flatnonzero(active):
            length[k] += 1
            if terminated[k] or truncated[k]:
                steps[chunks[k][done_in_chunk[k]]] = length[k]
                successes += int(bool(terminated[k]) and rewards[k] > 0)  # as env_minigrid
                done_in_chunk[k] += 1
                length[k] = 0
    return steps, successes


# -- the table ----------------------------------------------------------------------------------


def ideal_speedup(steps: dict[int, int], workers: int) -> float:
    chunks = partition_contiguous(sorted(steps), workers)
    longest = max(sum(steps[i] for i in chunk) for chunk in chunks)
    return sum(steps.values()) / longest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="16 episodes, W = 1, 2, 4")
    parser.add_argument("--episodes", type=int, help="episodes in all (default 48; quick 16)")
    parser.add_argument("--latency-ms", type=float, default=20.0, help="per action (default 20)")
    args = parser.parse_args()
    n_total = args.episodes or (16 if args.quick else 48)
    n_per_task = max(1, n_total // len(TASKS))
    worker_counts = [1, 2, 4] if args.quick else [1, 2, 4, 8]
    episodes = plan(n_per_task)
    warnings.filterwarnings("ignore")

    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        workspace = Path(tmp)
        os.environ["AGENTCANVAS_HOME"] = str(workspace)
        write_graph(workspace, GRAPH_NAME, args.latency_ms)
        write_graph(workspace, NO_LATENCY_GRAPH, 0.0)
        ours: dict[int, Timing] = {}
        ave: dict[int, Timing] = {}
        for w in worker_counts:
            ours[w] = asyncio.run(run_ours(workspace, GRAPH_NAME, n_per_task, w))
            ave[w] = run_ave(episodes, w, args.latency_ms / 1000.0)
        # The same episodes without latency, one worker: what each side adds to the env.
        bare = (asyncio.run(run_ours(workspace, NO_LATENCY_GRAPH, n_per_task, 1)),
                run_ave(episodes, 1, 0.0))
    _print_table(episodes, worker_counts, ours, ave, args.latency_ms)
    _print_overhead(episodes, *bare)
    return 0


def _print_table(
    episodes: list[Episode],
    worker_counts: list[int],
    ours: dict[int, Timing],
    ave: dict[int, Timing],
    latency_ms: float,
) -> None:
    reference = ours[worker_counts[0]].steps
    agree = all(t.steps == reference for t in [*ours.values(), *ave.values()])
    total_steps = sum(reference.values())
    print(f"{len(episodes)} episodes of {', '.join(TASKS)}; {total_steps} actions in all, "
          f"{latency_ms:g} ms simulated latency each "
          f"(serial floor {total_steps * latency_ms / 1000:.2f} s); "
          f"same per-episode action counts on both sides at every W: {agree}; "
          f"successes ours {ours[1].successes}, AsyncVectorEnv {ave[1].successes}")
    head = (f"{'W':>2} | {'ours wall s':>11} {'speedup':>7} {'/W':>5} | {'AVE wall s':>10} "
            f"{'speedup':>7} | {'ours/AVE':>8} | {'ideal':>5} | {'ours ms/act':>11} "
            f"{'AVE ms/act':>10} | {'ours start s':>12} {'AVE start s':>11}")
    print(head)
    print("-" * len(head))
    for w in worker_counts:
        o, a = ours[w], ave[w]
        crit = total_steps / ideal_speedup(reference, w)  # actions on the longest chunk
        print(f"{w:>2} | {o.wall_s:>11.2f} {ours[1].wall_s / o.wall_s:>7.2f} "
              f"{ours[1].wall_s / o.wall_s / w:>5.2f} | {a.wall_s:>10.2f} "
              f"{ave[1].wall_s / a.wall_s:>7.2f} | {o.wall_s / a.wall_s:>8.2f} | "
              f"{ideal_speedup(reference, w):>5.2f} | {1000 * o.wall_s / crit:>11.1f} "
              f"{1000 * a.wall_s / crit:>10.1f} | {o.startup_s:>12.2f} {a.startup_s:>11.2f}")
    print("speedup: wall(W=1) / wall(W) on the same side; /W: our parallel efficiency "
          "(goal >= 0.8); ours/AVE: wall-time ratio (goal <= 1); ideal: total actions / "
          "actions of the longest contiguous chunk; ms/act: wall / actions on the longest chunk "
          f"(the floor is {latency_ms:g} ms); start: servers or vector-env workers, "
          "not in wall.")


def _print_overhead(episodes: list[Episode], ours: Timing, ave: Timing) -> None:
    n_actions = sum(ours.steps.values())
    print(f"without latency, W = 1: ours {ours.wall_s:.2f} s, AsyncVectorEnv {ave.wall_s:.2f} s "
          f"for {len(episodes)} episodes / {n_actions} actions: wall per episode ours "
          f"{1000 * ours.wall_s / len(episodes):.1f} ms, AsyncVectorEnv "
          f"{1000 * ave.wall_s / len(episodes):.1f} ms (ratio {ours.wall_s / ave.wall_s:.1f}x)")


if __name__ == "__main__":
    raise SystemExit(main())
