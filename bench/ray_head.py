"""The Ray engine's head: CPU per episode against episode length, and episodes/s vs local.

    .venv/bin/python bench/ray_head.py [--quick] [--episodes N] [--budgets 10,40,160]
                                       [--workers W] [--batch K]

Runs ``cartpole_mlp`` (Gymnasium CartPole, the shared PyTorch MLP policy) with the step
budget set to each of ``--budgets`` (the greedy policy keeps the pole up, so episodes last
about the budget), on both engines, in the same process:

- ``local``: W tagged env servers on this host; the eval process (the head) drives every
  step of every episode over loopback RPC;
- ``ray``: a simulated Ray cluster on 127.0.0.1 (``ray.cluster_utils.Cluster``: a head and
  two nodes, one CPU each); W worker actors run whole episodes, the head sends them in
  calls of as many episodes as ``cluster.runner.Batching`` chooses (at a few workers, one)
  and writes what comes back;
- ``ray kK`` (with ``--batch K``): the same with K episodes a call (``Batching(min_batch=K)``,
  less at the run's end), to show what batching saves the head per episode — what the rule
  does when many workers would otherwise call faster than the head can answer.

Head CPU is this process's CPU time (every thread: the event loop, Ray's core worker)
during ``execute`` only (servers and actors already started), less what the process burns
idle (measured for a second just before), per episode; one-time imports are done before.
The episode's log.jsonl is encoded by the worker, so the head writes it in one call. The issue's
requirement: on the Ray engine it does not grow with episode length. Throughput is
episodes/s of the same runs (wall time of ``execute``), side by side, with the ratio; on
this 2-core machine the simulated cluster shares the CPUs with the head, so it measures
overhead, not a cluster's speed-up. The last lines project the head's ceiling in
results/s (1 / head CPU per episode) against what 1,000 workers would send.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: loopback
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from agentcanvas.cluster.engine import RayEngine
from agentcanvas.cluster.runner import Batching
from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.engine import Engine, LocalEngine
from agentcanvas.eval.foreground import finalise_run
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.store import RunDir
from agentcanvas.server.registry import WorkspaceComponentRegistry

GRAPH = "cartpole_mlp"
LOOPBACK = "127.0.0.1"


@dataclass
class Measured:
    engine: str
    label: str
    calls: int
    budget: int
    episodes: int
    mean_steps: float
    head_cpu_s: float
    wall_s: float

    @property
    def cpu_ms_per_episode(self) -> float:
        return 1000 * self.head_cpu_s / self.episodes

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.wall_s


def start_cluster() -> Any:
    import ray
    from ray.cluster_utils import Cluster

    store = 100 * 1024**2
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "node_ip_address": LOOPBACK,
            "include_dashboard": False,
            "object_store_memory": store,
        },
    )
    for _ in range(2):
        cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK, object_store_memory=store)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster


async def idle_cpu_per_s(seconds: float = 1.0) -> float:
    """This process's CPU per second while the run has not started (Ray's own threads)."""
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


async def measure(
    engine: Engine, label: str, budget: int, episodes: int, workers: int, base: Path
) -> Measured:
    """One run; CPU and wall time of ``execute`` only."""
    registry = WorkspaceComponentRegistry(workspace=base)
    registry.scan_all()
    graph = registry.load_graph(GRAPH)
    config = EvalConfig(
        graph_name=GRAPH,
        episode_count=episodes,
        worker_count=workers,
        step_budget=budget,
        engine=engine.name,  # type: ignore[arg-type]
        record_log=True,
    )
    run_id = f"{engine.name}_{budget}"
    run_dir = RunDir(base / run_id)
    await engine.start(registry, graph, config)
    determinism = await engine.determinism(registry, graph)
    runner = engine.runner(
        RunContext(registry, graph, config, run_dir, run_id, determinism=determinism)
    )
    try:
        idle = await idle_cpu_per_s()
        cpu, wall = time.process_time(), time.perf_counter()
        summary = await runner.execute()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        cpu = max(0.0, cpu - idle * wall)  # what the background threads burn anyway
    finally:
        await finalise_run(registry, runner, run_dir, engine)
    assert summary.status == "completed", summary.error
    steps = [e.steps for e in summary.episodes]
    ray_workers = engine.workers if isinstance(engine, RayEngine) else None
    calls = ray_workers.calls if ray_workers is not None else len(steps)  # local: one each
    return Measured(
        engine.name, label, calls, budget, len(steps), sum(steps) / len(steps), cpu, wall
    )


def warm_imports() -> None:
    """What the first live aggregates import lazily (scipy, for their intervals): once per
    process, before the measured spans, like the servers' and actors' start-up."""
    for name in ("scipy.optimize", "scipy.special"):
        importlib.import_module(name)


async def bench(budgets: list[int], episodes: int, workers: int, batch: int) -> list[Measured]:
    warm_imports()
    results = []
    with tempfile.TemporaryDirectory(prefix="ray_head_") as tmp:
        for budget in budgets:
            engines: list[tuple[str, Engine]] = [("local", LocalEngine()), ("ray", RayEngine())]
            if batch > 1:
                engines.append((f"ray k{batch}", RayEngine(Batching(min_batch=batch))))
            for label, engine in engines:
                base = Path(tmp) / f"{label.replace(' ', '_')}{budget}"
                base.mkdir()
                m = await measure(engine, label, budget, episodes, workers, base)
                print(
                    f"  {m.label:7} budget {budget:4}: {m.episodes} episodes in {m.calls} "
                    f"calls, {m.cpu_ms_per_episode:7.2f} ms head CPU/episode, "
                    f"{m.episodes_per_s:6.2f} episodes/s",
                    file=sys.stderr,
                )
                results.append(m)
    return results


def report(results: list[Measured], workers: int) -> None:
    by = {(m.label, m.budget): m for m in results}
    budgets = sorted({m.budget for m in results})
    print(f"\nHead CPU per episode ({GRAPH}, {workers} workers; ms of head CPU / episode)")
    print(
        f"{'budget':>6} {'steps':>6} {'local':>9} {'ray':>9} {'local/ray':>9}"
        f" {'local µs/step':>13} {'ray µs/step':>11}"
    )
    for b in budgets:
        lo, ra = by[("local", b)], by[("ray", b)]
        print(
            f"{b:6} {ra.mean_steps:6.1f} {lo.cpu_ms_per_episode:9.2f} "
            f"{ra.cpu_ms_per_episode:9.2f} {lo.cpu_ms_per_episode / ra.cpu_ms_per_episode:9.2f}"
            f" {1000 * lo.cpu_ms_per_episode / lo.mean_steps:13.1f}"
            f" {1000 * ra.cpu_ms_per_episode / ra.mean_steps:11.1f}"
        )
    first, last = by[("ray", budgets[0])], by[("ray", budgets[-1])]
    growth = last.cpu_ms_per_episode / first.cpu_ms_per_episode
    length = last.mean_steps / first.mean_steps
    print(f"ray head CPU/episode grows {growth:.2f}x while episodes grow {length:.1f}x longer")
    print(f"\nEpisodes/s (same runs; simulated 3-node cluster on this {os.cpu_count()}-CPU host)")
    print(f"{'budget':>6} {'local':>9} {'ray':>9} {'ray/local':>9}")
    for b in budgets:
        lo, ra = by[("local", b)], by[("ray", b)]
        print(
            f"{b:6} {lo.episodes_per_s:9.2f} {ra.episodes_per_s:9.2f}"
            f" {ra.episodes_per_s / lo.episodes_per_s:9.2f}"
        )
    batched = sorted({m.label for m in results if m.label.startswith("ray k")})
    for label in batched:
        print(f"\nRay head CPU per episode, one episode a call vs {label} (same budgets)")
        print(f"{'budget':>6} {'ray':>9} {label:>9} {'ray/' + label:>11} {'calls':>7}")
        for b in budgets:
            one, many = by[("ray", b)], by[(label, b)]
            print(
                f"{b:6} {one.cpu_ms_per_episode:9.2f} {many.cpu_ms_per_episode:9.2f}"
                f" {one.cpu_ms_per_episode / many.cpu_ms_per_episode:11.2f} {many.calls:7}"
            )
    for label in ["ray", *batched]:
        worst = max(m.cpu_ms_per_episode for m in results if m.label == label)
        ceiling = 1000 / worst
        print(f"\n{label} head ceiling: ~{ceiling:.0f} results/s (1 / worst head CPU per episode)")
        for seconds in (1.0, 10.0):
            need = 1000 / seconds
            print(
                f"  1,000 workers with {seconds:g} s episodes send {need:.0f} results/s: "
                f"{'within' if need <= ceiling else 'beyond'} the ceiling ({need / ceiling:.2f}x)"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 budgets, 6 episodes")
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--budgets", default="10,40,160")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--batch", type=int, default=0, help="also run Ray with K episodes a call (K > 1)"
    )
    args = parser.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    episodes = args.episodes
    if args.quick:
        budgets, episodes = [budgets[0], budgets[-1]], min(episodes, 6)
    cluster = start_cluster()
    import ray

    try:
        results = asyncio.run(bench(budgets, episodes, args.workers, args.batch))
    finally:
        ray.shutdown()
        cluster.shutdown()
    report(results, args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
