"""A simulated Ray cluster on loopback (a head and two one-CPU nodes) and run helpers.

Every node is given ``node_ip_address="127.0.0.1"`` and ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``
is 0 before Ray is imported, so no traffic leaves loopback. Health checks are made fast so
that a removed node is declared dead (and its actors restarted elsewhere) in seconds.
"""

from __future__ import annotations

import os

# Read by Ray when it is first imported: set before anything can import it.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
# Ray's per-node agents sample every worker's resource use every few seconds for the
# dashboard's metrics; the tests read none of them, and on two cores that sampling cost
# tens of CPU-seconds a cluster.
os.environ.setdefault("REPORTER_UPDATE_INTERVAL_MS", "600000")
os.environ.setdefault("METRICS_RECORD_INTERVAL_S", "600")
from pathlib import Path
from typing import Any

from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.engine import Engine, LocalEngine
from agentcanvas.eval.events import Broadcast
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.server.registry import WorkspaceComponentRegistry

LOOPBACK = "127.0.0.1"
OBJECT_STORE = 100 * 1024**2
# Health checks fast (a removed node is declared dead in seconds); no metrics collected.
SYSTEM_CONFIG = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 1000,
    "health_check_failure_threshold": 2,
    "health_check_timeout_ms": 1000,
    "enable_metrics_collection": False,
}


def start_cluster() -> Any:
    """A head (one CPU) and two one-CPU nodes, all on 127.0.0.1, and this driver joined."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "node_ip_address": LOOPBACK,
            "include_dashboard": False,
            # Worker output is not sent to the driver (log_to_driver=False): nothing for the
            # log monitor to forward, and it polls every worker's log file.
            "include_log_monitor": False,
            "object_store_memory": OBJECT_STORE,
            "_system_config": SYSTEM_CONFIG,
        },
    )
    for _ in range(2):
        add_node(cluster)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster


def add_node(cluster: Any) -> Any:
    return cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK, object_store_memory=OBJECT_STORE)


def registry_for(workspace: Path) -> WorkspaceComponentRegistry:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    return registry


async def run_graph(
    workspace: Path,
    graph_name: str,
    engine: Engine | None = None,
    broadcast: Broadcast | None = None,
    **config: Any,
) -> EvalRun:
    """One foreground run of ``graph_name`` in ``workspace`` (default engine: local), its
    live events to ``broadcast``."""
    registry = registry_for(workspace)
    graph = registry.load_graph(graph_name)
    engine = engine or LocalEngine()
    cfg = EvalConfig(graph_name=graph.name, engine=engine.name, **config)  # type: ignore[arg-type]
    (workspace / "runs").mkdir(exist_ok=True)
    done = await run_foreground(
        registry, graph, cfg, broadcast, base_dir=workspace / "runs", engine=engine
    )
    return done.summary


def identities(run: EvalRun) -> list[dict[str, Any]]:
    """The per-episode records invariance compares (no wall time, no attempts)."""
    return [e.identity() for e in sorted(run.episodes, key=lambda e: e.index)]


def live_actor_names() -> list[str]:
    """Names of this cluster's actors of agentcanvas runs that are not dead."""
    from ray._private import state

    return sorted(
        str(a.get("Name"))
        for a in state.actors().values()
        if str(a.get("Name", "")).startswith("agentcanvas:") and a.get("State") != "DEAD"
    )


def live_groups() -> list[str]:
    """Ids of this cluster's placement groups of agentcanvas runs that are not removed."""
    import ray

    return sorted(
        group_id
        for group_id, info in ray.util.placement_group_table().items()
        if str(info.get("name", "")).startswith("agentcanvas:") and info["state"] != "REMOVED"
    )


def census() -> str:
    """Everything that may hold the cluster's resources, whatever its name: per-node free
    CPUs, actors not dead, groups not removed, jobs whose driver lives (a settle failure's
    explanation, naming what leaked)."""
    import ray
    from ray._private import state

    free = {
        node_id[:8]: res.get("CPU", 0.0)
        for node_id, res in state.state.available_resources_per_node().items()
    }
    actors = [
        (a.get("Name") or a.get("ActorClassName"), a.get("State"), a.get("JobID"))
        for a in state.actors().values()
        if a.get("State") != "DEAD"
    ]
    groups = [
        (info.get("name"), info["state"], info.get("bundles"))
        for info in ray.util.placement_group_table().values()
        if info["state"] != "REMOVED"
    ]
    jobs = [
        (job.get("JobID"), job.get("DriverPid"))
        for job in ray._private.state.jobs()
        if not job.get("IsDead")
    ]
    return f"free CPU per node {free}; actors {actors}; groups {groups}; live jobs {jobs}"


def attempts(run: EvalRun) -> list[EpisodeResult]:
    return [e for e in run.episodes if e.attempts > 1]


def group_named(name: str) -> dict[str, Any] | None:
    """The placement group ``name`` (Ray's table entry, with its id), if Ray has it."""
    import ray

    for group_id, info in ray.util.placement_group_table().items():
        if info.get("name") == name and info["state"] != "REMOVED":
            return {**info, "id": group_id}
    return None
