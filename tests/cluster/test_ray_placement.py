"""What a run's actors reserve: a shared node set's declared resources reach its actor."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentcanvas.cluster.placement import model_options, worker_options
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


def test_undeclared_model_reserves_nothing_and_workers_spread(tmp_path: Path) -> None:
    manifest = scanned(tmp_path).manifest("policy_mlp")
    options = model_options(manifest, {}, "m")
    assert (options["num_cpus"], options["num_gpus"]) == (0, 0) and "memory" not in options
    worker = worker_options({}, "w")
    assert worker["scheduling_strategy"] == "SPREAD" and worker["num_cpus"] == 1
    assert worker["max_task_retries"] == 0  # the head retries lost episodes itself


@pytest.mark.parametrize("field", ["num_cpus", "num_gpus", "memory_mb"])
def test_negative_resources_are_refused(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        NodeSetResources(**{field: -1})
