"""A Ray-engine run submitted to the backend: POST /start with ``engine: ray`` queues it, the
scheduler reserves its actors as a placement group and admits it once Ray has placed the
group, the eval subprocess runs it in that group, and cancel removes the group and kills the
run's actors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from agentcanvas.eval.config import EpisodeResult
from support.backend import Backend
from support.polling import poll_until
from support.ray_cluster import add_node, identities, live_actor_names, run_graph
from support.slow_workspace import write_slow_workspace

pytestmark = pytest.mark.slow
EPISODES = 2  # per task (two tasks)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with Backend(write_slow_workspace(tmp_path_factory.mktemp("ray_backend"))) as server:
        yield server


def test_rest_ray_run_is_cancelled_with_its_actors(ray_cluster: Any, backend: Backend) -> None:
    run_id = backend.start_run("slow_graph", 40, 2, engine="ray", ray_address=ray_cluster.address)
    poll_until(lambda: backend.status(run_id).get("episodes_done", 0) >= 2, "two episodes", 120.0)
    assert live_actor_names()  # the run's workers and its model actor
    group = _running_group(backend, run_id)
    backend.cancel(run_id)
    summary = backend.wait_status(run_id, "cancelled")
    assert summary["determinism"]["engine"] == "ray"
    assert summary["determinism"]["placement_group"] == group
    assert summary["episodes_done"] < summary["episodes_total"]
    spec = json.loads((backend.workspace / "outputs/eval_runs" / run_id / "spec.json").read_text())
    assert spec["config"]["engine"] == "ray"
    poll_until(lambda: live_actor_names() == [], "the run's actors to be gone", 30.0)
    poll_until(lambda: _group_state(group) == "REMOVED", "its placement group removed", 30.0)


def test_cancel_of_a_queued_ray_run_removes_its_placement_group(
    ray_cluster: Any, backend: Backend
) -> None:
    workers = _free_cpus() + 2  # more than the cluster holds: it waits
    run_id = backend.start_run(
        "slow_graph", 1, workers, engine="ray", ray_address=ray_cluster.address
    )
    entry = poll_until(lambda: _waiting(backend, run_id), "the run to wait for its group", 60.0)
    group = entry["placement"]["placement_group"]
    assert _group_state(group) == "PENDING"
    assert backend.cancel(run_id)["status"] == "cancelled"
    poll_until(lambda: _group_state(group) == "REMOVED", "its placement group removed", 30.0)
    assert backend.status(run_id)["status"] == "cancelled" and not backend.is_active(run_id)


def test_ray_run_stays_queued_until_the_cluster_can_hold_it(
    ray_cluster: Any, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More workers than the cluster has CPUs: queued (not failed) with /queue naming the
    wait; a node joins, the group is placed, the run is admitted, its actors run in the group,
    and its records are the local engine's."""
    import ray

    free = _free_cpus()
    workers = free + 1
    address = ray_cluster.address
    run_id = backend.start_run("slow_graph", EPISODES, workers, engine="ray", ray_address=address)
    entry = poll_until(lambda: _waiting(backend, run_id), "the run to wait for its group", 60.0)
    wait = f"ray placement group: {workers} CPU, 0 GPU; cluster has {free} CPU, 0 GPU free"
    assert entry["waiting_reason"] == wait
    assert backend.status(run_id)["status"] == "queued"
    group = entry["placement"]["placement_group"]
    assert entry["placement"]["bundles"] == [{"CPU": 1.0}] * workers
    node = add_node(ray_cluster)
    try:
        summary = backend.wait_status(run_id, "completed", 180.0)
    finally:
        ray_cluster.remove_node(node)
        poll_until(lambda: sum(n["Alive"] for n in ray.nodes()) == 3, "three nodes again", 60.0)
    assert summary["determinism"]["placement_group"] == group  # each worker said so itself
    poll_until(lambda: _group_state(group) == "REMOVED", "its placement group removed", 30.0)
    monkeypatch.setenv("AGENTCANVAS_HOME", str(backend.workspace))  # its servers find it
    local = asyncio.run(
        run_graph(backend.workspace, "slow_graph", episode_count=EPISODES, worker_count=1)
    )
    records = sorted(summary["episodes"], key=lambda e: e["index"])
    assert [EpisodeResult.model_validate(e).identity() for e in records] == identities(local)


def test_ray_run_on_an_unreachable_cluster_fails_naming_it(backend: Backend) -> None:
    """Nothing listens at the address: the run fails at once with the reason, rather than
    waiting in the queue (or in Ray's connect, which retries for minutes)."""
    run_id = backend.start_run("slow_graph", 1, 1, engine="ray", ray_address="127.0.0.1:1")
    summary = poll_until(
        lambda: (s := backend.status(run_id))["status"] == "failed" and s, "the run to fail", 60.0
    )
    assert "cannot connect to Ray at '127.0.0.1:1'" in summary["error"]
    assert not backend.is_active(run_id)


def _free_cpus() -> int:
    import ray

    return int(ray.available_resources().get("CPU", 0))


def _group_state(group: str) -> str:
    import ray

    return str(ray.util.placement_group_table()[group]["state"])


def _waiting(backend: Backend, run_id: str) -> dict[str, Any] | None:
    """The run's /queue entry once it waits for its placement group to be placed."""
    for entry in backend.queue()["queued"]:
        if entry["run_id"] == run_id and entry["waiting_reason"].startswith("ray placement group:"):
            return entry
    return None


def _running_group(backend: Backend, run_id: str) -> str:
    (entry,) = [r for r in backend.queue()["running"] if r["run_id"] == run_id]
    return str(entry["placement"]["placement_group"])


def test_a_cancelled_ray_run_resumes_over_rest_without_loading_models_in_the_backend(
    ray_cluster: Any, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST /resume of a cancelled Ray run: it queues again, runs only its missing episodes
    in a new placement group and ends with the local engine's records; the backend starts
    no shared server for it (the Ray engine brings its own model actor)."""
    n = 6  # per task
    run_id = backend.start_run("slow_graph", n, 2, engine="ray", ray_address=ray_cluster.address)
    poll_until(lambda: backend.status(run_id).get("episodes_done", 0) >= 2, "two episodes", 120.0)
    backend.cancel(run_id)
    first = backend.wait_status(run_id, "cancelled")
    assert first["episodes_done"] < first["episodes_total"]
    assert backend.api("POST", f"/api/eval/v2/resume/{run_id}")["status"] == "queued"
    done = backend.wait_status(run_id, "completed", deadline_s=180.0)
    assert backend.api("GET", "/api/nodesets")["servers"] == {}  # nothing loaded here
    monkeypatch.setenv("AGENTCANVAS_HOME", str(backend.workspace))  # its servers find it
    local = asyncio.run(run_graph(backend.workspace, "slow_graph", episode_count=n, worker_count=1))
    resumed = [EpisodeResult.model_validate(e) for e in done["episodes"]]
    assert [e.identity() for e in sorted(resumed, key=lambda e: e.index)] == identities(local)
    poll_until(lambda: live_actor_names() == [], "the run's actors to be gone", 30.0)
