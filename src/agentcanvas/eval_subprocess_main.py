"""The eval subprocess: one run, cold-started from its run folder (design note § 4).

    python -m agentcanvas.eval_subprocess_main --run-dir D --backend-url U

Parent-death signal; read spec.json + shared_urls.json; a fresh registry (``scan_all``,
``register_remote_nodeset`` for each shared URL — borrowed, never stopped — then
``ensure_nodesets_for_graph(worker_count=N)``); EvalConfig; ``execute()`` with summary.json
rewritten at each episode boundary; in ``finally``: ``shutdown_all``, save, ``touch_done``.
SIGTERM cancels the run gracefully (remaining episodes are recorded ``cancelled``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from agentcanvas.eval.config import EpisodeResult, EvalConfig
from agentcanvas.eval.foreground import collect_determinism, finalise_run, record_failure
from agentcanvas.eval.live_events import EventLog, events_path
from agentcanvas.eval.records import recorded_results
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir, read_json
from agentcanvas.graph.model import parse_graph
from agentcanvas.nodes.registry import WorkspaceComponentRegistry
from agentcanvas.server import procs
from agentcanvas.server.launcher import LocalProcessLauncher
from agentcanvas.server.runtime import fix_numeric_threads


def previous_results(run_dir: RunDir, spec: dict[str, Any]) -> list[EpisodeResult]:
    """On resume: the episodes already recorded, from their episode folders (the durable
    record, whatever a crash left in the index or summary); cancelled ones run again."""
    if not spec.get("resume"):
        return []
    return [e for e in recorded_results(run_dir) if e.status != "cancelled"]


async def run(run_dir: RunDir) -> str:
    marks = {"main_started_at": time.time()}  # the scheduler knows when it spawned us
    spec = read_json(run_dir.spec_path)
    shared_urls: dict[str, str] = read_json(run_dir.shared_urls_path)
    config = EvalConfig.model_validate(spec["config"])
    registry = WorkspaceComponentRegistry(active_workspace=_overlay(spec))
    registry.scan_all()
    marks["registry_scanned_at"] = time.time()
    registry.servers.launcher = LocalProcessLauncher(log_dir=run_dir.root / "servers")
    (run_dir.root / "servers").mkdir(exist_ok=True)
    runner: BatchEvalRunner | None = None
    loop = asyncio.get_running_loop()
    try:
        for name, url in shared_urls.items():
            await registry.register_remote_nodeset(name, url)
        marks["shared_borrowed_at"] = time.time()
        graph = parse_graph(spec["graph"], source="spec.json graph")
        registry.validate(graph)
        await registry.ensure_nodesets_for_graph(graph, worker_count=config.worker_count)
        marks["servers_ready_at"] = time.time()
        runner = BatchEvalRunner(
            registry,
            graph,
            config,
            run_dir,
            run_id=run_dir.root.name,
            determinism=await collect_determinism(registry, graph),
            previous=previous_results(run_dir, spec),
            broadcast=EventLog(events_path(run_dir.root)),
        )
        runner.run.timings.update(marks)  # the cold start, phase by phase (bench/scheduler.py)
        parent = os.getppid()
        loop.add_signal_handler(
            signal.SIGTERM, lambda: runner.cancel(aborted=os.getppid() != parent)
        )
        summary = await runner.execute()
        return summary.status
    except BaseException as exc:  # also CancelledError/SystemExit: never end as "running"
        record_failure(run_dir, runner, config, exc)
        raise
    finally:
        await asyncio.shield(finalise_run(registry, runner, run_dir))


def _overlay(spec: dict[str, Any]) -> Path | None:
    value = spec.get("active_workspace_dir") or os.environ.get("ACTIVE_WORKSPACE_DIR")
    return Path(value) if value else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentcanvas.eval_subprocess_main")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--backend-url", required=True)
    args = parser.parse_args(argv)
    if os.environ.get(procs.PARENT_PID_ENV):
        procs.set_parent_death_signal()
    fix_numeric_threads()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        status = asyncio.run(run(RunDir(args.run_dir)))
    except Exception as exc:
        print(f"eval subprocess failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"run {args.run_dir.name}: {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
