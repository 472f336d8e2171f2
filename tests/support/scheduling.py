"""A JobScheduler driven by a test: specs of the built-in ``babyai_oracle``, the scheduler's
release hook recorded, a run's status as summary.json says it."""

from __future__ import annotations

from typing import Any

from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.fileio import read_json
from agentcanvas.scheduler.job_scheduler import JobScheduler


class Released:
    """The scheduler's release_shared hook, recorded."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, names: list[str]) -> None:
        self.calls.append(list(names))


def oracle_spec(
    graph_json: dict[str, Any],
    worker_count: int = 1,
    shared: tuple[str, ...] = (),
    **scheduling: Any,
) -> RunSpec:
    """A one-episode spec of ``graph_json`` (babyai_oracle) with this scheduling block."""
    config = EvalConfig(graph_name="babyai_oracle", episode_count=1, worker_count=worker_count)
    return RunSpec.model_validate(
        {
            "version": 1,
            "config": config.model_dump(mode="json"),
            "scheduling": {
                "marginal_vram_mb": 0.0,
                "exclusive_gpu": False,
                "priority": 0,
                **scheduling,
            },
            "graph": graph_json,
            "shared_nodesets": list(shared),
            "active_workspace_dir": None,
        }
    )


def status_of(scheduler: JobScheduler, run_id: str) -> str:
    """summary.json's status of the run."""
    return str(read_json(scheduler.run_dir(run_id).summary_path)["status"])
