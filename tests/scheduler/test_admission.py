"""Admission rules (``scheduler.admission.decide``): pure, synchronous, no processes.

Priority first, FIFO within a priority; a job that does not fit is skipped, not blocking;
the canvas lock refuses everything; exclusive-GPU rules; measured fit against free memory
minus reservations, and the static ledger where a resource has no measurement.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentcanvas.scheduler.admission import JobDemand, RunningLoad, decide, queue_order

PLENTY = {"ram": 100_000.0}


def job(
    run_id: str,
    *,
    priority: int = 0,
    seq: int = 0,
    ram: float = 1_000.0,
    vram: float | None = None,
    exclusive: bool = False,
) -> JobDemand:
    estimates = {"ram": ram} if vram is None else {"ram": ram, "vram": vram}
    return JobDemand(run_id, priority, seq, estimates, exclusive)


def running(
    run_id: str,
    estimates: Mapping[str, float],
    used: Mapping[str, float] | None = None,
    *,
    exclusive: bool = False,
) -> RunningLoad:
    return RunningLoad(run_id, estimates, used or {}, exclusive)


# -- order -------------------------------------------------------------------------------
def test_higher_priority_starts_first_even_when_submitted_later() -> None:
    queued = [job("early-low", priority=0, seq=1), job("late-high", priority=5, seq=9)]

    decision = decide(queued, [], {"ram": 1_500.0}, {}, canvas_locked=False)

    assert decision.start == ["late-high"]
    assert decision.waiting["early-low"].startswith("waiting for memory: this run needs 1000 MB")


def test_fifo_within_a_priority() -> None:
    queued = [job("third", seq=30), job("first", seq=10), job("second", seq=20)]

    decision = decide(queued, [], {"ram": 2_500.0}, {}, canvas_locked=False)

    assert decision.start == ["first", "second"]
    assert set(decision.waiting) == {"third"}


def test_queue_order_is_priority_then_submission() -> None:
    queued = [
        job("a", priority=0, seq=1),
        job("b", priority=1, seq=3),
        job("c", priority=1, seq=2),
        job("d", priority=-1, seq=0),
    ]

    assert [j.run_id for j in queue_order(queued)] == ["c", "b", "a", "d"]


def test_everything_that_fits_starts_in_one_decision() -> None:
    queued = [job(f"r{i}", seq=i) for i in range(4)]

    decision = decide(queued, [], PLENTY, {}, canvas_locked=False)

    assert decision.start == ["r0", "r1", "r2", "r3"]
    assert decision.waiting == {}


# -- fit ---------------------------------------------------------------------------------
def test_a_job_that_does_not_fit_is_skipped_not_blocking() -> None:
    queued = [job("huge", seq=1, ram=50_000.0), job("small", seq=2, ram=500.0)]

    decision = decide(queued, [], {"ram": 4_000.0}, {}, canvas_locked=False)

    assert decision.start == ["small"]
    assert decision.waiting == {
        "huge": "waiting for memory: this run needs 50000 MB of RAM, 4000 MB are free"
    }


def test_jobs_started_in_the_same_decision_reserve_their_estimate() -> None:
    queued = [job("a", seq=1, ram=600.0), job("b", seq=2, ram=600.0)]

    decision = decide(queued, [], {"ram": 1_000.0}, {}, canvas_locked=False)

    assert decision.start == ["a"]
    assert decision.waiting["b"] == (
        "waiting for memory: this run needs 600 MB of RAM, 400 MB are free (besides 600 MB "
        "kept for runs of this queue that may still use it)"
    )


def test_running_job_reserves_the_part_of_its_estimate_not_yet_measured() -> None:
    # The running job estimated 800 MB and uses 300 MB now (already subtracted from "free"),
    # so 500 MB more are reserved for it.
    busy = running("busy", {"ram": 800.0}, {"ram": 300.0})

    fits = decide([job("q", ram=500.0)], [busy], {"ram": 1_000.0}, {}, canvas_locked=False)
    too_big = decide([job("q", ram=501.0)], [busy], {"ram": 1_000.0}, {}, canvas_locked=False)

    assert fits.start == ["q"]
    assert too_big.start == []
    assert too_big.waiting["q"].startswith(
        "waiting for memory: this run needs 501 MB of RAM, 500 MB are free (besides 500 MB"
    )


def test_a_running_job_using_more_than_its_estimate_reserves_nothing_more() -> None:
    over = running("over", {"ram": 500.0}, {"ram": 900.0})

    decision = decide([job("q", ram=1_000.0)], [over], {"ram": 1_000.0}, {}, canvas_locked=False)

    assert decision.start == ["q"]


def test_every_measured_resource_must_fit() -> None:
    queued = [
        job("gpu-heavy", ram=100.0, vram=9_000.0),
        job("gpu-light", seq=1, ram=100.0, vram=1_000.0),
    ]

    decision = decide(queued, [], {"ram": 10_000.0, "vram": 8_000.0}, {}, canvas_locked=False)

    assert decision.start == ["gpu-light"]
    assert decision.waiting["gpu-heavy"] == (
        "waiting for GPU memory: this run needs 9000 MB of VRAM, 8000 MB are free"
    )


def test_static_ledger_only_where_a_resource_cannot_be_measured() -> None:
    # vram has no reading (None): the declared capacity minus the declared estimates of what
    # runs (its measured use is ignored) decides; ram is measured as usual.
    busy = running("busy", {"ram": 100.0, "vram": 6_000.0}, {"vram": 1.0})
    queued = [job("a", seq=1, ram=100.0, vram=3_000.0), job("b", seq=2, ram=100.0, vram=4_001.0)]

    decision = decide(
        queued, [busy], {"ram": 10_000.0, "vram": None}, {"vram": 10_000.0}, canvas_locked=False
    )

    assert decision.start == ["a"]
    assert decision.waiting["b"] == (
        "waiting for GPU memory: this run needs 4001 MB of VRAM, 1000 MB are free (of the "
        "10000 MB declared, runs of this queue hold 9000 MB)"
    )


def test_unmeasurable_resource_without_declared_capacity_does_not_constrain() -> None:
    decision = decide(
        [job("a", vram=1e9)], [], {"ram": 10_000.0, "vram": None}, {}, canvas_locked=False
    )

    assert decision.start == ["a"]


def test_a_declared_capacity_caps_a_measured_resource() -> None:
    # 6000 MB free on the device, but the operator declared 5000 MB for all runs together.
    busy = running("busy", {"vram": 3_000.0}, {"vram": 3_000.0})

    decision = decide(
        [job("a", seq=1, vram=2_000.0), job("b", seq=2, vram=1.0)],
        [busy],
        {"ram": 10_000.0, "vram": 6_000.0},
        {"vram": 5_000.0},
        canvas_locked=False,
    )

    assert decision.start == ["a"]
    assert decision.waiting["b"] == (
        "waiting for GPU memory: this run needs 1 MB of VRAM, 0 MB are free (of the 5000 MB "
        "declared, runs of this queue hold 5000 MB)"
    )


# -- CPU -----------------------------------------------------------------------------------
def cpu_job(run_id: str, slots: float, seq: int = 0) -> JobDemand:
    return JobDemand(run_id, 0, seq, {"ram": 1.0, "cpu": slots})


def test_thirty_runs_at_once_are_admitted_by_cpu_slots_not_all_at_once() -> None:
    # 2 cores × 2.0 = 4 slots on an idle host; each run holds 2 (eval process + 1 server).
    queued = [cpu_job(f"r{i:02d}", 2.0, seq=i) for i in range(30)]

    decision = decide(queued, [], {**PLENTY, "cpu": 4.0}, {"cpu": 4.0}, canvas_locked=False)

    assert decision.start == ["r00", "r01"]
    assert len(decision.waiting) == 28
    assert decision.waiting["r02"] == (
        "waiting for CPU: this run asks for 2 cores, 0 are free (4 held by runs of this queue); "
        "it starts at the latest when no other run of this queue is running"
    )


def test_a_running_job_holds_its_cpu_slots_whatever_it_uses_now() -> None:
    # It holds 3 slots but keeps only 0.5 core busy: the host shows 4 − 0.5 free; the 2.5
    # slots it may still take are not for others.
    busy = running("busy", {"cpu": 3.0}, {"cpu": 0.5})

    decision = decide(
        [cpu_job("a", 2.0)], [busy], {**PLENTY, "cpu": 3.5}, {"cpu": 4.0}, canvas_locked=False
    )

    assert decision.waiting["a"].startswith(
        "waiting for CPU: this run asks for 2 cores, 1 is free (3 held by runs of this queue)"
    )


def test_outside_cpu_load_shrinks_the_budget() -> None:
    # 1.5 cores are busy with processes that are not ours: 4 − 1.5 = 2.5 slots.
    ours = running("ours", {"cpu": 1.0}, {"cpu": 1.0})

    decision = decide(
        [cpu_job("a", 1.5, seq=1), cpu_job("b", 0.5, seq=2)],
        [ours],
        {**PLENTY, "cpu": 4.0 - 2.5},
        {"cpu": 4.0},
        canvas_locked=False,
    )

    assert decision.start == ["a"]
    assert decision.waiting["b"].startswith(
        "waiting for CPU: this run asks for 0.5 cores, 0 are free (2.5 held by runs of this "
        "queue, other processes use 1.5)"
    )


def test_with_none_of_ours_holding_cpu_the_next_job_runs_whatever_its_size() -> None:
    # Bigger than the whole budget, on a host saturated by others: it runs, alone.
    queued = [cpu_job("big", 9.0, seq=1), cpu_job("small", 1.0, seq=2)]

    decision = decide(queued, [], {**PLENTY, "cpu": 0.0}, {"cpu": 4.0}, canvas_locked=False)

    assert decision.start == ["big"]
    assert decision.waiting["small"].startswith(
        "waiting for CPU: this run asks for 1 core, 0 are free (9 held by runs of this queue, "
        "other processes use 4)"
    )


# -- the queue always makes progress ---------------------------------------------------------
BUSY_HOST = {"ram": 10_000.0, "cpu": 0.2}  # a foreground eval keeps the cores busy
CPU_TOTAL = {"cpu": 4.0}


def test_with_nothing_of_ours_running_the_head_starts_on_a_busy_host() -> None:
    queued = [cpu_job("head", 2.0, seq=1), cpu_job("next", 2.0, seq=2)]

    decision = decide(queued, [], BUSY_HOST, CPU_TOTAL, canvas_locked=False)

    assert decision.start == ["head"]  # CPU is elastic: it runs slower, it does not wait
    assert decision.waiting["next"] == (
        "waiting for CPU: this run asks for 2 cores, 0 are free (2 held by runs of this "
        "queue, other processes use 3.8); it starts at the latest when no other run of this "
        "queue is running"
    )


def test_the_reason_of_a_run_waiting_for_cpu_names_what_uses_it() -> None:
    ours = running("ours", {"cpu": 2.0}, {"cpu": 0.0})

    decision = decide([cpu_job("a", 2.0)], [ours], BUSY_HOST, CPU_TOTAL, canvas_locked=False)

    assert decision.waiting["a"] == (
        "waiting for CPU: this run asks for 2 cores, 0 are free (2 held by runs of this "
        "queue, other processes use 3.8); it starts at the latest when no other run of this "
        "queue is running"
    )
    assert "slot" not in decision.waiting["a"]


def test_a_long_waiting_runs_claim_never_stalls_the_queue_for_cpu() -> None:
    from agentcanvas.scheduler.admission import STARVATION_WAIT_S

    # The head needs more GPU memory than is free and has waited long: it keeps its claim
    # (on every resource). Nothing of ours runs; the next run needs no GPU, fits beside the
    # claim, and starts although the host's cores are busy with other work.
    starving = JobDemand(
        "big", 0, 1, {"ram": 900.0, "vram": 5_000.0, "cpu": 2.0}, waited_s=STARVATION_WAIT_S
    )
    fits = JobDemand("small", 0, 2, {"ram": 500.0, "vram": 0.0, "cpu": 2.0})
    free = {"ram": 8_000.0, "vram": 1_000.0, "cpu": 0.2}

    decision = decide([starving, fits], [], free, CPU_TOTAL, canvas_locked=False)

    assert decision.start == ["small"]
    assert decision.waiting["big"].startswith("waiting for GPU memory: this run needs 5000 MB")
    assert "holds its reservation" in decision.waiting["big"]


def test_the_progress_rule_honours_priority_then_submission_order() -> None:
    queued = [
        cpu_job("early-low", 1.0, seq=1),
        JobDemand("late-high", 5, 3, {"ram": 1.0, "cpu": 3.0}),
        JobDemand("early-high", 5, 2, {"ram": 1.0, "cpu": 3.0}),
    ]

    decision = decide(queued, [], BUSY_HOST, CPU_TOTAL, canvas_locked=False)

    assert decision.start == ["early-high"]
    assert set(decision.waiting) == {"late-high", "early-low"}


def test_memory_is_never_elastic() -> None:
    decision = decide(
        [JobDemand("a", 0, 0, {"ram": 5_000.0, "cpu": 1.0})],
        [],
        {"ram": 1_000.0, "cpu": 4.0},
        CPU_TOTAL,
        canvas_locked=False,
    )

    assert decision.start == []
    assert decision.waiting["a"].startswith("waiting for memory")


def test_memory_is_named_before_cpu_when_both_refuse() -> None:
    held = running("held", {"ram": 1.0, "cpu": 4.0}, {"ram": 1.0})

    decision = decide(
        [JobDemand("a", 0, 0, {"ram": 5_000.0, "cpu": 2.0})],
        [held],
        {"ram": 1_000.0, "cpu": 4.0},
        {"cpu": 4.0},
        canvas_locked=False,
    )

    assert decision.waiting["a"] == (
        "waiting for memory: this run needs 5000 MB of RAM, 1000 MB are free"
    )


# -- canvas lock and exclusive GPU --------------------------------------------------------
def test_nothing_starts_while_the_canvas_holds_the_guard() -> None:
    queued = [job("a", seq=1), job("b", seq=2, priority=9)]

    decision = decide(queued, [], PLENTY, {}, canvas_locked=True)

    assert decision.start == []
    assert set(decision.waiting) == {"a", "b"}
    assert all("canvas" in reason for reason in decision.waiting.values())


def test_exclusive_job_waits_while_anything_runs() -> None:
    decision = decide(
        [job("excl", exclusive=True)],
        [running("other", {"ram": 1.0})],
        PLENTY,
        {},
        canvas_locked=False,
    )

    assert decision.start == []
    assert "exclusive" in decision.waiting["excl"]


def test_nothing_starts_while_an_exclusive_job_runs() -> None:
    decision = decide(
        [job("small", ram=1.0)],
        [running("excl", {"ram": 1.0}, exclusive=True)],
        PLENTY,
        {},
        canvas_locked=False,
    )

    assert decision.start == []
    assert decision.waiting["small"] == (
        "waiting for the GPU: an exclusive-GPU run is running; it starts after that one"
    )


def test_exclusive_job_starts_alone_when_nothing_runs() -> None:
    queued = [
        job("excl", seq=1, exclusive=True),
        job("after", seq=2),
        job("excl2", seq=3, exclusive=True),
    ]

    decision = decide(queued, [], PLENTY, {}, canvas_locked=False)

    assert decision.start == ["excl"]
    assert (
        decision.waiting["after"]
        == decision.waiting["excl2"]
        == ("waiting for the GPU: an exclusive-GPU run is running; it starts after that one")
    )


def test_exclusive_job_queued_behind_others_is_admitted_only_after_them() -> None:
    # A normal job ahead in order starts; the exclusive one then waits for it.
    queued = [job("normal", seq=1), job("excl", seq=2, exclusive=True)]

    decision = decide(queued, [], PLENTY, {}, canvas_locked=False)

    assert decision.start == ["normal"]
    assert "exclusive" in decision.waiting["excl"]


def test_a_starving_job_holds_its_reservation_against_later_jobs() -> None:
    from agentcanvas.scheduler.admission import STARVATION_WAIT_S

    big = JobDemand("big", 0, 1, {"ram": 900.0}, waited_s=STARVATION_WAIT_S + 1)
    small = JobDemand("small", 0, 2, {"ram": 200.0})
    running = [RunningLoad("r", {"ram": 300.0}, {"ram": 300.0})]
    # 500 MB free: big (900) does not fit. Young, it is skipped and small starts ...
    young = decide(
        [JobDemand("big", 0, 1, {"ram": 900.0}), small],
        running,
        {"ram": 500.0},
        {},
        canvas_locked=False,
    )
    assert young.start == ["small"]
    # ... starving, it keeps its claim: small may not take the memory big waits for.
    old = decide([big, small], running, {"ram": 500.0}, {}, canvas_locked=False)
    assert old.start == []
    assert "holds its reservation" in old.waiting["big"]
    assert old.waiting["small"].startswith("waiting for memory")
    # Once enough is free, big starts first.
    freed = decide([big, small], [], {"ram": 1000.0}, {}, canvas_locked=False)
    assert freed.start == ["big"]


# -- a Ray run on a cluster --------------------------------------------------------------------
def test_a_cluster_job_waits_for_its_placement_group_and_holds_nothing_here() -> None:
    from agentcanvas.scheduler.admission import STARVATION_WAIT_S

    wait = "ray placement group: 4 CPU, 0 GPU; cluster has 3 CPU, 0 GPU free"
    ray_run = JobDemand("ray", 5, 1, {"ram": 900.0}, waits_for=wait, waited_s=1e6)
    local = JobDemand("local", 0, 2, {"ram": 900.0}, waited_s=STARVATION_WAIT_S + 1)

    waiting = decide([ray_run, local], [], {"ram": 1000.0}, {}, canvas_locked=False)

    assert waiting.start == ["local"]  # the long-waiting cluster job kept no memory back
    assert waiting.waiting["ray"] == wait
    placed = JobDemand("ray", 5, 1, {"ram": 900.0})
    admitted = decide([placed, local], [], {"ram": 1000.0}, {}, canvas_locked=False)
    assert admitted.start == ["ray"]  # placed: this host's rules, priority first
    assert admitted.waiting["local"].startswith("waiting for memory: this run needs 900 MB")
