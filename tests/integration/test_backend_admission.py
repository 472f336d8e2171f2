"""Admission end to end: ``serve --vram-capacity-mb`` and CPU slots on a real backend.

The backend is started with a declared VRAM capacity of 1000 MB (the static ledger, on a
host where VRAM cannot be measured, and a cap where it can) and with a CPU oversubscription
that makes 3 slots on any host. Each 1-worker run holds 2 slots (its eval process and one
env server), so runs go one at a time, and the others wait in ``/api/eval/v2/queue`` saying
so; a run declaring 5000 MB of VRAM waits for as long as the capacity stays 1000 MB.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcanvas.scheduler.cpu import cpu_cores
from support.backend import Backend
from support.polling import poll_until

SLOTS = 3.0
CPU_REASON = re.compile(
    r"^waiting for CPU: this run asks for 2 cores, [0-9.]+ (is|are) free \(.+\); it starts at "
    r"the latest when no other run of this queue is running$"
)
VRAM_REASON = (
    "waiting for GPU memory: this run needs 5000 MB of VRAM, 1000 MB are free "
    "(of the 1000 MB declared)"
)
RUN_DEADLINE_S = 120.0
TASK = "BabyAI-GoToObj-v0"  # one episode per run


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    server = Backend(
        tmp_path,
        "--vram-capacity-mb",
        "1000",
        "--cpu-oversubscription",
        f"{SLOTS / cpu_cores():.6f}",
    )
    try:
        yield server
    finally:
        server.close()


def queued_entries(backend: Backend) -> dict[str, dict[str, object]]:
    return {e["run_id"]: e for e in backend.queue()["queued"]}


def test_vram_capacity_and_cpu_slots_hold_runs_back_until_earlier_ones_finish(
    backend: Backend,
) -> None:
    too_big = backend.start_run("babyai_oracle", 1, 1, marginal_vram_mb=5_000.0)
    poll_until(
        lambda: queued_entries(backend)[too_big]["waiting_reason"] == VRAM_REASON,
        "the 5000 MB run to wait for VRAM",
        30.0,
    )
    vram = queued_entries(backend)[too_big]["estimates"]["vram"]  # type: ignore[index]
    assert vram["source"] == "declared" and vram["value"] == 5_000.0

    runs = [
        backend.start_run("babyai_oracle", 1, 1, marginal_vram_mb=100.0, tasks=[TASK])
        for _ in range(2)
    ]
    most_running = 0
    waited_for_cpu: set[str] = set()

    def all_completed() -> bool:
        nonlocal most_running
        listing = backend.queue()
        most_running = max(most_running, len(listing["running"]))
        for entry in listing["queued"]:
            if CPU_REASON.match(entry["waiting_reason"]):
                waited_for_cpu.add(entry["run_id"])
        return all(backend.status(r)["status"] == "completed" for r in runs) and not any(
            backend.is_active(r) for r in runs
        )

    poll_until(all_completed, "the two runs to complete one after the other", RUN_DEADLINE_S)

    assert most_running == 1  # 3 slots hold one 2-slot run at a time
    assert runs[1] in waited_for_cpu  # the later one waited, saying why
    assert queued_entries(backend)[too_big]["waiting_reason"] == VRAM_REASON
    assert backend.cancel(too_big)["status"] == "cancelled"
