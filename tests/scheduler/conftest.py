"""Fixtures of the scheduler tests: a spec maker and schedulers on a temporary workspace,
each shut down (its eval subprocesses stopped) at the end of the test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.scheduler.calibration import CalibrationStore
from agentcanvas.scheduler.job_scheduler import JobScheduler
from agentcanvas.scheduler.jobs import SchedulerHooks
from agentcanvas.scheduler.resources import RamSampler, ResourceSampler
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.scheduling import Released, oracle_spec


@pytest.fixture(scope="module")
def graph_json() -> dict[str, Any]:
    registry = WorkspaceComponentRegistry()
    registry.scan_all()
    return registry.load_graph("babyai_oracle").model_dump(mode="json")


@pytest.fixture
def make_spec(graph_json: dict[str, Any]) -> Callable[..., RunSpec]:
    def make(worker_count: int = 1, shared: tuple[str, ...] = (), **scheduling: Any) -> RunSpec:
        return oracle_spec(graph_json, worker_count, shared, **scheduling)

    return make


@pytest.fixture
def released() -> Released:
    return Released()


@pytest.fixture
def new_scheduler(tmp_path: Path, released: Released) -> Iterator[Callable[..., JobScheduler]]:
    made: list[JobScheduler] = []

    def make(
        samplers: list[ResourceSampler] | None = None,
        capacity_mb: dict[str, float] | None = None,
        canvas_locked: Callable[[], bool] = lambda: False,
    ) -> JobScheduler:
        scheduler = JobScheduler(
            tmp_path / "outputs" / "eval_runs",
            "http://127.0.0.1:9",
            samplers or [RamSampler()],
            CalibrationStore(tmp_path / "outputs" / "calibration.json"),
            hooks=SchedulerHooks(canvas_locked=canvas_locked, release_shared=released),
            capacity_mb=capacity_mb or {},
            cwd=tmp_path,
        )
        made.append(scheduler)
        return scheduler

    try:
        yield make
    finally:
        for scheduler in made:
            scheduler.shutdown()  # stops any eval subprocess a test left running
