"""MetaWorld MT10 with the scripted experts: our runner next to plain MetaWorld loops.

    .venv/bin/python bench/mt10_experts.py [--episodes N] [--workers 1,2,4] [--rounds R]

The same episodes on every side: the 10 tasks of ``metaworld_expert`` (MT10), N episodes
each, episode *i* of a task on goal variation ``i mod 50`` of ``MT1(task, seed=0)`` with the
env seeded by ``episode_seed`` — what ``env_metaworld`` does — driven by MetaWorld's expert
of the task (clipped to [-1, 1]), ending at the first success or 500 steps.

- **ours**: ``run_foreground`` of ``metaworld_expert`` at W workers (W forked
  ``env_metaworld`` servers; the expert runs in the runner), episodes only (start-up apart);
- **shards**: W processes (``multiprocessing``, fork), each a plain loop over a contiguous
  share of the episodes — what evaluation harnesses do;
- **async vec**: what ``gym.make_vec(..., vector_strategy="async")`` builds — Gymnasium's
  ``AsyncVectorEnv`` over MetaWorld's own env classes, here W of them — playing the same
  episodes: each env, at each reset, takes the next pending episode (task, goal variation,
  seed as above) from a shared counter, the way a user feeds a vector env a list of episodes;
  the experts run in the main process. This is the issue's reference (≥ 0.9 of its
  throughput at every W). ``make_vec`` itself cannot be told which episode to play next
  (its envs draw their own goal variation at each reset), hence the planned env;
- **make_vec**: MetaWorld's own ``gym.make_vec("Meta-World/MT10", vector_strategy="async")``
  (its 10 subprocess envs, one per task, fixed), run until every env finished N episodes.
  Its episodes are its own, so its row is a throughput reference, not a check of equality.

Every episode's (success, steps) must agree between ours, shards and async vec (same
episodes); the ratios are ours' episodes/s over theirs at the same W. Ours and async vec run
in R paired rounds at each W, the order alternating from round to round (whichever runs
second runs on a warmer machine); the table shows the medians of ours and of async vec and
the median of the per-round ratios with a 90 % bootstrap interval of it (one round's ratio
moves by several per cent on a shared machine; the median of paired rounds much less).
Shards run once per W. Also: memory of one env server process.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import gymnasium as gym
import numpy as np
import psutil
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.run_setup import new_run_dir, run_registry
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.nodesets.env_metaworld import TASKS, variations
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scaling import median_interval, take_pending  # the bench folder is not a package

MT10 = TASKS["MT10"]["train"]
RUN_SEED = 0


def plain_episode(env: Any, expert: Any, task_variation: Any, seed: int) -> tuple[int, int]:
    """One episode as env_metaworld + metaworld_expert run it: (success, steps)."""
    env.set_task(task_variation)
    env.seed(seed)
    obs, _ = env.reset()
    for step in range(1, 501):
        action = np.clip(np.asarray(expert.get_action(obs), dtype=np.float64), -1.0, 1.0)
        obs, _, _, truncated, info = env.step(action.astype(np.float32))
        if info["success"]:
            return 1, step
        if truncated:
            break
    return 0, 500


def shard(episodes: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """A plain loop over ``episodes`` (task, index), one env per task as it comes."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS
    from metaworld.policies import ENV_POLICY_MAP as POLICIES

    ENV_POLICY_MAP: dict[str, Any] = dict(POLICIES)

    warnings.simplefilter("ignore")
    out: list[tuple[int, int]] = []
    env: Any = None
    current = ""
    cache: dict[str, list[Any]] = {}
    for task, index in episodes:
        if task != current:
            if env is not None:
                env.close()
            env, current = ALL_V3_ENVIRONMENTS[task](), task
            cache[task] = variations("MT10", "train", task, 0)
            expert = ENV_POLICY_MAP[task]()
        seed = episode_seed(RUN_SEED, task, index)
        out.append(plain_episode(env, expert, cache[task][index % 50], seed))
    return out


def run_shards(n: int, workers: int) -> tuple[float, list[tuple[int, int]]]:
    episodes = [(task, i) for task in MT10 for i in range(n)]
    size = -(-len(episodes) // workers)
    parts = [episodes[k : k + size] for k in range(0, len(episodes), size)]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers) as pool:
        pool.map(abs, range(workers))  # processes up before the clock starts
        start = time.perf_counter()
        results = pool.map(shard, parts)
        wall = time.perf_counter() - start
    return wall, [r for part in results for r in part]


async def run_ours(workspace: Path, n: int, workers: int) -> tuple[float, float, list[Any]]:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    graph = registry.load_graph("metaworld_expert")
    config = EvalConfig(
        graph_name="metaworld_expert", episode_count=n, worker_count=workers, seed=RUN_SEED
    )
    called = time.time()
    run_dir = new_run_dir(runs_dir(workspace))
    run = await run_foreground(
        run_registry(registry.catalogue, run_dir), graph, config, run_dir=run_dir
    )
    summary = run.summary
    if summary.status_counts != {"completed": summary.episodes_total}:
        first = next((str(r.node_errors) for r in summary.episodes if r.error), "")
        raise RuntimeError(f"ours at W={workers}: {summary.status_counts}: {first}")
    started, finished = summary.timings["started_at"], summary.timings["finished_at"]
    assert started is not None and finished is not None
    return finished - started, started - called, sorted(summary.episodes, key=lambda r: r.index)


MAX_STEPS = 500
HEADER = 2  # a planned env's observation: active, episode number, then MetaWorld's own


class PlannedMetaWorld(gym.Env[np.ndarray, np.ndarray]):
    """A MetaWorld env that plays the pending episodes: at each reset the next (task, index)
    from a counter shared by every env process, set up as ``plain_episode`` does; idles once
    none is left. An episode ends at the first success (``terminated``) or after MAX_STEPS
    (``truncated``), as in ``plain_episode``."""

    def __init__(self, episodes: list[tuple[str, int]], counter: Any) -> None:
        self.episodes, self.counter = episodes, counter
        self.current, self.steps, self.task = -1, 0, ""
        self.env: Any = None
        self.variations: list[Any] = []
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (HEADER + 39,), np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS

        self.current, self.steps = take_pending(self.counter, len(self.episodes)), 0
        if self.current < 0:
            return self._obs(np.zeros(39)), {}
        task, index = self.episodes[self.current]
        if task != self.task:  # one env per task as it comes, as a shard does
            if self.env is not None:
                self.env.close()
            self.env, self.task = ALL_V3_ENVIRONMENTS[task](), task
            self.variations = variations("MT10", "train", task, 0)
        self.env.set_task(self.variations[index % 50])
        self.env.seed(episode_seed(RUN_SEED, task, index))
        obs, _ = self.env.reset()
        return self._obs(obs), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.current < 0:
            return self._obs(np.zeros(39)), 0.0, False, False, {}
        obs, _, _, truncated, info = self.env.step(action)
        self.steps += 1
        success = bool(info["success"])
        ended = success or truncated or self.steps >= MAX_STEPS
        return self._obs(obs), float(success), success, ended and not success, {}

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate([[float(self.current >= 0), float(self.current)], obs])

    def close(self) -> None:
        if self.env is not None:
            self.env.close()


def run_vec_same(n: int, workers: int) -> tuple[float, list[tuple[int, int]]]:
    """Gymnasium's AsyncVectorEnv of W planned MetaWorld envs, the experts in this process:
    (wall, (success, steps) per episode in plan order)."""
    from metaworld.policies import ENV_POLICY_MAP as POLICIES

    policies: dict[str, Any] = dict(POLICIES)
    experts = {task: policies[task]() for task in MT10}
    episodes = [(task, i) for task in MT10 for i in range(n)]
    counter = multiprocessing.get_context("fork").Value("l", 0)

    def make() -> PlannedMetaWorld:
        warnings.simplefilter("ignore")
        return PlannedMetaWorld(episodes, counter)

    envs = AsyncVectorEnv([make] * workers, autoreset_mode=AutoresetMode.SAME_STEP, context="fork")
    try:
        start = time.perf_counter()
        obs, _ = envs.reset()
        current = [int(o[1]) for o in obs]
        length = [0] * workers
        out: dict[int, tuple[int, int]] = {}
        while len(out) < len(episodes):
            actions = np.zeros((workers, 4), dtype=np.float32)
            for k, o in enumerate(obs):
                if o[0] == 1.0:
                    expert = experts[episodes[current[k]][0]]
                    action = np.asarray(expert.get_action(o[HEADER:]), dtype=np.float64)
                    actions[k] = np.clip(action, -1.0, 1.0).astype(np.float32)
            active = obs[:, 0] == 1.0
            obs, _, terminated, truncated, _ = envs.step(actions)
            for k in (int(slot) for slot in np.flatnonzero(active)):
                length[k] += 1
                if terminated[k] or truncated[k]:
                    won = bool(terminated[k])
                    out[current[k]] = (int(won), length[k] if won else MAX_STEPS)
                    current[k], length[k] = int(obs[k, 1]), 0  # autoreset took the next one
        wall = time.perf_counter() - start
    finally:
        envs.close()
    return wall, [out[k] for k in range(len(episodes))]


def run_make_vec(n: int) -> tuple[float, int, float]:
    """MetaWorld's async vector env: (wall, episodes, success rate)."""
    import gymnasium as gym
    import metaworld  # noqa: F401  (registers Meta-World/*)
    from metaworld.policies import ENV_POLICY_MAP as POLICIES

    ENV_POLICY_MAP: dict[str, Any] = dict(POLICIES)

    warnings.simplefilter("ignore")
    envs = gym.make_vec(
        "Meta-World/MT10", vector_strategy="async", seed=RUN_SEED, terminate_on_success=True
    )
    names = MT10  # make_vec builds its envs in MT10_V3 order
    experts = [ENV_POLICY_MAP[name]() for name in names]
    obs, _ = envs.reset()
    done = np.zeros(len(names), dtype=int)
    successes = 0
    start = time.perf_counter()
    while (done < n).any():
        actions = np.stack(
            [np.clip(e.get_action(o), -1.0, 1.0) for e, o in zip(experts, obs, strict=True)]
        ).astype(np.float32)
        obs, _, terminated, truncated, info = envs.step(actions)
        ended = np.logical_or(terminated, truncated)
        for k in np.flatnonzero(ended):
            if done[k] < n:
                done[k] += 1
                final = info.get("final_info", info)
                successes += int(bool(final["success"][k]))
    wall = time.perf_counter() - start
    envs.close()
    return wall, int(done.sum()), successes / max(1, int(done.sum()))


def server_memory(images: bool) -> tuple[float, float]:
    """RSS and USS (MiB) of a fresh process holding one env_metaworld env after 20 steps,
    with 128 px images on (the GL context and renderer included) or off."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_memory_child, args=(queue, images))
    proc.start()
    found: tuple[float, float] = queue.get(timeout=120)
    proc.join(30)
    return found


def _memory_child(queue: Any, images: bool) -> None:
    from agentcanvas.nodes import CallContext
    from agentcanvas.nodesets.env_metaworld import MetaWorldPanel, MetaWorldState, step

    state = MetaWorldState()
    panel = MetaWorldPanel(state)
    panel.values.update(images=images, image_size=128, task_id="reach-v3")
    panel.on_action("play")
    ctx = CallContext(node_id="env", step=0)
    for _ in range(20):
        step({"action": np.zeros(4)}, {}, state, ctx)
    info = psutil.Process().memory_full_info()
    queue.put((info.rss / 2**20, info.uss / 2**20))
    state.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=6, help="per task (default 6)")
    parser.add_argument("--workers", default="1,2,4", help="comma-separated W (default 1,2,4)")
    parser.add_argument("--rounds", type=int, default=3, help="paired rounds per W (default 3)")
    args = parser.parse_args()
    widths = [int(w) for w in args.workers.split(",")]
    n, rounds = args.episodes, args.rounds
    total = n * len(MT10)
    print(
        f"MetaWorld MT10, scripted experts, {n} episodes per task ({total}), {os.cpu_count()} "
        f"CPUs, {rounds} paired rounds of ours and async vec per W (medians)"
    )
    print(f"{'W':>3} {'ours ep/s':>10} {'vec ep/s':>9} {'ours/vec':>9} {'90% interval':>13} "
          f"{'shards ep/s':>12} {'ours/shards':>12} {'ours SR':>8} {'same':>5} "
          f"{'start-up s':>10}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        for w in widths:
            ours_walls, vec_walls, starts, same = [], [], [], True
            for k in range(rounds):
                if k % 2 == 1:
                    vec_wall, vec = run_vec_same(n, w)
                ours_wall, startup, records = asyncio.run(run_ours(workspace, n, w))
                if k % 2 == 0:
                    vec_wall, vec = run_vec_same(n, w)
                ours = [(int(r.metrics["success"]), int(r.metrics["length"])) for r in records]
                same = same and ours == vec
                ours_walls.append(ours_wall)
                vec_walls.append(vec_wall)
                starts.append(startup)
            shards_wall, plain = run_shards(n, w)
            same = same and ours == plain
            ratios = [v / o for v, o in zip(vec_walls, ours_walls, strict=True)]
            low, high = median_interval(ratios)
            ours_wall = statistics.median(ours_walls)
            ours_sr = sum(s for s, _ in ours) / total
            print(
                f"{w:>3} {total / ours_wall:>10.1f} {total / statistics.median(vec_walls):>9.1f} "
                f"{statistics.median(ratios):>9.2f} {f'{low:.2f}-{high:.2f}':>13} "
                f"{total / shards_wall:>12.1f} {shards_wall / ours_wall:>12.2f} "
                f"{ours_sr:>8.3f} {'yes' if same else 'NO':>5} "
                f"{statistics.median(starts):>10.1f}"
            )
    vec_wall, vec_episodes, vec_sr = run_make_vec(n)
    print(
        f"make_vec(MT10, async): {vec_episodes / vec_wall:.1f} ep/s over {vec_episodes} "
        f"episodes of its own (10 processes), SR {vec_sr:.3f}"
    )
    for images in (False, True):
        rss, uss = server_memory(images)
        what = "128 px images" if images else "state only"
        print(f"one env process (reach-v3, {what}): RSS {rss:.0f} MiB, USS {uss:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
