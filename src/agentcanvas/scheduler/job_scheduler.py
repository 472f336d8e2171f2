"""JobScheduler: queue runs, admit them by measured fit, spawn and reap eval subprocesses.

``submit`` only enqueues (run folder, spec.json, shared_urls.json, summary ``queued``); a tick
(``_reap → _admit → _drain_pending_unloads``, in that order, so memory freed by a finished job
is available to admission in the same tick) does the rest. Everything here is synchronous;
the backend's lifespan drives ``tick`` about once a second and right after submit/cancel.

The queue lives on disk: a queued run is a run folder whose summary says ``queued``, so it
survives a backend restart (``recover``); a run found ``running`` without ``_DONE`` becomes
``aborted`` and can be resumed.

A Ray-engine run with a cluster address is admitted when the cluster can hold it: queuing it
asks ``cluster`` (ClusterReservations) for its placement group, admission keeps it queued
until the group is placed (its waiting reason says what for), its eval process is told the
group's id (``PLACEMENT_GROUP_ENV``), and cancel or reap releases the group. The Ray work is
done by ``cluster.refresh``, which the backend's async shell runs in a thread.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcanvas.cluster.reservations import ClusterReservations
from agentcanvas.errors import DiskFullError, RunError, RunLockedError, StateError
from agentcanvas.eval.recovery import episodes_planned
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.run_state import TERMINAL_RUN_STATUSES, RunStateError, RunStatus
from agentcanvas.eval.runlock import hold
from agentcanvas.eval.store import RunDir, check_disk_space, new_run_id
from agentcanvas.fileio import atomic_write_json, read_json
from agentcanvas.paths import safe_child
from agentcanvas.scheduler.admission import HELD_RESOURCES, JobDemand, RunningLoad, decide
from agentcanvas.scheduler.calibration import CalibrationStore
from agentcanvas.scheduler.estimates import Estimate, JobShape, estimate_job
from agentcanvas.scheduler.eval_process import child_env, spawn_eval, terminate_leader
from agentcanvas.scheduler.jobs import (
    Job,
    JobState,
    RunningJob,
    SchedulerHooks,
    queued_view,
    running_view,
)
from agentcanvas.scheduler.resources import ProcessTreeMonitor, ResourceSampler
from agentcanvas.scheduler.restart import (
    end_on_full_disk,
    mark_ended,
    read_status,
    recover_runs,
    rewrite_for_resume,
    set_status,
    settle_at_shutdown,
    settle_exited,
    write_new_run,
)

log = logging.getLogger(__name__)
CANCEL_GRACE_S = 10.0
SHUTDOWN_GRACE_S = 8.0
CALIBRATED = ("ram", "vram")  # CPU is counted by processes, never calibrated


@dataclass
class JobScheduler:
    """The queue, the running jobs, and the transitions between them."""

    runs_dir: Path
    backend_url: str
    samplers: Sequence[ResourceSampler]
    calibration: CalibrationStore
    hooks: SchedulerHooks = field(default_factory=SchedulerHooks)
    capacity_mb: dict[str, float] = field(default_factory=dict)
    cwd: Path | None = None
    queue: list[Job] = field(default_factory=list)
    running: dict[str, RunningJob] = field(default_factory=dict)
    waiting_reasons: dict[str, str] = field(default_factory=dict)
    queued_estimates: dict[str, dict[str, Estimate]] = field(default_factory=dict)
    cluster: ClusterReservations = field(default_factory=ClusterReservations)
    unwritten: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Runs that ended on a full disk before their end could be written: ``{status, error}``
    by run id, served over their files (``api.runs.RunCache``) and written by a later tick."""

    # -- submit / cancel / resume ----------------------------------------------------------
    def submit(
        self,
        spec: RunSpec,
        shared_urls: dict[str, str],
        before_queued: Callable[[Path], None] | None = None,
    ) -> str:
        """Create the run folder and queue the run; never spawns. ``before_queued(folder)``
        writes more of the folder (its meta.json) before the run is queued.

        DiskFullError (507) when the outputs disk is (nearly) full: nothing is left behind."""
        config = spec.config
        total = episodes_planned(config, spec.graph_model(source="spec graph"))
        check_disk_space(self.runs_dir, "submit a run")
        run_id = new_run_id(self.runs_dir)
        run_dir = RunDir(self.runs_dir / run_id)
        try:
            self._create_queued(run_dir, spec, shared_urls, total, before_queued)
        except DiskFullError:  # half a folder would be recovered as a queued run: remove it
            shutil.rmtree(run_dir.root, ignore_errors=True)
            raise
        return run_id

    def _create_queued(
        self,
        run_dir: RunDir,
        spec: RunSpec,
        shared_urls: dict[str, str],
        total: int,
        before_queued: Callable[[Path], None] | None,
    ) -> None:
        run_dir.create()
        with hold(run_dir):
            spec = write_new_run(run_dir, spec, shared_urls, total)
            if before_queued is not None:
                before_queued(run_dir.root)
            self._enqueue(run_dir, spec, shared_urls)

    def _enqueue(
        self, run_dir: RunDir, spec: RunSpec, shared_urls: dict[str, str] | None = None
    ) -> Job:
        """Queue a validated spec (the caller holds the run's lock). The job holds
        ``shared_urls``; the spec's other shared node sets are to be started for it: it is
        ``loading`` until :meth:`shared_loaded` (or :meth:`shared_failed`)."""
        job = Job.from_spec(run_dir, spec, shared_urls or {})
        set_status(run_dir, RunStatus.QUEUED)
        self.queue.append(job)
        if job.placement is not None and job.ray_address:
            self.cluster.want(job.run_id, job.ray_address, job.placement)
        return job

    def run_dir(self, run_id: str) -> RunDir:
        return RunDir(safe_child(self.runs_dir, "run_id", run_id, field="run_id"))

    def cancel(self, run_id: str) -> str:
        """Queued: cancelled + _DONE at once. Running: SIGINT to the eval process (it cancels
        and stops its own servers), SIGKILL to its whole group after a grace period."""
        for job in self.queue:
            if job.run_id == run_id:
                with hold(job.run_dir):
                    set_status(job.run_dir, RunStatus.CANCELLED)  # on a full disk: still queued
                    self.queue.remove(job)
                    job.run_dir.touch_done()
                self._drop(job)  # its shared servers, its placement group (placed or not)
                return "cancelled"
        running = self.running.get(run_id)
        if running is None:
            raise StateError(f"run {run_id} is neither queued nor running")
        if running.job.state is JobState.RUNNING:
            terminate_leader(running.child, signal.SIGINT)  # SIGINT: a cancel, not an abort
            running.kill_at = time.monotonic() + CANCEL_GRACE_S
            running.job.move_to(JobState.CANCELLING)
        return "cancelling"

    def resume(self, run_id: str, shared_urls: dict[str, str], shared: list[str]) -> None:
        """Re-queue an aborted/cancelled/failed run to execute only its missing episodes.

        RunLockedError (a StateError) while another process still writes the folder."""
        run_dir = self.run_dir(run_id)
        if run_id in self.running or any(j.run_id == run_id for j in self.queue):
            raise StateError(f"run {run_id} is already queued or running")
        check_disk_space(self.runs_dir, f"resume run {run_id}")
        with hold(run_dir):
            spec = rewrite_for_resume(run_dir, shared_urls, shared)
            self.unwritten.pop(run_id, None)  # an end the disk could not take: superseded
            self._enqueue(run_dir, spec, shared_urls)

    # -- shared node sets started for a job ------------------------------------------------
    def loading_jobs(self) -> list[Job]:
        """Queued jobs whose shared node sets are yet to be started (state ``loading``)."""
        return [j for j in self.queue if j.state is JobState.LOADING]

    def shared_loaded(self, run_id: str, urls: dict[str, str]) -> bool:
        """The backend started the job's shared node sets (``urls``, refcounted for it): it
        holds them and waits for admission. False when the job is no longer loading
        (cancelled meanwhile): the caller gives them back."""
        job = self._loading(run_id)
        if job is None:
            return False
        job.shared_urls |= urls
        job.loading = []
        job.move_to(JobState.QUEUED)
        return True

    def shared_failed(self, run_id: str, error: str) -> bool:
        """Its shared node sets could not be started: the run fails with ``error``."""
        job = self._loading(run_id)
        if job is None:
            return False
        with hold(job.run_dir):
            self.queue.remove(job)
            set_status(job.run_dir, RunStatus.FAILED, error)
            job.run_dir.touch_done()
        self._drop(job)
        return True

    def _loading(self, run_id: str) -> Job | None:
        return next((j for j in self.loading_jobs() if j.run_id == run_id), None)

    def finishing(self, run_id: str) -> bool:
        """Whether the run's process still runs although its summary says it ended."""
        running = self.running.get(run_id)
        return running is not None and read_status(running.job.run_dir) in TERMINAL_RUN_STATUSES

    # -- the tick --------------------------------------------------------------------------
    def tick(self) -> None:
        """_write_unwritten → _reap → _admit → _drain_pending_unloads."""
        for run_id in list(self.unwritten):
            with contextlib.suppress(RunLockedError), hold(self.run_dir(run_id)):
                self._write_unwritten(run_id)
        self._reap()
        self._admit()
        self.hooks.drain_unloads()

    def _reap(self) -> None:
        now = time.monotonic()
        for run_id, job in list(self.running.items()):
            job.monitor.poll()
            self._relay_progress(job)
            if job.child.is_alive():  # does not reap: an exited leader stays a zombie
                if job.kill_at is not None and now >= job.kill_at:
                    job.child.send_signal(signal.SIGKILL)
                continue
            # The leader has exited but is not reaped yet, so its group id is still the run's:
            # close_sync kills the group's stragglers, then reaps (no wait: it has exited).
            job.child.close_sync(term_timeout_s=0.0)
            del self.running[run_id]
            self._finish(job)

    def _finish(self, job: RunningJob) -> None:
        run_dir = job.job.run_dir
        cancelled = job.job.state is JobState.CANCELLING
        job.job.move_to(JobState.ENDED)
        try:
            with hold(run_dir):  # free: its writer has exited
                status = settle_exited(run_dir, cancelled, job.child.returncode)
        except RunLockedError as exc:  # another process writes it now: not ours to touch
            log.error("run %s: %s", job.job.run_id, exc)
            status = read_status(run_dir)
        except DiskFullError as exc:
            status = self._ended_on_full_disk(run_dir, exc)
        self._relay_progress(job, force=True)
        self.hooks.on_finished(job.job.run_id, status)
        peaks = {k: v for k, v in job.monitor.peaks_mb().items() if k in CALIBRATED}
        if peaks and status == RunStatus.COMPLETED:
            self.calibration.record(
                job.job.graph_key, job.job.worker_count, peaks, graph_name=job.job.graph_name
            )
        self.hooks.release_shared(job.job.shared_nodesets)
        self.cluster.release(job.job.run_id)  # its eval process removed it; if killed, we do
        log.info("run %s finished: %s (exit %s)", job.job.run_id, status, job.child.returncode)

    def _ended_on_full_disk(self, run_dir: RunDir, exc: DiskFullError) -> str:
        """A run's end could not be written for a full disk: ``aborted`` (resumable once
        space is freed); what the disk cannot take yet is kept in ``unwritten``."""
        log.error("run %s: %s", run_dir.root.name, exc)
        held = end_on_full_disk(run_dir, exc)
        if held is not None:
            self.unwritten[run_dir.root.name] = held
        return RunStatus.ABORTED

    def _write_unwritten(self, run_id: str) -> None:
        """Write a held end (the lock is held): the summary rebuilt from the episode
        folders with that status. Still a full disk: kept for the next tick."""
        state = self.unwritten.get(run_id)
        if state is None:
            return
        try:
            mark_ended(self.run_dir(run_id), RunStatus(state["status"]), state["error"])
        except DiskFullError:
            return
        del self.unwritten[run_id]
        log.warning("run %s: its end is written (%s)", run_id, state["status"])

    def _admit(self) -> None:
        self._fail_unreservable()
        free: dict[str, float | None] = {}
        capacity = dict(self.capacity_mb)
        for sampler in self.samplers:
            sample = sampler.sample()
            free[sampler.resource] = sample.free_mb if sample else None
            if sample and sampler.resource in HELD_RESOURCES:  # clamps noisy rate readings
                capacity.setdefault(sampler.resource, sample.total_mb)
        self.queued_estimates = {j.run_id: self._estimates(j) for j in self.queue}
        if self.queue:
            try:
                check_disk_space(self.runs_dir, "start a run")
            except DiskFullError as exc:  # queued runs wait for space: none fails for it
                self.waiting_reasons = {
                    j.run_id: f"waiting for disk space: {exc}" for j in self.queue
                }
                return
        decision = decide(
            [self._demand(j) for j in self.queue],
            [self._load(r) for r in self.running.values()],
            free,
            capacity,
            self.hooks.canvas_locked(),
        )
        self.waiting_reasons = decision.waiting
        for run_id in decision.start:
            job = next(j for j in self.queue if j.run_id == run_id)
            self.queue.remove(job)
            self._spawn(job, self.queued_estimates.pop(run_id))

    def _fail_unreservable(self) -> None:
        """A run whose cluster cannot be reached fails with the reason (resumable later)."""
        for job in list(self.queue):
            error = self.cluster.failure(job.run_id) if job.placement else None
            if error is not None:
                with hold(job.run_dir):
                    self.queue.remove(job)
                    set_status(job.run_dir, RunStatus.FAILED, error)
                    job.run_dir.touch_done()
                self._drop(job)

    def _estimates(self, job: Job) -> dict[str, Estimate]:
        resources = {s.resource for s in self.samplers} | set(self.capacity_mb)
        on_cluster = job.placement is not None
        shape = JobShape(job.graph_key, job.worker_count, job.marginal_vram_mb, on_cluster)
        return estimate_job(shape, resources, self.calibration)

    def _demand(self, job: Job) -> JobDemand:
        estimates = self.queued_estimates.get(job.run_id) or self._estimates(job)
        return JobDemand(
            job.run_id,
            job.priority,
            int(job.seq * 1e6),
            {resource: e.value for resource, e in estimates.items()},
            job.exclusive_gpu,
            waited_s=max(0.0, time.time() - job.seq),
            waits_for=job.waiting_for_models()
            or (self.cluster.waiting_for(job.run_id) if job.placement else None),
        )

    def _load(self, running: RunningJob) -> RunningLoad:
        # _reap polled every running tree a moment ago in this tick: no second walk.
        used = dict(running.monitor.last_readings or running.monitor.poll())
        job = running.job
        estimates = {resource: e.value for resource, e in running.estimates.items()}
        return RunningLoad(job.run_id, estimates, used, job.exclusive_gpu)

    def _spawn(self, job: Job, estimates: dict[str, Estimate]) -> None:
        group = self.cluster.group_id(job.run_id) if job.placement else None
        env = child_env(job.active_workspace_dir, group)
        try:
            with hold(job.run_dir):  # "running" before the eval process takes the lock
                atomic_write_json(job.run_dir.shared_urls_path, job.shared_urls)
                set_status(job.run_dir, RunStatus.RUNNING)
        except DiskFullError as exc:  # it stays queued, waiting for space
            self.queue.insert(0, job)
            self.waiting_reasons[job.run_id] = f"waiting for disk space: {exc}"
            return
        except (RunLockedError, RunStateError) as exc:
            log.error("run %s not started: %s", job.run_id, exc)
            self._drop(job)
            return
        try:
            child = spawn_eval(job.run_dir, self.backend_url, env, self.cwd)
        except Exception as exc:
            self._drop(job)
            with hold(job.run_dir):
                set_status(job.run_dir, RunStatus.FAILED, f"could not spawn: {exc}")
                job.run_dir.touch_done()
            return
        monitor = ProcessTreeMonitor(child.pid, self.samplers)
        job.move_to(JobState.RUNNING)
        self.running[job.run_id] = RunningJob(job, child, monitor, estimates, time.time())

    def _drop(self, job: Job) -> None:
        """A job out of the queue that will not run: ended, what it held given back."""
        job.move_to(JobState.ENDED)
        self.hooks.release_shared(job.shared_nodesets)
        self.cluster.release(job.run_id)

    def _relay_progress(self, job: RunningJob, force: bool = False) -> None:
        path = job.job.run_dir.summary_path
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return
        if force or mtime != job.last_summary_mtime:
            job.last_summary_mtime = mtime
            with contextlib.suppress(RunError):  # torn by a concurrent rewrite: next tick
                self.hooks.on_progress(job.job.run_id, read_json(path))

    # -- restart recovery and views --------------------------------------------------------
    def waiting_reason(self, run_id: str) -> str | None:
        """Why a queued run waits: the last tick's reason, or the models it loads (before a
        tick has seen it); None for a run that is not queued."""
        job = next((j for j in self.queue if j.run_id == run_id), None)
        loading = job.waiting_for_models() if job is not None else None
        return self.waiting_reasons.get(run_id) or loading

    def recover(self) -> list[str]:
        """Re-queue queued runs; mark ``running`` runs without ``_DONE`` aborted (summary
        reconciled with the episode folders); a broken run folder is marked failed."""
        return recover_runs(self.runs_dir, self._enqueue)

    def list_active(self) -> dict[str, list[dict[str, Any]]]:
        """``GET /api/eval/v2/queue``: queued runs in admission order, then running ones."""
        queued = [
            queued_view(
                j,
                self.waiting_reason(j.run_id) or "",
                self.queued_estimates.get(j.run_id) or self._estimates(j),
                self.cluster.view(j.run_id),
            )
            for j in sorted(self.queue, key=lambda j: (-j.priority, j.seq))
        ]
        running = [running_view(r, self.cluster.view(r.job.run_id)) for r in self.running.values()]
        return {"queued": queued, "running": running}

    def shutdown(self) -> None:
        """Stop running children (backend exit); their runs become aborted, resumable.

        The child takes the SIGTERM for a cancel and records ``cancelled`` with ``_DONE``;
        unless a user did cancel it, that is overruled here: the run was interrupted.
        """
        for job in self.running.values():
            terminate_leader(job.child, signal.SIGTERM)  # the eval process alone: it records
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        while time.monotonic() < deadline and any(
            j.child.is_alive() for j in self.running.values()
        ):
            time.sleep(0.05)
        for job in self.running.values():
            job.child.close_sync(term_timeout_s=2.0)  # then its group: leftovers
            cancelled = job.job.state is JobState.CANCELLING
            job.job.move_to(JobState.ENDED)
            try:
                with hold(job.job.run_dir):
                    settle_at_shutdown(job.job.run_dir, cancelled=cancelled)
            except (RunLockedError, RunError) as exc:
                log.error("run %s: %s", job.job.run_id, exc)
        self.running.clear()
