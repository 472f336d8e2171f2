"""The scheduler's writes into run folders it does not run, and ``recover`` at start-up.

Every write here happens under the run folder's writer lock (:mod:`agentcanvas.eval.runlock`):
a folder whose lock a living process holds is never written. A run that ended without its
final word (killed, crashed, its backend gone) gets its summary rebuilt from its episode
folders (:func:`~agentcanvas.eval.recovery.reconcile_summary`), so the two agree.

``recover`` never lets one run folder stop the backend: whatever is wrong with a folder (a
spec.json that no longer validates, is not JSON or has ``null`` where a number must be), that
run is marked ``failed`` with the reason and start-up goes on. An unreadable summary.json is
rebuilt from spec.json and the episode folders (``aborted``, resumable).

summary.json is only written here as an :class:`~agentcanvas.eval.config.EvalRun`, and its
status only moves through :mod:`~agentcanvas.eval.run_state` (``EvalRun.move_to``): a move the
run's lifecycle does not have is a ``RunStateError``. A summary that does not read back as an
``EvalRun`` is rebuilt before it is written: from spec.json and the episode folders
(:func:`~agentcanvas.eval.recovery.reconcile_summary`), else — spec.json unreadable too — as
a minimal summary (:func:`minimal_summary`): the run id, the graph name when some file still
says it, a config of that name with every default, and the records of the episode folders.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from agentcanvas.errors import (
    AgentCanvasError,
    DiskFullError,
    RunError,
    RunLockedError,
    StateError,
)
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.recovery import (
    drop_cancelled_episodes,
    episode_records,
    episodes_planned,
    reconcile_summary,
    refresh_counts,
)
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.run_state import TERMINAL_RUN_STATUSES, RunStatus
from agentcanvas.eval.runlock import hold
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json, read_json
from agentcanvas.paths import check_name

__all__ = [
    "RECOVER_LOCK_WAIT_S",
    "end_on_full_disk",
    "mark_ended",
    "mark_failed",
    "minimal_summary",
    "read_status",
    "recover_runs",
    "rewrite_for_resume",
    "set_status",
    "settle_at_shutdown",
    "settle_exited",
    "write_new_run",
]

log = logging.getLogger(__name__)
# Orphans of a backend killed just before: they finish (or are killed) within 5 s.
RECOVER_LOCK_WAIT_S: Final = 6.0


def set_status(run_dir: RunDir, status: RunStatus, error: str | None = None) -> None:
    """Move summary.json's run to ``status`` (RunStateError when its lifecycle has no such
    move), keeping everything else; ``error`` replaces the run's error when given. The lock
    is held. A summary that does not read back is rebuilt first (RunError when even
    spec.json cannot be read: see :func:`mark_failed` for a run that must end anyway)."""
    try:
        run = _typed_summary(run_dir)
    except AgentCanvasError as exc:
        raise RunError(f"run {run_dir.root.name}: no readable summary.json: {exc}") from exc
    if error is None:
        run.move_to(status)
    else:
        run.move_to(status, error)
    write_summary(run_dir, run)


def write_new_run(
    run_dir: RunDir, spec: RunSpec, shared_urls: dict[str, str], total: int
) -> RunSpec:
    """A submitted run's files (the lock is held): spec.json with its run id and submit
    time, shared_urls.json, and a ``pending`` summary of ``total`` episodes; the spec."""
    submitted_at = spec.scheduling.submitted_at or time.time()
    scheduling = spec.scheduling.model_copy(update={"submitted_at": submitted_at})
    spec = spec.model_copy(update={"run_id": run_dir.root.name, "scheduling": scheduling})
    spec.write(run_dir)
    atomic_write_json(run_dir.shared_urls_path, shared_urls)
    config = spec.config
    run = EvalRun(
        run_id=run_dir.root.name, graph_name=config.graph_name, config=config, episodes_total=total
    )
    write_summary(run_dir, run)
    return spec


def rewrite_for_resume(run_dir: RunDir, shared_urls: dict[str, str], shared: list[str]) -> RunSpec:
    """A run to be queued again for its missing episodes (the lock is held): its spec says
    ``resume`` and borrows ``shared``, no ``_DONE``, no cancelled episode folder, and its
    summary, rebuilt from the episode folders, says ``queued``. StateError for a completed
    run (nothing to resume); the spec."""
    if read_status(run_dir) == RunStatus.COMPLETED:
        raise StateError(f"run {run_dir.root.name} is completed; nothing to resume")
    spec = RunSpec.read(run_dir)
    scheduling = spec.scheduling.model_copy(update={"submitted_at": time.time()})
    update = {"shared_nodesets": shared, "scheduling": scheduling, "resume": True}
    spec = spec.model_copy(update=update)
    spec.write(run_dir)
    atomic_write_json(run_dir.shared_urls_path, shared_urls)
    run_dir.done_path.unlink(missing_ok=True)
    drop_cancelled_episodes(run_dir)  # run again: no stale record may outlive it
    mark_ended(run_dir, RunStatus.QUEUED, None)  # agrees with the episode folders
    return spec


def write_summary(run_dir: RunDir, run: EvalRun) -> None:
    """summary.json, atomically, from its model (the lock is held)."""
    atomic_write_json(run_dir.summary_path, run.model_dump(mode="json"))


def _typed_summary(run_dir: RunDir) -> EvalRun:
    """summary.json as read; when it does not validate, rebuilt from spec.json and the
    episode folders (RunError or ConfigError when spec.json cannot be read either)."""
    try:
        return EvalRun.model_validate(read_json(run_dir.summary_path))
    except (RunError, ValidationError):
        return reconcile_summary(run_dir)


def read_status(run_dir: RunDir) -> str:
    """summary.json's status; ``pending`` when it cannot be read."""
    try:
        return str(read_json(run_dir.summary_path).get("status", "pending"))
    except (RunError, AttributeError):
        return "pending"


def settle_exited(run_dir: RunDir, cancelled: bool, returncode: int | None) -> str:
    """The final status of a run whose eval process has exited (lock held): its own, or
    ``cancelled``/``aborted`` with the summary rebuilt when it could not write it."""
    status = read_status(run_dir)
    if not run_dir.is_done() and _final_summary_written(run_dir):
        run_dir.touch_done()  # killed between its final summary and _DONE: it had ended
        return status
    if not run_dir.is_done():
        ended = RunStatus.CANCELLED if cancelled else RunStatus.ABORTED
        mark_ended(run_dir, ended, f"the eval process exited ({returncode}) before the run ended")
        if cancelled:
            run_dir.touch_done()
        return ended
    if status not in TERMINAL_RUN_STATUSES:  # _DONE without a final status
        set_status(run_dir, RunStatus.FAILED, "the eval process ended without a final status")
        return RunStatus.FAILED
    return status


def end_on_full_disk(run_dir: RunDir, exc: DiskFullError) -> dict[str, Any] | None:
    """A run's end could not be written for a full disk: it is ``aborted``. The eval
    process's own last word (``aborted`` with the reason, written in the space its
    ``_RESERVE`` held) stands; else its status is rewritten in that space (the lock is
    taken here); else the end to write later, when the disk can take it, is returned
    (``{status, error}``: the scheduler keeps it, and status and listing show it)."""
    if read_status(run_dir) == RunStatus.ABORTED:
        return None
    error = f"the run ended on a full disk: {exc}"
    with hold(run_dir):
        run_dir.release_reserve()
        try:
            set_status(run_dir, RunStatus.ABORTED, error)
        except RunError:
            return {"status": RunStatus.ABORTED, "error": error}
    return None


def _final_summary_written(run_dir: RunDir) -> bool:
    """Whether summary.json is a run's final word: a terminal status that is not resumable
    (aborted is), with every record (``episodes_complete``)."""
    try:
        summary = read_json(run_dir.summary_path)
    except RunError:
        return False
    if not isinstance(summary, dict):
        return False
    final = summary.get("status") in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
    return final and summary.get("episodes_complete") is True


def settle_at_shutdown(run_dir: RunDir, cancelled: bool) -> None:
    """The backend stops: a run it did not cancel becomes ``aborted``, resumable (lock held)."""
    if cancelled:
        if not run_dir.is_done():
            mark_ended(run_dir, RunStatus.CANCELLED, None)
            run_dir.touch_done()
    elif read_status(run_dir) not in (RunStatus.COMPLETED, RunStatus.FAILED):
        mark_ended(run_dir, RunStatus.ABORTED, "the backend stopped while it ran")
        run_dir.done_path.unlink(missing_ok=True)


def mark_ended(run_dir: RunDir, status: RunStatus, error: str | None) -> None:
    """The run ended as ``status`` without writing so itself: its summary is rebuilt from
    the episode folders (the lock is held). ``error`` is kept from the run when it has one."""
    try:
        run = reconcile_summary(run_dir)
    except AgentCanvasError as exc:  # neither summary nor spec readable
        mark_failed(run_dir, f"cannot rebuild the summary: {exc}")
        return
    if not (run.status == status and run.error):
        run.error = error
    run.move_to(status)
    write_summary(run_dir, run)


def mark_failed(run_dir: RunDir, reason: str) -> None:
    """``failed`` with ``reason`` and ``_DONE``, even when summary.json is unreadable: it is
    then rebuilt from spec.json and the episode folders, else written minimal."""
    try:
        run = _typed_summary(run_dir)
    except AgentCanvasError:  # spec.json unreadable too
        run = minimal_summary(run_dir)
    run.move_to(RunStatus.FAILED, reason)
    write_summary(run_dir, run)
    run_dir.touch_done()


def minimal_summary(run_dir: RunDir) -> EvalRun:
    """A ``pending`` summary for a run whose summary.json and spec.json are both beyond
    reading: its id, its graph name if either file still names one (else ``unknown``), a
    config of that name with every default, and whatever its episode folders record."""
    graph_name = _salvaged_graph_name(run_dir) or "unknown"
    records = episode_records(run_dir)
    run = EvalRun(
        run_id=run_dir.root.name,
        graph_name=graph_name,
        config=EvalConfig(graph_name=graph_name),
        episodes_total=len(records),
    )
    refresh_counts(run, records)
    return run


def _salvaged_graph_name(run_dir: RunDir) -> str | None:
    for path, keys in ((run_dir.summary_path, ("graph_name",)), (run_dir.spec_path, ())):
        try:
            data = read_json(path)
        except RunError:
            continue
        if not isinstance(data, dict):
            continue
        config = data.get("config")
        name = data.get(keys[0]) if keys else (config or {}).get("graph_name")
        if isinstance(name, str) and name.strip():
            return name[:64]
    return None


def recover_runs(runs_dir: Path, enqueue: Callable[[RunDir, RunSpec], Any]) -> list[str]:
    """Re-queue queued runs (``enqueue``); mark ``running`` runs without ``_DONE`` aborted,
    their summaries reconciled with their episode folders. Returns the re-queued run ids."""
    requeued: list[str] = []
    if not runs_dir.is_dir():
        return requeued
    deadline = time.monotonic() + RECOVER_LOCK_WAIT_S
    for folder in sorted(p for p in runs_dir.iterdir() if p.is_dir() and _is_run_id(p.name)):
        run_dir = RunDir(folder)
        if not _needs_recovery(run_dir):
            continue
        try:
            with hold(run_dir, wait_s=max(0.0, deadline - time.monotonic())):
                if _recover_one(run_dir, enqueue):
                    requeued.append(folder.name)
        except RunLockedError as exc:  # a living process still writes it: not ours to touch
            log.warning("run %s left as it is: %s", folder.name, exc)
        except Exception as exc:  # one bad run folder never stops the backend
            log.error("run %s cannot be recovered, marked failed: %s", folder.name, exc)
            _fail_quietly(run_dir, f"could not be recovered after a restart: {exc}")
    return requeued


def _is_run_id(name: str) -> bool:
    try:
        check_name("run_id", name)
    except AgentCanvasError:
        return False
    return True


def _needs_recovery(run_dir: RunDir) -> bool:
    if run_dir.is_done():
        return False
    if not run_dir.summary_path.exists():
        return run_dir.spec_path.exists()  # submit died between its two writes
    try:
        status = read_json(run_dir.summary_path).get("status")
    except (RunError, AttributeError):
        return True  # unreadable: recovered as failed
    return status in ("pending", "queued", "running")


def _recover_one(run_dir: RunDir, enqueue: Callable[[RunDir, RunSpec], Any]) -> bool:
    if not run_dir.summary_path.exists():
        spec = RunSpec.read(run_dir)
        _write_queued_summary(run_dir, spec)
        enqueue(run_dir, spec)
        return True
    try:
        summary = read_json(run_dir.summary_path)
    except RunError:  # rebuilt from spec.json and the episode folders (failed if it cannot)
        mark_ended(
            run_dir, RunStatus.ABORTED, "summary.json was unreadable; rebuilt from the episodes"
        )
        return False
    if not isinstance(summary, dict):
        raise RunError(f"{run_dir.summary_path} is not a JSON object")
    status = summary.get("status")
    if status in ("pending", "queued"):
        enqueue(run_dir, RunSpec.read(run_dir))
        return True
    if status == "running":
        mark_ended(run_dir, RunStatus.ABORTED, "the backend restarted while it ran")
    return False


def _write_queued_summary(run_dir: RunDir, spec: RunSpec) -> None:
    config = spec.config
    graph = spec.graph_model(source=f"{run_dir.spec_path} graph")
    run = EvalRun(
        run_id=run_dir.root.name,
        graph_name=config.graph_name,
        config=config,
        episodes_total=episodes_planned(config, graph),
    )
    run.move_to(RunStatus.QUEUED)
    write_summary(run_dir, run)


def _fail_quietly(run_dir: RunDir, reason: str) -> None:
    try:
        with hold(run_dir):
            mark_failed(run_dir, reason)
    except Exception:  # even this folder's files are beyond repair: log, go on
        log.exception("run %s: could not even mark it failed", run_dir.root.name)
