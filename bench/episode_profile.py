"""Where one episode's fixed cost goes: time per phase per episode at W = 1, next to the total.

    .venv/bin/python bench/episode_profile.py [--quick] [--episodes N] [--cprofile TOP]

The episodes of ``bench/episode_cost.py`` (its graph: ``babyai_oracle`` with no step latency,
one ``env_minigrid`` server, the BFS planner in-process), run as ``agentcanvas eval`` runs
them (``run_setup.run_registry``, ``run_foreground``), twice in the same process:

- ``plain``: as shipped, for the total wall time per episode;
- ``timed``: the same run with the phases below wrapped in ``time.perf_counter`` (the
  wrappers are installed here, in the bench, and removed after; nothing in the package
  changes). Its records must equal the plain run's (``same records``), durations apart.

Phases (ms per episode, calls per episode). ``path``: on the worker's episode path, in
order; ``thread``: written in a thread while the next episode runs (they overlap the path,
so they do not add up with it):

    path    panel round trip        eval.episode.set_episode (reset, fields, play, load: 1 rpc,
                                    which also carries the opening env call: its answer is
                                    claimed by the first of the env node calls below)
    path    env node calls          RemoteNodeSet.call (env_minigrid.step over the rpc socket)
    path    in-process node calls   LocalNodeSet.call (planner.navigate, core.graphOut)
    path    firing-log entries      GraphExecutor._record less the write (summaries of values)
    path    firing-log writes       episode_log.EpisodeLog.record (encode; a write past 256 KiB)
    path    firing-log timed flush  episode_log.EpisodeLog._timed (a write 10 ms after a firing)
    path    evictions               eval.episode._evict (skipped after the first answer)
    path    frames check            media.AttemptFrames.finish (the recording kept or dropped)
    path    record encoding         RunRecorder._encode (episode.json and the index line,
                                    encoded on the loop: the recording thread then holds the
                                    GIL only between its syscalls)
    path    rest of run_episode     run_episode less the phases inside it (executor, tasks)
    path    rest of the worker      wall per episode less run_episode and the path phases
                                    outside it (dispatch, retries, recording hand-off)
    thread  episode.json write      record_writer.GroupCommitWriter._commit less the three
                                    below (a group of episodes: atomic writes, one syncfs)
    thread  episode folder          RunDir.create_episode
    thread  firing-log rest         episode_log.EpisodeLog.write_rest (what is left, one write)
    thread  index append            records.append_line (episodes.jsonl, one write)
    thread  live summary save       RunRecorder.save while running (atomic, no fsync)
    thread  live aggregates         recorder._aggregates (the owned refresher, rate-bounded)

``env work in-process`` replays the timed run's env calls (the panel fields ``set_episode``
sent, then each ``env.step`` firing's inputs from the episode's log.jsonl) on an in-process
``env_minigrid`` instance, synchronously: what the simulator itself costs, so that the panel
round trip and env node calls above split into the env's work and what the server and the
rpc add.

``--cprofile TOP`` also runs the episodes under cProfile (main thread) and prints the TOP
functions by own time, grouped by function.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import functools
import inspect
import io
import os
import pstats
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scaling  # the bench folder is not a package
from agentcanvas.eval import episode as episode_mod
from agentcanvas.eval import local_workers, media, record_writer, recorder, records
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.episode_log import EpisodeLog
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.run_setup import new_run_dir, run_registry
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_jsonl
from agentcanvas.graph.executor import GraphExecutor
from agentcanvas.nodes.base import CallContext, LocalNodeSet, NodeSetHandle, start_episode
from agentcanvas.paths import runs_dir
from agentcanvas.server.proxy import RemoteNodeSet
from agentcanvas.server.registry import WorkspaceComponentRegistry

GRAPH_NAME = "bench_episode_profile"


@dataclass
class Phases:
    """Seconds and calls per phase, from any thread."""

    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, elapsed_s: float) -> None:
        with self.lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + elapsed_s
            self.calls[name] = self.calls.get(name, 0) + 1


def _timed(phases: Phases, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                phases.add(name, time.perf_counter() - started)

        return timed_async

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            phases.add(name, time.perf_counter() - started)

    return timed


def _live_save(phases: Phases, save: Callable[[Any], None]) -> Callable[[Any], None]:
    """``save`` timed only while the run is running (the final, complete summary apart)."""

    @functools.wraps(save)
    def timed(self: Any) -> None:
        started = time.perf_counter()
        try:
            save(self)
        finally:
            if self.run.status == "running":
                phases.add("live summary save", time.perf_counter() - started)

    return timed


PATCHES: list[tuple[Any, str, str]] = [  # (owner, attribute, phase)
    (RunDir, "create_episode", "episode folder"),
    (episode_mod, "set_episode", "panel round trip"),
    (RemoteNodeSet, "call", "env node calls"),
    (LocalNodeSet, "call", "in-process node calls"),
    (GraphExecutor, "_record", "firing-log entries+writes"),
    (EpisodeLog, "record", "firing-log writes"),
    (EpisodeLog, "_timed", "firing-log timed flush"),
    (EpisodeLog, "write_rest", "firing-log rest"),
    (episode_mod, "_evict", "evictions"),
    (media.AttemptFrames, "finish", "frames check"),
    (local_workers, "run_episode", "run_episode"),
    (recorder.RunRecorder, "_encode", "record encoding"),
    (record_writer.GroupCommitWriter, "_commit", "episode.json write"),
    (records, "append_line", "index append"),
    (recorder, "_aggregates", "live aggregates"),
]


@contextlib.contextmanager
def instrumented(phases: Phases) -> Iterator[None]:
    """Install the timing wrappers; put every original back on exit."""
    originals = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in PATCHES]
    save = recorder.RunRecorder.save
    try:
        for owner, attr, name in PATCHES:
            setattr(owner, attr, _timed(phases, name, getattr(owner, attr)))
        setattr(recorder.RunRecorder, "save", _live_save(phases, save))  # noqa: B010
        yield
    finally:
        for owner, attr, original in originals:
            setattr(owner, attr, original)
        setattr(recorder.RunRecorder, "save", save)  # noqa: B010


async def one_run(workspace: Path, n_per_task: int) -> EvalRun:
    """A W = 1 run of the bench graph, as ``agentcanvas eval`` runs it."""
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    config = EvalConfig(
        graph_name=GRAPH_NAME, episode_count=n_per_task, worker_count=1, seed=scaling.RUN_SEED
    )
    run_dir = new_run_dir(runs_dir(workspace))
    run = await run_foreground(
        run_registry(registry.catalogue, run_dir),
        registry.load_graph(GRAPH_NAME),
        config,
        run_dir=run_dir,
    )
    if run.summary.status_counts != {"completed": run.summary.episodes_total}:
        raise RuntimeError(f"the run did not complete: {run.summary.status_counts}")
    return run.summary


def wall_s(summary: EvalRun) -> float:
    started, finished = summary.timings["started_at"], summary.timings["finished_at"]
    assert started is not None and finished is not None
    return float(finished - started)


def records_of(summary: EvalRun) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json", exclude={"duration_s"}) for e in summary.episodes]


class _Fields:
    """A stand-in env handle that keeps the fields ``set_episode`` would send."""

    def __init__(self, manifest: Any) -> None:
        self.manifest = manifest
        self.fields: list[tuple[str, Any]] = []

    async def panel_episode(self, fields: list[tuple[str, Any]]) -> None:
        self.fields = fields


def env_work(workspace: Path, summary: EvalRun) -> tuple[float, float]:
    """(panel, steps) seconds of the run's env calls replayed on an in-process instance."""
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    graph = registry.load_graph(GRAPH_NAME)
    assert graph.env is not None
    instance = LocalNodeSet(registry.nodeset(graph.env.nodeset))
    run_dir = RunDir(runs_dir(workspace) / summary.run_id)
    panel_s = steps_s = 0.0
    try:
        for result in summary.episodes:
            spec = episode_mod.EpisodeSpec(
                result.index, result.task, result.episode_index, result.seed, key=str(result.index)
            )
            sent = _Fields(instance.manifest)
            # a stand-in for the one method set_episode calls (no server, no panel of its own)
            asyncio.run(episode_mod.set_episode(cast(NodeSetHandle, sent), graph, spec, False))
            assert instance.panel is not None
            started = time.perf_counter()
            start_episode(instance.panel, sent.fields)
            panel_s += time.perf_counter() - started
            for line in read_jsonl(run_dir.episode_log_path(result.index)).records:
                if line["node"] != "env":
                    continue
                ctx = CallContext("env", int(line["step"]), spec.key, spec.seed, spec.task)
                started = time.perf_counter()
                instance.call_sync("step", {}, dict(line["inputs"]), ctx)
                steps_s += time.perf_counter() - started
    finally:
        asyncio.run(instance.close())
    return panel_s, steps_s


def profiled(workspace: Path, n_per_task: int, top: int) -> str:
    """The run under cProfile (main thread): the ``top`` functions by own time."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        asyncio.run(one_run(workspace, n_per_task))
    finally:
        profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 episodes")
    parser.add_argument("--episodes", type=int, help="episodes per run (default 200)")
    parser.add_argument("--cprofile", type=int, default=0, metavar="TOP", help="also cProfile")
    args = parser.parse_args()
    n_total = args.episodes or (60 if args.quick else 200)
    n_per_task = max(1, n_total // len(scaling.TASKS))
    warnings.filterwarnings("ignore")
    phases = Phases()
    with tempfile.TemporaryDirectory(prefix="bench_episode_profile_") as tmp:
        workspace = Path(tmp)
        os.environ["AGENTCANVAS_HOME"] = str(workspace)
        scaling.write_graph(workspace, GRAPH_NAME, 0.0)
        asyncio.run(one_run(workspace, 1))  # warm: imports, caches, the page cache
        plain = asyncio.run(one_run(workspace, n_per_task))
        with instrumented(phases):
            timed = asyncio.run(one_run(workspace, n_per_task))
        local = env_work(workspace, timed)
        report = profiled(workspace, n_per_task, args.cprofile) if args.cprofile else ""
    _print(plain, timed, phases, local)
    if report:
        print(f"\ncProfile of a third run, main thread, top {args.cprofile} by own time:")
        print(report)
    return 0


PATH_ORDER = [
    "panel round trip",
    "env node calls",
    "in-process node calls",
    "firing-log entries",
    "firing-log writes",
    "firing-log timed flush",
    "evictions",
    "frames check",
    "record encoding",
    "rest of run_episode",
    "rest of the worker",
]
THREAD_ORDER = [
    "episode.json write",
    "episode folder",
    "firing-log rest",
    "index append",
    "live summary save",
    "live aggregates",
]


def _derived(phases: Phases, wall: float) -> dict[str, float]:
    """Seconds per phase, the nested ones split out."""
    s = dict(phases.seconds)
    s["firing-log entries"] = s.get("firing-log entries+writes", 0.0) - s.get(
        "firing-log writes", 0.0
    )
    inside = ["panel round trip", "env node calls", "in-process node calls"]
    inside += ["firing-log entries", "firing-log writes", "firing-log timed flush", "evictions"]
    s["episode.json write"] = (
        s.get("episode.json write", 0.0)
        - s.get("episode folder", 0.0)
        - s.get("firing-log rest", 0.0)
        - s.get("index append", 0.0)
    )
    s["rest of run_episode"] = s.get("run_episode", 0.0) - sum(s.get(p, 0.0) for p in inside)
    outside = ["frames check", "record encoding"]
    s["rest of the worker"] = wall - s.get("run_episode", 0.0) - sum(s.get(p, 0.0) for p in outside)
    return s


def _print(plain: EvalRun, timed: EvalRun, phases: Phases, local: tuple[float, float]) -> None:
    n = plain.episodes_total
    steps = sum(int(e.metrics["steps"] or 0) for e in plain.episodes)
    same = records_of(plain) == records_of(timed)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{n} episodes of {', '.join(scaling.TASKS)}, W = 1, no latency, {steps / n:.1f} actions "
        f"per episode; same records plain and timed: {same}; load average (1 min) {load:.2f}; "
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    seconds = _derived(phases, wall_s(timed))
    calls = {**phases.calls, "firing-log entries": phases.calls.get("firing-log writes", 0)}
    head = f"{'':6} {'phase':<24} {'ms/ep':>7} {'calls/ep':>8} {'share':>6}"
    print(head)
    print("-" * len(head))
    total_ms = 1000 * wall_s(timed) / n
    for kind, order in (("path", PATH_ORDER), ("thread", THREAD_ORDER)):
        for name in order:
            ms = 1000 * seconds.get(name, 0.0) / n
            n_calls = calls.get(name)
            per_ep = f"{n_calls / n:>8.2f}" if n_calls is not None else f"{'':>8}"
            print(f"{kind:6} {name:<24} {ms:>7.3f} {per_ep} {ms / total_ms:>6.1%}")
    print("-" * len(head))
    panel_ms, steps_ms = (1000 * x / n for x in local)
    print(f"{'local':6} {'env work in-process':<24} {panel_ms + steps_ms:>7.3f}")
    print(
        f"{'':6} {'  of it panel':<24} {panel_ms:>7.3f}  (round trip above: server + rpc adds ",
        end="",
    )
    print(f"{1000 * seconds.get('panel round trip', 0.0) / n - panel_ms:.3f})")
    calls_ms = 1000 * seconds.get("env node calls", 0.0) / n
    print(
        f"{'':6} {'  of it steps':<24} {steps_ms:>7.3f}  (env node calls above: server + rpc adds ",
        end="",
    )
    print(f"{calls_ms - steps_ms:.3f})")
    print("-" * len(head))
    plain_ms = 1000 * wall_s(plain) / n
    print(f"{'total':6} {'wall per episode, timed':<24} {total_ms:>7.3f}")
    print(f"{'total':6} {'wall per episode, plain':<24} {plain_ms:>7.3f}")
    print(
        f"timed / plain = {total_ms / plain_ms:.2f}x (what the wrappers themselves cost); "
        "share: of the timed wall per episode; thread phases overlap the path"
    )


if __name__ == "__main__":
    raise SystemExit(main())
