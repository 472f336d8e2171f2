"""The head under synthetic load: results/s at saturation and head CPU per result.

    .venv/bin/python bench/head_load.py [--quick] [--results N] [--workers W]
                                        [--steps 10,160] [--rates 250,1000,max] [--frames KB]

Fake workers send realistic results (a completed ``cartpole_mlp``-like record, a firing log
of 2 lines per step, optional frames) at a set total rate to the real head: a real
``BatchEvalRunner`` with its ``RunRecorder``, dispatcher, control and live summary, in a real
run folder — only where episodes run is fake (an ``EpisodeWorkers`` of this file). Two
recording paths, the engines':

- ``local``: each fake worker encodes the firing log line by line into an ``EpisodeLog``, as
  the local engine's head does while it drives an episode, and records result and log the
  way ``LocalEpisodeWorkers`` does;
- ``ray``: each fake worker hands the head a reply built beforehand the way a worker actor
  builds it (``cluster.worker_actor``), through the Ray runner's result handling
  (``cluster.runner``), without Ray's call itself;
- ``ray-shared``: the same where the actors see the run folder and stage their logs there
  themselves (``cluster.shared_folder``; here before the measured span): the reply carries
  the staged file's name, which the head renames into place.

Head CPU is this process's CPU time during ``execute`` per result (every thread: the loop,
the recording thread, the live aggregates); the fake workers' own work is building nothing
but what the engine's head would. ``max`` sends as fast as the head takes them: its results/s
is the saturation rate. A rate the head cannot keep up with shows as achieved < offered (the
dispatcher hands out episodes only as fast as the head records them).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agentcanvas.cluster.elastic import Assignment
from agentcanvas.cluster.runner import RayEpisodeWorkers
from agentcanvas.cluster.shared_folder import stage_log
from agentcanvas.cluster.worker_actor import EpisodeReply
from agentcanvas.eval.config import EpisodeResult, EvalConfig
from agentcanvas.eval.dispatch import WorkStealingDispatcher
from agentcanvas.eval.episode import EpisodeSpec
from agentcanvas.eval.episode_log import EpisodeLog
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.run_control import RunControl
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import encode_jsonl_line
from agentcanvas.server.registry import WorkspaceComponentRegistry

GRAPH = "cartpole_mlp"
MAX_IN_FLIGHT = 2  # per fake local worker, as LocalEpisodeWorkers


@dataclass(frozen=True)
class Load:
    engine: str
    steps: int
    rate: float | None  # results/s offered in all; None: as fast as the head takes them
    workers: int
    frames_kb: int


@dataclass
class Measured:
    load: Load
    results: int
    head_cpu_s: float
    wall_s: float

    @property
    def per_s(self) -> float:
        return self.results / self.wall_s

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.head_cpu_s / self.results


def firing(step: int, node: str) -> dict[str, object]:
    """One firing's log entry, shaped as the executor's (a CartPole step)."""
    return {
        "step": step,
        "node": node,
        "type": "cartpole_step" if node == "env" else "mlp_policy",
        "status": "ok",
        "latency_ms": 0.123,
        "inputs": {"action": step % 2} if node == "env" else {"obs": [0.01, -0.02, 0.03, 0.04]},
        "outputs": {"obs": [0.01, -0.02, 0.03, 0.04], "reward": 1.0, "done": False}
        if node == "env"
        else {"action": step % 2},
    }


def record(spec: EpisodeSpec, steps: int) -> EpisodeResult:
    return EpisodeResult(
        index=spec.index,
        episode_id=f"ep{spec.index:04d}",
        task=spec.task,
        episode_index=spec.episode_index,
        seed=spec.seed,
        status="completed",
        steps=steps,
        metrics={"success": True, "return": float(steps), "length": steps},
        step_budget=steps,
        duration_s=0.0123,
        end_reason="success",
        instruction="keep the pole up",
    )


def log_bytes(steps: int) -> bytes:
    lines = bytearray()
    for step in range(steps):
        for node in ("policy", "env"):
            lines += encode_jsonl_line(Path("log.jsonl"), firing(step, node))
    return bytes(lines)


class FakeWorkers:
    """``workers`` loops that each send a result every ``workers / rate`` seconds."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.replies: dict[int, EpisodeReply] = {}

    def prepare(self, control: RunControl) -> None:
        """What the worker actors would send, built before the measured span."""
        if self.load.engine == "local":
            return
        log, frames = log_bytes(self.load.steps), self._frames()
        run_dir = control.context.run_dir
        for spec in control.specs:
            result = record(spec, self.load.steps).model_dump(mode="json")
            if self.load.engine == "ray-shared":  # the actor staged its log itself
                staged = stage_log(run_dir, spec.index, log)
                reply = EpisodeReply(result, b"", frames, "node", log_staged=staged)
            else:
                reply = EpisodeReply(result, log, frames, "node")
            self.replies[spec.index] = reply

    def _frames(self) -> dict[str, bytes]:
        return {"env.mp4": bytes(1024 * self.load.frames_kb)} if self.load.frames_kb else {}

    async def run(self, control: RunControl, dispatcher: WorkStealingDispatcher) -> None:
        async with asyncio.TaskGroup() as tasks:
            for k in range(self.load.workers):
                tasks.create_task(self._loop(control, dispatcher, k))

    async def _loop(self, control: RunControl, dispatcher: WorkStealingDispatcher, k: int) -> None:
        period = self.load.workers / self.load.rate if self.load.rate else 0.0
        due = time.monotonic() + k * period / self.load.workers
        in_flight: list[asyncio.Task[None]] = []
        ray = RayEpisodeWorkers(None)  # type: ignore[arg-type]
        while not control.cancelled and (index := dispatcher.next_for(k)) is not None:
            if period:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                due += period
            if self.load.engine != "local":
                await ray._record_reply(control, self.replies[index], Assignment(index, 1))
                continue
            result, log = self._local_episode(control, index)
            control.spend(result)
            if len(in_flight) >= MAX_IN_FLIGHT:
                await in_flight.pop(0)
            in_flight.append(asyncio.create_task(control.record(result, log)))
        for task in in_flight:
            await task

    def _local_episode(self, control: RunControl, index: int) -> tuple[EpisodeResult, EpisodeLog]:
        """What the local engine's head does for an episode's record: encode its log."""
        log = EpisodeLog(control.context.run_dir.episode_log_path(index))
        for step in range(self.load.steps):
            for node in ("policy", "env"):
                log.record(firing(step, node))
        log.finish()
        return record(control.specs[index], self.load.steps), log


async def measure(load: Load, results: int, base: Path) -> Measured:
    registry = WorkspaceComponentRegistry(workspace=base)
    registry.scan_all()
    graph = registry.load_graph(GRAPH)
    config = EvalConfig(
        graph_name=GRAPH, episode_count=results, worker_count=load.workers, record_log=True
    )
    run_id = f"{load.engine}_{load.steps}_{load.rate or 0:.0f}"
    workers = FakeWorkers(load)
    context = RunContext(registry, graph, config, RunDir(base / run_id), run_id)
    runner = BatchEvalRunner(context, workers)
    workers.prepare(runner.control)
    cpu, wall = time.process_time(), time.perf_counter()
    summary = await runner.execute()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    assert summary.status == "completed" and summary.episodes_done == results, summary.error
    return Measured(load, results, cpu, wall)


async def bench(loads: list[Load], results: int) -> list[Measured]:
    for name in ("scipy.optimize", "scipy.special"):  # the live aggregates' one-time imports
        importlib.import_module(name)

    out = []
    with tempfile.TemporaryDirectory(prefix="head_load_") as tmp:
        for n, load in enumerate(loads):
            base = Path(tmp) / str(n)
            base.mkdir()
            m = await measure(load, results, base)
            offered = f"{load.rate:.0f}/s" if load.rate else "max"
            print(
                f"  {load.engine:5} {load.steps:4} steps, {load.workers:3} workers, "
                f"offered {offered:>7}: {m.per_s:7.0f} results/s, {m.cpu_ms:6.3f} ms CPU/result",
                file=sys.stderr,
            )
            out.append(m)
    return out


def report(measured: list[Measured]) -> None:
    print("\nHead under synthetic load (results/s achieved; ms of head CPU per result)")
    print(
        f"{'engine':>6} {'steps':>5} {'workers':>7} {'frames':>6} {'offered':>8}"
        f" {'achieved':>8} {'ach/off':>7} {'CPU ms':>7}"
    )
    for m in measured:
        load = m.load
        offered = f"{load.rate:.0f}" if load.rate else "max"
        ratio = f"{m.per_s / load.rate:7.2f}" if load.rate else f"{'':7}"
        print(
            f"{load.engine:>6} {load.steps:5} {load.workers:7} {load.frames_kb:5}k {offered:>8}"
            f" {m.per_s:8.0f} {ratio} {m.cpu_ms:7.3f}"
        )
    saturated = {
        (m.load.engine, m.load.steps, m.load.workers): m for m in measured if m.load.rate is None
    }
    print("\nSaturation (offered: max): results/s, and head CPU per result of the Ray paths")
    keys = sorted({(s, w) for _, s, w in saturated})
    print(
        f"{'steps':>5} {'workers':>7} {'local/s':>8} {'ray/s':>8} {'shared/s':>8}"
        f" {'ray ms':>7} {'shared ms':>9}"
    )
    for steps, workers in keys:
        lo, ra = saturated.get(("local", steps, workers)), saturated.get(("ray", steps, workers))
        sh = saturated.get(("ray-shared", steps, workers))
        if lo and ra and sh:
            print(
                f"{steps:5} {workers:7} {lo.per_s:8.0f} {ra.per_s:8.0f} {sh.per_s:8.0f}"
                f" {ra.cpu_ms:7.3f} {sh.cpu_ms:9.3f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 results, max rate only")
    parser.add_argument("--results", type=int, default=1000)
    parser.add_argument("--workers", default="4,64")
    parser.add_argument("--steps", default="10,160")
    parser.add_argument("--rates", default="250,1000,max")
    parser.add_argument("--frames", type=int, default=0, help="KB of frames per result (ray)")
    args = parser.parse_args(argv)
    rates = [None if r == "max" else float(r) for r in args.rates.split(",")]
    results = args.results
    if args.quick:
        rates, results = [None], min(results, 300)
    loads = [
        Load(engine, int(steps), rate, int(workers), args.frames)
        for steps in args.steps.split(",")
        for workers in args.workers.split(",")
        for rate in rates
        for engine in ("local", "ray", "ray-shared")
    ]
    report(asyncio.run(bench(loads, results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
