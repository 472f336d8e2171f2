"""What a run's actors reserve: a shared node set's declared resources reach its actor, and a
run's placement group has a bundle for each worker and each declaring model."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentcanvas.cluster.placement import (
    describe_wait,
    model_options,
    plan_placement,
    worker_options,
)
from agentcanvas.nodes.manifest import NodeSetResources
from support.registry import scanned
from support.workspace import write_nodeset

BIG_MODEL = textwrap.dedent(
    """
    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import NodeSetResources

    NODESET = NodeSet(name="big_model", parallelism="shared",
                      resources=NodeSetResources(num_cpus=2, num_gpus=0.5, memory_mb=4096))
    """
)


def test_declared_resources_reach_the_model_actor(tmp_path: Path) -> None:
    write_nodeset(tmp_path, "big_model", BIG_MODEL)
    manifest = scanned(tmp_path).manifest("big_model")
    assert manifest.resources == NodeSetResources(num_cpus=2, num_gpus=0.5, memory_mb=4096)
    options = model_options(manifest, {"working_dir": "gcs://x.zip"}, "agentcanvas:r:big")
    assert (options["num_cpus"], options["num_gpus"]) == (2, 0.5)
    assert options["memory"] == 4096 * 1024 * 1024
    assert options["max_restarts"] == -1  # a killed model actor is restarted


def test_undeclared_model_reserves_nothing_and_workers_go_in_their_bundle(
    tmp_path: Path,
) -> None:
    from ray.util.placement_group import PlacementGroup

    manifest = scanned(tmp_path).manifest("policy_mlp")
    options = model_options(manifest, {}, "m")
    assert (options["num_cpus"], options["num_gpus"]) == (0, 0) and "memory" not in options
    assert "scheduling_strategy" not in options  # no bundle: outside the group
    group = PlacementGroup.empty()
    worker = worker_options({}, "w", group, 3)
    strategy = worker["scheduling_strategy"]
    assert strategy.placement_group is group and strategy.placement_group_bundle_index == 3
    assert worker["num_cpus"] == 1
    assert worker["max_task_retries"] == 0  # the head retries lost episodes itself


def test_a_plan_has_a_bundle_per_worker_then_per_declaring_model() -> None:
    big = NodeSetResources(num_cpus=2, num_gpus=0.5, memory_mb=4096)
    plan = plan_placement(3, {"zz_undeclared": NodeSetResources(), "big_model": big})
    assert plan.bundles == (
        {"CPU": 1.0},
        {"CPU": 1.0},
        {"CPU": 1.0},
        {"CPU": 2.0, "GPU": 0.5, "memory": 4096.0 * 1024 * 1024},
    )
    assert dict(plan.model_bundles) == {"big_model": 3} and plan.strategy == "SPREAD"
    assert plan.demand() == {"CPU": 5.0, "GPU": 0.5, "memory": 4096.0 * 1024 * 1024}
    assert plan.same_bundles([{"CPU": 1}, {"CPU": 1}, {"CPU": 1}, dict(plan.bundles[3])])
    assert not plan.same_bundles([{"CPU": 1}] * 4)
    free = {"CPU": 2.0, "GPU": 0.0, "memory": 1024.0**3}
    assert describe_wait(plan.demand(), free) == (
        "ray placement group: 5 CPU, 0.5 GPU, 4096 MB memory; "
        "cluster has 2 CPU, 0 GPU, 1024 MB memory free"
    )
    assert describe_wait(plan_placement(4, {}).demand(), {"CPU": 3.0}) == (
        "ray placement group: 4 CPU, 0 GPU; cluster has 3 CPU, 0 GPU free"
    )


@pytest.mark.parametrize("field", ["num_cpus", "num_gpus", "memory_mb"])
def test_negative_resources_are_refused(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        NodeSetResources(**{field: -1})
