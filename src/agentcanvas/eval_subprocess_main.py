"""The eval subprocess: one run, cold-started from its run folder (design note § 4).

    python -m agentcanvas.eval_subprocess_main --run-dir D --backend-url U

Parent-death signal; the run folder's writer lock (held until this process exits: a second
writer exits 1 at once, before writing anything); read spec.json + shared_urls.json; a fresh
registry (`run_setup.run_registry`), then `run_setup.prepare_run`: ``register_remote_nodeset``
for each shared URL — borrowed, never stopped — then ``ensure_nodesets_for_graph(worker_count=N)``;
EvalConfig; ``execute()`` with
summary.json rewritten at each episode boundary; in ``finally``: ``shutdown_all``, save,
``touch_done``. On resume the episodes already done are read from the episode folders.

SIGINT (the scheduler's cancel) ends the run ``cancelled``; SIGTERM (the backend stopping, or
its death: the parent-death signal) ends it ``aborted``, resumable. Either way the episodes in
flight end ``cancelled`` and those not started are left missing (one summary write, not one
per episode). When the parent is gone this process has ORPHAN_EXIT_S to finish; then it kills
its whole process group (its servers and anything they started), itself last.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from agentcanvas.cluster import select_engine
from agentcanvas.errors import RunLockedError
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.foreground import finalise_run, record_failure
from agentcanvas.eval.live_events import EventLog, events_path
from agentcanvas.eval.records import recorded_results
from agentcanvas.eval.run_setup import RunSetup, prepare_run, run_registry, scanned_catalogue
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.run_state import RunStatus
from agentcanvas.eval.runlock import RunLock
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json
from agentcanvas.server import procs
from agentcanvas.server.runtime import fix_numeric_threads

ORPHAN_EXIT_S = 3.0  # after the parent died: finish in this time, or the group is killed
LOCK_WAIT_S = 2.0  # the scheduler lets the lock go just before it spawns us


def previous_results(run_dir: RunDir, spec: RunSpec) -> list[EpisodeResult]:
    """On resume: the episodes already recorded, from their episode folders (the durable
    record, whatever a crash left in the index or summary); cancelled ones run again."""
    if not spec.resume:
        return []
    return [e for e in recorded_results(run_dir) if e.status != "cancelled"]


async def run(run_dir: RunDir, parent: int) -> str:
    marks = {"main_started_at": time.time()}  # the scheduler knows when it spawned us
    term = _Termination(parent)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, term, True)
    loop.add_signal_handler(signal.SIGINT, term, False)
    spec = RunSpec.read(run_dir)
    shared_urls: dict[str, str] = read_json(run_dir.shared_urls_path)
    config = spec.config
    engine = select_engine(config)  # engine ray: its own actors, no borrowed servers
    if engine.name == "ray":
        shared_urls = {}
    registry = run_registry(scanned_catalogue(None, _overlay(spec)), run_dir)
    marks["registry_scanned_at"] = time.time()
    try:
        graph = spec.graph_model()
        setup = RunSetup(
            run_dir,
            graph,
            config,
            shared_urls,
            broadcast=EventLog(events_path(run_dir.root)),
            previous=previous_results(run_dir, spec),
            marks=marks,
            engine=engine,
        )
        term.runner = await prepare_run(registry, setup)
        summary = await term.runner.execute()
        return summary.status
    except BaseException as exc:  # also CancelledError/SystemExit: never end as "running"
        record_failure(run_dir, term.runner, config, exc, interrupted_by="a stop signal")
        raise
    finally:
        if term.orphaned():  # nobody waits for a graceful stop: record, then end the group
            if term.runner is not None:
                _record_orphaned(term.runner, run_dir)
            _kill_own_group()
        await asyncio.shield(finalise_run(registry, term.runner, run_dir, engine))


def _record_orphaned(runner: BatchEvalRunner, run_dir: RunDir) -> None:
    """The parent died: a run it did not see end is ``aborted`` (resumable), even when a
    first parent-death signal looked like a cancel (see _Termination)."""
    run = runner.run
    if run.status in (RunStatus.RUNNING, RunStatus.CANCELLED):
        run.move_to(RunStatus.ABORTED, run.error or "the backend died while the run ran")
    runner.save()
    if run.status in (RunStatus.COMPLETED, RunStatus.FAILED):
        run_dir.touch_done()  # it ended for good just as its parent died


class _Termination:
    """SIGINT cancels the run; SIGTERM aborts it (the backend stops or died).

    The kernel sends the parent-death signal when the *thread* that forked us exits: when a
    multi-threaded backend is SIGKILLed, its forking thread may die first, we are handed to
    one of its surviving threads (same pid: not orphaned yet) and signalled, then signalled
    again once the whole process is gone. So the hard deadline is armed whenever the parent
    is gone by a signal, and ``_record_orphaned`` has the last word on the status.
    """

    def __init__(self, parent: int) -> None:
        self.parent = parent
        self.runner: BatchEvalRunner | None = None
        self.task = asyncio.current_task()

    def orphaned(self) -> bool:
        return os.getppid() != self.parent

    def __call__(self, abort: bool) -> None:
        if self.runner is None:  # still starting: nothing recorded, nothing to finish
            if self.orphaned():
                _kill_own_group()
            if self.task is not None:
                self.task.cancel()
            return
        self.runner.cancel(aborted=abort or self.orphaned())
        if self.orphaned():  # nobody will reap or clean up after us: a hard deadline
            asyncio.get_running_loop().call_later(ORPHAN_EXIT_S, _kill_own_group)


def _kill_own_group() -> None:
    """SIGKILL this process group (servers, their helpers, then us), if we lead it."""
    sys.stdout.flush()
    sys.stderr.flush()
    for child in procs.descendants_alive(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os._exit(1)


def _overlay(spec: RunSpec) -> Path | None:
    value = spec.active_workspace_dir or os.environ.get("ACTIVE_WORKSPACE_DIR")
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
    parent = os.getppid()
    run_dir = RunDir(args.run_dir)
    lock = RunLock(run_dir)
    try:
        lock.acquire(LOCK_WAIT_S)  # held until we exit; the kernel drops it if we die
    except RunLockedError as exc:
        print(f"eval subprocess refused: {exc}", file=sys.stderr)
        return 1
    try:
        status = asyncio.run(run(run_dir, parent))
    except Exception as exc:
        print(f"eval subprocess failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        lock.release()
    print(f"run {args.run_dir.name}: {status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
