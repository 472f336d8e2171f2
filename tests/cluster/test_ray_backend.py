"""A Ray-engine run submitted to the backend: POST /start with ``engine: ray`` queues it, the
eval subprocess runs it on the cluster, and the scheduler's cancel kills its actors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from support.backend import Backend
from support.polling import poll_until
from support.ray_cluster import live_actor_names
from support.slow_workspace import write_slow_workspace

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    server = Backend(write_slow_workspace(tmp_path_factory.mktemp("ray_backend")))
    try:
        yield server
    finally:
        server.close()


def test_rest_ray_run_is_cancelled_with_its_actors(ray_cluster: Any, backend: Backend) -> None:
    run_id = backend.start_run("slow_graph", 40, 2, engine="ray", ray_address=ray_cluster.address)
    poll_until(lambda: backend.status(run_id).get("episodes_done", 0) >= 2, "two episodes", 120.0)
    assert live_actor_names()  # the run's workers and its model actor
    backend.cancel(run_id)
    summary = backend.wait_status(run_id, "cancelled")
    assert summary["determinism"]["engine"] == "ray"
    assert summary["episodes_done"] < summary["episodes_total"]
    spec = json.loads((backend.workspace / "outputs/eval_runs" / run_id / "spec.json").read_text())
    assert spec["config"]["engine"] == "ray"
    poll_until(lambda: live_actor_names() == [], "the run's actors to be gone", 30.0)
