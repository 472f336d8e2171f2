"""JobScheduler driven directly, tick by tick, on a real run folder tree.

Submit, cancel, resume and recover need no process. Admission that starts a run spawns a real
eval subprocess, which the test cancels at once. VRAM comes from ``FakeVramSampler`` (via
``AGENTCANVAS_FAKE_VRAM_MB``, as on a machine without a GPU): memory registered for a pid is
freed when that process dies, as on a device.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentcanvas.errors import StateError
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.fileio import atomic_write_json, read_json
from agentcanvas.scheduler.calibration import CalibrationStore, graph_fingerprint
from agentcanvas.scheduler.cpu import CpuSampler, cpu_cores
from agentcanvas.scheduler.eval_process import EVAL_NICENESS
from agentcanvas.scheduler.job_scheduler import JobScheduler
from agentcanvas.scheduler.resources import (
    FAKE_VRAM_ENV,
    FakeVramSampler,
    NvmlVramSampler,
    RamSampler,
)
from agentcanvas.scheduler.samplers import default_samplers
from support.polling import poll_until
from support.scheduling import Released, status_of

DEADLINE_S = 60.0
CPU_REASON = re.compile(
    r"^waiting for CPU: this run asks for 2 cores, [0-9.]+ (is|are) free \(.+\); it starts at "
    r"the latest when no other run of this queue is running$"
)


def cancel_and_reap(scheduler: JobScheduler, run_id: str) -> None:
    assert scheduler.cancel(run_id) == "cancelling"

    def reaped() -> bool:
        scheduler.tick()
        return run_id not in scheduler.running

    poll_until(reaped, f"{run_id} to be reaped", DEADLINE_S)
    # A run whose every episode finished before the cancel landed is completed.
    assert status_of(scheduler, run_id) in ("cancelled", "completed")
    assert scheduler.run_dir(run_id).is_done()


# -- submit, cancel, resume, recover (no process) --------------------------------------------
def test_submit_writes_the_run_folder_and_never_spawns(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    scheduler = new_scheduler()
    urls = {"policy_mlp": "http://127.0.0.1:1234"}

    run_id = scheduler.submit(make_spec(shared=("policy_mlp",), priority=3), urls)

    folder = scheduler.run_dir(run_id)
    spec = read_json(folder.spec_path)
    assert spec["run_id"] == run_id and spec["scheduling"]["priority"] == 3
    assert isinstance(spec["scheduling"]["submitted_at"], float)
    assert read_json(folder.shared_urls_path) == urls
    summary = read_json(folder.summary_path)
    assert summary["status"] == "queued" and summary["graph_name"] == "babyai_oracle"
    assert scheduler.running == {}
    assert not folder.stdout_path.exists() and not folder.is_done()
    assert [j["run_id"] for j in scheduler.list_active()["queued"]] == [run_id]


def test_run_ids_take_a_collision_suffix(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    scheduler = new_scheduler()
    now = datetime.now()
    for offset_s in range(-1, 10):  # claim the plain ids of the seconds around this test
        stamp = (now + timedelta(seconds=offset_s)).strftime("%Y%m%d_%H%M%S")
        (scheduler.runs_dir / stamp).mkdir(parents=True, exist_ok=True)

    first = scheduler.submit(make_spec(), {})
    second = scheduler.submit(make_spec(), {})

    assert first != second
    for run_id in (first, second):
        stamp, _, suffix = run_id.rpartition("_")
        assert suffix.isdigit() and int(suffix) >= 1 and len(stamp) == 15, run_id


def test_cancel_of_a_queued_run_is_final_at_once(
    new_scheduler: Callable[..., JobScheduler],
    make_spec: Callable[..., RunSpec],
    released: Released,
) -> None:
    scheduler = new_scheduler(canvas_locked=lambda: True)  # nothing is admitted
    run_id = scheduler.submit(make_spec(shared=("policy_mlp",)), {"policy_mlp": "http://x"})
    scheduler.tick()

    assert scheduler.cancel(run_id) == "cancelled"

    assert status_of(scheduler, run_id) == "cancelled"
    assert scheduler.run_dir(run_id).is_done()
    assert scheduler.queue == [] and released.calls == [["policy_mlp"]]
    with pytest.raises(StateError, match="neither queued nor running"):
        scheduler.cancel(run_id)


def test_a_ray_run_on_a_cluster_waits_for_its_placement_group(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    """Queued, it asks for its group and is not admitted until the group is placed (no
    refresh runs here: nothing touches Ray); this host counts its eval process only, and its
    calibration is not a local run's. Cancel releases the reservation."""
    scheduler = new_scheduler(samplers=[RamSampler(), CpuSampler(1.0)])
    local = make_spec(worker_count=3)
    config = local.config.model_copy(update={"engine": "ray", "ray_address": "127.0.0.1:1"})
    run_id = scheduler.submit(local.model_copy(update={"config": config}), {})

    scheduler.tick()

    (entry,) = scheduler.list_active()["queued"]
    assert scheduler.running == {}
    assert entry["waiting_reason"].startswith("ray: connecting to 127.0.0.1:1")
    assert entry["placement"]["bundles"] == [{"CPU": 1.0}] * 3
    assert entry["placement"]["state"] == "connecting"
    assert entry["estimates"]["cpu"]["value"] == 1.0  # its workers are on the cluster
    assert entry["estimates"]["ram"]["value"] == 600.0
    (job,) = scheduler.queue
    assert job.graph_key == graph_fingerprint(local.graph) + "+ray-cluster"
    assert scheduler.cancel(run_id) == "cancelled"
    assert scheduler.cluster.get(run_id) is None and not scheduler.cluster.busy()


def test_canvas_lock_refuses_admission(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    scheduler = new_scheduler(canvas_locked=lambda: True)
    run_id = scheduler.submit(make_spec(), {})

    scheduler.tick()

    assert scheduler.running == {}
    assert "canvas" in scheduler.waiting_reasons[run_id]
    assert (
        scheduler.list_active()["queued"][0]["waiting_reason"] == scheduler.waiting_reasons[run_id]
    )


def test_queue_view_is_in_admission_order(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    scheduler = new_scheduler(canvas_locked=lambda: True)
    low = scheduler.submit(make_spec(priority=-1), {})
    first = scheduler.submit(make_spec(), {})
    high = scheduler.submit(make_spec(priority=5), {})
    second = scheduler.submit(make_spec(), {})

    order = [j["run_id"] for j in scheduler.list_active()["queued"]]

    assert order == [high, first, second, low]


def test_recover_requeues_queued_runs_and_aborts_interrupted_ones(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    before = new_scheduler(canvas_locked=lambda: True)
    queued = before.submit(make_spec(priority=2), {})
    interrupted = before.submit(make_spec(), {})
    finished = before.submit(make_spec(), {})
    for run_id, status in ((interrupted, "running"), (finished, "completed")):
        folder = before.run_dir(run_id)
        atomic_write_json(folder.summary_path, {**read_json(folder.summary_path), "status": status})
    before.run_dir(finished).touch_done()

    after = new_scheduler(canvas_locked=lambda: True)  # a restarted backend
    requeued = after.recover()

    assert requeued == [queued]
    assert [(j.run_id, j.priority) for j in after.queue] == [(queued, 2)]
    aborted = read_json(after.run_dir(interrupted).summary_path)
    assert aborted["status"] == "aborted" and "restarted" in aborted["error"]
    assert status_of(after, finished) == "completed"


def test_resume_requeues_only_unfinished_runs(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    scheduler = new_scheduler(canvas_locked=lambda: True)
    cancelled = scheduler.submit(make_spec(), {})
    completed = scheduler.submit(make_spec(), {})
    for run_id, status in ((cancelled, "cancelled"), (completed, "completed")):
        scheduler.cancel(run_id)  # leaves the queue; then say how it ended
        folder = scheduler.run_dir(run_id)
        atomic_write_json(folder.summary_path, {**read_json(folder.summary_path), "status": status})

    with pytest.raises(StateError, match="completed"):
        scheduler.resume(completed, {}, [])
    scheduler.resume(cancelled, {"policy_mlp": "http://y"}, ["policy_mlp"])

    folder = scheduler.run_dir(cancelled)
    spec = read_json(folder.spec_path)
    assert spec["resume"] is True and spec["shared_nodesets"] == ["policy_mlp"]
    assert read_json(folder.shared_urls_path) == {"policy_mlp": "http://y"}
    assert not folder.is_done() and status_of(scheduler, cancelled) == "queued"
    with pytest.raises(StateError, match="already queued"):
        scheduler.resume(cancelled, {}, [])


# -- admission that spawns ------------------------------------------------------------------
def test_vram_admission_with_a_fake_gpu(
    new_scheduler: Callable[..., JobScheduler],
    make_spec: Callable[..., RunSpec],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(FAKE_VRAM_ENV, "1000")
    samplers = default_samplers()
    gpu = next(s for s in samplers if isinstance(s, FakeVramSampler))
    scheduler = new_scheduler(samplers=samplers)
    first = scheduler.submit(make_spec(marginal_vram_mb=600.0), {})
    second = scheduler.submit(make_spec(marginal_vram_mb=600.0), {})

    scheduler.tick()

    assert list(scheduler.running) == [first]  # declared 600 MB reserved for it
    assert scheduler.waiting_reasons == {
        second: "waiting for GPU memory: this run needs 600 MB of VRAM, 400 MB are free "
        "(besides 600 MB kept for runs of this queue that may still use it)"
    }
    assert status_of(scheduler, first) == "running"
    # The child now holds its memory on the device: measured, no longer merely reserved.
    gpu.set_usage(scheduler.running[first].child.pid, 600.0)
    scheduler.tick()
    assert scheduler.waiting_reasons == {
        second: "waiting for GPU memory: this run needs 600 MB of VRAM, 400 MB are free"
    }

    cancel_and_reap(scheduler, first)  # its process dies, and the device frees its memory
    scheduler.tick()

    assert list(scheduler.running) == [second]
    cancel_and_reap(scheduler, second)


def test_static_ledger_where_a_resource_cannot_be_measured(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    unmeasurable = NvmlVramSampler(device_index=10_000)  # no such GPU anywhere
    assert unmeasurable.sample() is None
    scheduler = new_scheduler(samplers=[RamSampler(), unmeasurable], capacity_mb={"vram": 1_000.0})
    fits = scheduler.submit(make_spec(marginal_vram_mb=700.0), {})
    too_big = scheduler.submit(make_spec(marginal_vram_mb=400.0), {})

    scheduler.tick()

    assert list(scheduler.running) == [fits]
    assert scheduler.waiting_reasons == {
        too_big: "waiting for GPU memory: this run needs 400 MB of VRAM, 300 MB are free (of "
        "the 1000 MB declared, runs of this queue hold 700 MB)"
    }
    cancel_and_reap(scheduler, fits)


def test_static_ledger_on_a_host_without_any_vram_sampler(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    # No GPU reading at all (as with serve --vram-capacity-mb on a host without NVML): the
    # declared capacity alone decides, against the declared figures of what runs.
    scheduler = new_scheduler(samplers=[RamSampler()], capacity_mb={"vram": 1_000.0})
    too_big = scheduler.submit(make_spec(marginal_vram_mb=5_000.0), {})
    fits = scheduler.submit(make_spec(marginal_vram_mb=600.0), {})

    scheduler.tick()

    assert list(scheduler.running) == [fits]
    assert scheduler.waiting_reasons == {
        too_big: "waiting for GPU memory: this run needs 5000 MB of VRAM, 1000 MB are free "
        "(of the 1000 MB declared)"
    }
    cancel_and_reap(scheduler, fits)


def test_calibration_above_the_declaration_replaces_it(
    new_scheduler: Callable[..., JobScheduler],
    make_spec: Callable[..., RunSpec],
    tmp_path: Path,
    graph_json: dict[str, Any],
) -> None:
    CalibrationStore(tmp_path / "outputs" / "calibration.json").record(
        graph_fingerprint(graph_json), 2, {"ram": 10.0, "vram": 5_000.0}
    )
    scheduler = new_scheduler(samplers=[RamSampler(), FakeVramSampler(4_000.0)])
    calibrated = scheduler.submit(make_spec(worker_count=2, marginal_vram_mb=1.0), {})

    scheduler.tick()

    assert scheduler.running == {}
    # 5000 MB × the safety margin, not the 1 MB the submitter declared.
    assert scheduler.waiting_reasons[calibrated] == (
        "waiting for GPU memory: this run needs 6000 MB of VRAM, 4000 MB are free"
    )
    vram = scheduler.list_active()["queued"][0]["estimates"]["vram"]
    assert vram["source"] == "calibrated" and "above the 1 MB declared" in vram["why"]


def test_calibration_below_the_declaration_never_undercuts_it(
    new_scheduler: Callable[..., JobScheduler],
    make_spec: Callable[..., RunSpec],
    tmp_path: Path,
    graph_json: dict[str, Any],
) -> None:
    # An earlier run of this very graph peaked at 100 MB; the submitter declares 5000 MB.
    CalibrationStore(tmp_path / "outputs" / "calibration.json").record(
        graph_fingerprint(graph_json), 1, {"ram": 10.0, "vram": 100.0}
    )
    scheduler = new_scheduler(samplers=[RamSampler(), FakeVramSampler(1_000.0)])
    declared = scheduler.submit(make_spec(marginal_vram_mb=5_000.0), {})

    scheduler.tick()

    assert scheduler.running == {}
    assert scheduler.waiting_reasons[declared] == (
        "waiting for GPU memory: this run needs 5000 MB of VRAM, 1000 MB are free"
    )
    entry = scheduler.list_active()["queued"][0]
    assert entry["estimates"]["vram"]["value"] == 5_000.0
    assert entry["estimates"]["vram"]["source"] == "declared"
    assert "calibrated 120 MB is lower" in entry["estimates"]["vram"]["why"]
    assert entry["estimates"]["ram"]["source"] == "calibrated"


def test_calibration_is_per_graph_content_not_per_name(
    new_scheduler: Callable[..., JobScheduler],
    make_spec: Callable[..., RunSpec],
    tmp_path: Path,
    graph_json: dict[str, Any],
) -> None:
    # Peaks of another graph saved under the same name say nothing about this one.
    other = {**graph_json, "description": "an edited babyai_oracle"}
    CalibrationStore(tmp_path / "outputs" / "calibration.json").record(
        graph_fingerprint(other), 1, {"ram": 1e9}, graph_name="babyai_oracle"
    )
    scheduler = new_scheduler(canvas_locked=lambda: True)
    run_id = scheduler.submit(make_spec(), {})
    edited_spec = make_spec().model_copy(update={"graph": other})
    edited = scheduler.submit(edited_spec, {})

    scheduler.tick()

    estimates = {e["run_id"]: e["estimates"]["ram"] for e in scheduler.list_active()["queued"]}
    assert estimates[run_id]["source"] == "default" and estimates[run_id]["value"] == 850.0
    assert estimates[edited]["source"] == "calibrated"
    assert estimates[edited]["value"] == pytest.approx(1.2e9)


def test_cpu_slots_hold_back_runs_until_earlier_ones_finish(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    # 3 slots on any host; each 1-worker run holds 2 (eval process + env server).
    cpu = CpuSampler(oversubscription=3.0 / cpu_cores())
    scheduler = new_scheduler(samplers=[RamSampler(), cpu])
    first, second, third = (scheduler.submit(make_spec(), {}) for _ in range(3))

    scheduler.tick()

    assert list(scheduler.running) == [first]
    assert set(scheduler.waiting_reasons) == {second, third}
    # Below the backend's priority, so that the API answers while runs keep the cores busy.
    niceness = psutil.Process(scheduler.running[first].child.pid).nice()
    assert niceness == min(19, os.nice(0) + EVAL_NICENESS)
    for reason in scheduler.waiting_reasons.values():
        assert CPU_REASON.match(reason), reason
    queued = scheduler.list_active()["queued"]
    assert queued[0]["estimates"]["cpu"] == {
        "value": 2.0,
        "unit": "slots",
        "source": "processes",
        "why": "its processes: the eval process and 1 env server(s)",
    }

    cancel_and_reap(scheduler, first)
    scheduler.tick()

    assert list(scheduler.running) == [second]
    assert set(scheduler.waiting_reasons) == {third}
    cancel_and_reap(scheduler, second)


# -- shared node sets started for a run -----------------------------------------------------
def test_a_run_waits_while_its_shared_models_load_and_holds_them_once_loaded(
    new_scheduler: Callable[..., JobScheduler],
    make_spec: Callable[..., RunSpec],
    released: Released,
) -> None:
    scheduler = new_scheduler(canvas_locked=lambda: True)
    run_id = scheduler.submit(make_spec(shared=("policy_mlp", "text_encoder")), {})
    (job,) = scheduler.queue

    scheduler.tick()

    assert scheduler.loading_jobs() == [job]
    assert status_of(scheduler, run_id) == "queued"
    reason = "loading the shared models policy_mlp, text_encoder"
    assert scheduler.waiting_reasons[run_id] == reason  # before the canvas lock's
    (entry,) = scheduler.list_active()["queued"]
    assert entry["loading"] == ["policy_mlp", "text_encoder"]
    assert read_json(scheduler.run_dir(run_id).shared_urls_path) == {}

    urls = {"policy_mlp": "http://127.0.0.1:1", "text_encoder": "http://127.0.0.1:2"}
    assert scheduler.shared_loaded(run_id, urls)
    scheduler.tick()

    assert scheduler.loading_jobs() == [] and job.shared_urls == urls
    assert "canvas" in scheduler.waiting_reasons[run_id]
    assert scheduler.cancel(run_id) == "cancelled"
    assert released.calls == [["policy_mlp", "text_encoder"]]  # what it held, given back
    assert not scheduler.shared_loaded(run_id, urls)  # too late: the caller gives them back


def test_a_loading_run_is_never_admitted_and_holds_nothing(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    scheduler = new_scheduler(samplers=[RamSampler()])
    loading = scheduler.submit(make_spec(shared=("policy_mlp",), priority=9), {})
    ready = scheduler.submit(make_spec(), {})

    scheduler.tick()

    assert list(scheduler.running) == [ready]  # behind the higher priority, and not held up
    assert scheduler.waiting_reasons == {loading: "loading the shared model policy_mlp"}
    cancel_and_reap(scheduler, ready)


def test_a_shared_model_that_cannot_start_fails_its_run(
    new_scheduler: Callable[..., JobScheduler],
    make_spec: Callable[..., RunSpec],
    released: Released,
) -> None:
    scheduler = new_scheduler(canvas_locked=lambda: True)
    run_id = scheduler.submit(make_spec(shared=("policy_mlp",)), {})

    assert scheduler.shared_failed(run_id, "could not start the shared model policy_mlp: boom")

    summary = read_json(scheduler.run_dir(run_id).summary_path)
    assert summary["status"] == "failed" and "boom" in summary["error"]
    assert scheduler.run_dir(run_id).is_done() and scheduler.queue == []
    assert released.calls == [[]]  # it held nothing yet
    assert not scheduler.shared_failed(run_id, "again")


def test_a_spawned_run_gets_the_urls_of_what_it_holds(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    scheduler = new_scheduler(samplers=[RamSampler()])
    run_id = scheduler.submit(make_spec(shared=("policy_mlp",)), {})
    scheduler.tick()
    assert scheduler.running == {}

    scheduler.shared_loaded(run_id, {"policy_mlp": "http://127.0.0.1:9"})
    scheduler.tick()

    assert list(scheduler.running) == [run_id]
    assert read_json(scheduler.run_dir(run_id).shared_urls_path) == {
        "policy_mlp": "http://127.0.0.1:9"
    }
    cancel_and_reap(scheduler, run_id)


def test_runs_requeued_at_a_restart_load_their_shared_models_again(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    before = new_scheduler(canvas_locked=lambda: True)
    run_id = before.submit(make_spec(shared=("policy_mlp",)), {"policy_mlp": "http://old:1"})
    assert before.loading_jobs() == []

    after = new_scheduler(canvas_locked=lambda: True)  # the old backend's servers are gone
    assert after.recover() == [run_id]

    (job,) = after.loading_jobs()
    assert job.loading == ["policy_mlp"] and job.shared_urls == {}
