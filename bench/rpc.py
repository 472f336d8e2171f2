"""Per-call overhead of a proxied node next to Gymnasium ``AsyncVectorEnv``'s per-step overhead.

    .venv/bin/python bench/rpc.py [--quick] [--calls N]

Measured in one run, on this machine, one call at a time (latency, not throughput):

- ``in-process``: ``LocalNodeSet.call`` of the bench node (the reference floor);
- ``proxied``: the same node served by ``auto_host`` and called through ``RemoteNodeSet``
  (HTTP on loopback, binary wire format, keep-alive connection);
- ``AsyncVectorEnv``: ``envs.step`` of a trivial ``gymnasium.Env`` in a subprocess
  (``num_envs=1``), pickling over a pipe (``shared_memory=False``) or writing the
  observation to shared memory (``shared_memory=True``).

Two payloads: a no-op (no outputs; for the vector env, a scalar observation) and a 64×64×3
uint8 observation. The bench node set is written to a temporary workspace that the server
finds through ``AGENTCANVAS_HOME``. The goal (issue 3): proxied within 3× of AsyncVectorEnv.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.nodes.registry import WorkspaceComponentRegistry
from agentcanvas.server.launcher import LocalProcessLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest

OBS_SHAPE = (64, 64, 3)
NODESET_NAME = "bench_rpc"
NODESET_SOURCE = textwrap.dedent(
    f'''
    """bench/rpc.py: a no-op node and a step node returning a 64x64x3 uint8 observation."""
    import numpy as np
    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    class State:
        def __init__(self):
            self.obs = np.random.default_rng(0).integers(0, 256, {OBS_SHAPE}, dtype=np.uint8)

    NODESET = NodeSet("{NODESET_NAME}", parallelism="replicated", state_factory=State)

    @NODESET.node("noop")
    def noop(inputs, config, state, ctx):
        return {{}}

    @NODESET.node("step", inputs=[PortSpec(name="action", type="int", required=False)],
                  outputs=[PortSpec(name="obs", type="array"), PortSpec(name="reward"),
                           PortSpec(name="done", type="bool")])
    def step(inputs, config, state, ctx):
        return {{"obs": state.obs, "reward": 0.0, "done": False}}
    '''
)


class ObsEnv(gym.Env[np.ndarray, int]):
    """The vector-env counterpart of the bench node: returns a fixed observation."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.observation_space = gym.spaces.Box(0, 255, shape, dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(3)
        self.obs = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        return self.obs, {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return self.obs, 0.0, False, False, {}


@dataclass
class Stats:
    label: str
    median_us: float
    p99_us: float

    @classmethod
    def of(cls, label: str, samples_ns: list[int]) -> Stats:
        ordered = sorted(samples_ns)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return cls(label, statistics.median(ordered) / 1e3, p99 / 1e3)


def time_sync(fn: Callable[[], object], n_calls: int, n_warmup: int) -> list[int]:
    for _ in range(n_warmup):
        fn()
    samples = []
    for _ in range(n_calls):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return samples


async def time_async(
    fn: Callable[[], Awaitable[object]], n_calls: int, n_warmup: int
) -> list[int]:
    for _ in range(n_warmup):
        await fn()
    samples = []
    for _ in range(n_calls):
        start = time.perf_counter_ns()
        await fn()
        samples.append(time.perf_counter_ns() - start)
    return samples


def bench_vector_env(
    shape: tuple[int, ...], shared_memory: bool, n_calls: int, n_warmup: int
) -> list[int]:
    envs = gym.vector.AsyncVectorEnv(
        [lambda: ObsEnv(shape)], shared_memory=shared_memory, context="fork"
    )
    try:
        envs.reset(seed=0)
        actions = np.zeros(1, dtype=np.int64)
        return time_sync(lambda: envs.step(actions), n_calls, n_warmup)
    finally:
        envs.close()


async def bench_nodes(workspace: Path, n_calls: int, n_warmup: int) -> dict[str, Stats]:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    local = registry.local_instance(NODESET_NAME)
    ctx = CallContext("bench", 0)
    launcher = LocalProcessLauncher(env={"AGENTCANVAS_HOME": str(workspace)})
    server = await launcher.launch(NODESET_NAME, 0)
    remote = RemoteNodeSet(NODESET_NAME, server.url, await fetch_manifest(server.url))
    try:
        check = await remote.call("step", {}, {"action": 0}, ctx)
        expected = (await local.call("step", {}, {"action": 0}, ctx))["obs"]
        assert np.array_equal(check["obs"], expected), "the observation did not round-trip"
        results = {}
        for label, handle in (("in-process", local), ("proxied", remote)):
            results[f"{label} no-op"] = Stats.of(f"{label} no-op", await time_async(
                lambda h=handle: h.call("noop", {}, {}, ctx), n_calls, n_warmup))
            results[f"{label} obs"] = Stats.of(f"{label} obs", await time_async(
                lambda h=handle: h.call("step", {}, {"action": 0}, ctx), n_calls, n_warmup))
        return results
    finally:
        await remote.close()
        await server.stop()
        await local.close()


def run(n_calls: int, n_warmup: int) -> dict[str, Stats]:
    with tempfile.TemporaryDirectory(prefix="agentcanvas-bench-") as tmp:
        package = Path(tmp) / "graph_nodes" / NODESET_NAME
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(NODESET_SOURCE)
        results = asyncio.run(bench_nodes(Path(tmp), n_calls, n_warmup))
    for shm in (False, True):
        for label, shape in (("no-op", ()), ("obs", OBS_SHAPE)):
            key = f"AsyncVectorEnv shm={shm} {label}"
            results[key] = Stats.of(key, bench_vector_env(shape, shm, n_calls, n_warmup))
    return results


def print_table(results: dict[str, Stats]) -> None:
    print(f"{'payload':<8} {'path':<30} {'median µs':>10} {'p99 µs':>10}")
    for payload in ("no-op", "obs"):
        for path in ("in-process", "proxied", "AsyncVectorEnv shm=False",
                     "AsyncVectorEnv shm=True"):
            s = results[f"{path} {payload}"]
            print(f"{payload:<8} {path:<30} {s.median_us:>10.1f} {s.p99_us:>10.1f}")
    print()
    print("ratio proxied / AsyncVectorEnv (median; goal <= 3.0)")
    for payload in ("no-op", "obs"):
        proxied = results[f"proxied {payload}"]
        for shm in (False, True):
            ave = results[f"AsyncVectorEnv shm={shm} {payload}"]
            print(f"  {payload:<6} vs shm={shm!s:<5}  median {proxied.median_us / ave.median_us:5.2f}x"
                  f"   p99 {proxied.p99_us / ave.p99_us:5.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few calls, for a smoke run")
    parser.add_argument("--calls", type=int, default=None, help="timed calls per row")
    args = parser.parse_args(argv)
    n_calls = args.calls or (300 if args.quick else 5000)
    n_warmup = max(20, n_calls // 10)
    warnings.simplefilter("ignore")
    print(f"bench/rpc.py: {n_calls} timed calls per row after {n_warmup} warm-up calls; "
          f"python {sys.version.split()[0]}")
    print_table(run(n_calls, n_warmup))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
