"""Where a run's actors go and what they reserve: workers spread over the nodes, each shared
node set with the resources its manifest declares (``resources``: num_cpus, num_gpus,
memory_mb), and actors restarted by Ray when they or their node are lost."""

from __future__ import annotations

from typing import Any

from agentcanvas.nodes.manifest import NodeSetManifest

WORKER_CPUS = 1.0  # a worker actor runs one simulator and the episode loop
MAX_RESTARTS = -1  # Ray restarts a lost actor (on another node if its own is gone)


def worker_options(runtime_env: dict[str, Any], name: str) -> dict[str, Any]:
    """Options of a worker actor: one CPU, spread over the nodes, restarted when lost."""
    return {
        "num_cpus": WORKER_CPUS,
        "scheduling_strategy": "SPREAD",
        "max_restarts": MAX_RESTARTS,
        "max_task_retries": 0,  # a lost episode is retried by the head, attempts recorded
        "runtime_env": runtime_env,
        "name": name,
    }


def model_options(
    manifest: NodeSetManifest, runtime_env: dict[str, Any], name: str
) -> dict[str, Any]:
    """Options of a shared node set's actor: the resources its manifest declares."""
    declared = manifest.resources
    options: dict[str, Any] = {
        "num_cpus": declared.num_cpus,
        "num_gpus": declared.num_gpus,
        "max_restarts": MAX_RESTARTS,
        "max_task_retries": 0,  # the handle retries, so a call is never run twice unseen
        "runtime_env": runtime_env,
        "name": name,
    }
    if declared.memory_mb > 0:
        options["memory"] = int(declared.memory_mb * 1024 * 1024)
    return options
