"""Where a run's actors go and what they reserve: one Ray placement group per run.

A run's group has one bundle per worker actor (``WORKER_CPUS``), then one per shared node set
that declares resources (``resources``: num_cpus, num_gpus, memory_mb, in name order); a
node set that declares none reserves nothing and gets no bundle (Ray refuses an empty one).
Worker ``k`` goes into bundle ``k``, a model into its own bundle, so what the group reserved
is what the actors use. The strategy is ``SPREAD``: workers land on as many nodes as there
are (a lost node costs the fewest workers, and simulators do not share a node's cores), yet
unlike ``STRICT_SPREAD`` a run with more workers than nodes still fits, several bundles to a
node; ``PACK`` would put every worker on one node.

Everything here is plain data and arithmetic except the two option builders, which import
Ray's scheduling strategy when called: the scheduler imports this module without Ray.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentcanvas.nodes.manifest import NodeSetManifest, NodeSetResources

__all__ = [
    "MAX_RESTARTS",
    "PLACEMENT_GROUP_ENV",
    "STRATEGY",
    "WORKER_CPUS",
    "PlacementPlan",
    "describe_wait",
    "group_name",
    "group_view",
    "in_group",
    "model_options",
    "plan_placement",
    "worker_options",
]

WORKER_CPUS = 1.0  # a worker actor runs one simulator and the episode loop
MAX_RESTARTS = -1  # Ray restarts a lost actor (in its bundle, re-placed if its node is gone)
STRATEGY = "SPREAD"
PLACEMENT_GROUP_ENV = "AGENTCANVAS_RAY_PLACEMENT_GROUP"
"""Set by the scheduler for an eval process it admitted: the hex id of the group it reserved."""
_MIB = 1024 * 1024


@dataclass(frozen=True)
class PlacementPlan:
    """The bundles of one run's placement group and which actor takes which."""

    bundles: tuple[Mapping[str, float], ...]
    worker_count: int
    model_bundles: Mapping[str, int]
    """Shared node set → its bundle index (only those that declare resources)."""
    strategy: str = STRATEGY

    def demand(self) -> dict[str, float]:
        """The group's total, per Ray resource (``CPU``, ``GPU``, ``memory`` in bytes)."""
        total = {"CPU": 0.0, "GPU": 0.0}
        for bundle in self.bundles:
            for resource, amount in bundle.items():
                total[resource] = total.get(resource, 0.0) + amount
        return total

    def same_bundles(self, bundles: list[Mapping[str, float]]) -> bool:
        """Whether a group's bundle specs are this plan's (as Ray reports them back)."""
        found = [{k: float(v) for k, v in b.items() if v} for b in bundles]
        return found == [dict(b) for b in self.bundles]


def plan_placement(worker_count: int, models: Mapping[str, NodeSetResources]) -> PlacementPlan:
    """The placement of a run with ``worker_count`` workers and these shared node sets."""
    bundles: list[Mapping[str, float]] = [{"CPU": WORKER_CPUS} for _ in range(worker_count)]
    model_bundles: dict[str, int] = {}
    for name in sorted(models):
        bundle = _bundle(models[name])
        if bundle:
            model_bundles[name] = len(bundles)
            bundles.append(bundle)
    return PlacementPlan(tuple(bundles), worker_count, model_bundles)


def _bundle(declared: NodeSetResources) -> dict[str, float]:
    bundle = {"CPU": declared.num_cpus, "GPU": declared.num_gpus}
    if declared.memory_mb > 0:
        bundle["memory"] = float(int(declared.memory_mb * _MIB))
    return {resource: amount for resource, amount in bundle.items() if amount > 0}


def group_name(run_id: str) -> str:
    """The name of a run's placement group (seen in ``ray.util.placement_group_table()``)."""
    return f"agentcanvas:{run_id}"


def group_view(plan: PlacementPlan, state: str, group_id: str | None) -> dict[str, Any]:
    """A run's group as ``/queue`` and the ``eval_waiting`` event show it."""
    return {
        "state": state,
        "placement_group": group_id,
        "bundles": [dict(b) for b in plan.bundles],
        "strategy": plan.strategy,
    }


def describe_wait(demand: Mapping[str, float], free: Mapping[str, float]) -> str:
    """What a pending group waits for, e.g. ``ray placement group: 4 CPU, 0 GPU; cluster
    has 2 CPU, 0 GPU free`` (memory only when the group asks for some)."""
    resources = ["CPU", "GPU", *(["memory"] if demand.get("memory") else [])]
    need = ", ".join(_amount(r, demand.get(r, 0.0)) for r in resources)
    left = ", ".join(_amount(r, free.get(r, 0.0)) for r in resources)
    return f"ray placement group: {need}; cluster has {left} free"


def _amount(resource: str, value: float) -> str:
    if resource == "memory":
        return f"{value / _MIB:.0f} MB memory"
    return f"{value:g} {resource}"


def in_group(group: Any, bundle_index: int) -> dict[str, Any]:
    """The option that puts an actor into bundle ``bundle_index`` of ``group``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=bundle_index
    )
    return {"scheduling_strategy": strategy}


def worker_options(
    runtime_env: dict[str, Any], name: str, group: Any, bundle_index: int
) -> dict[str, Any]:
    """Options of a worker actor: one CPU in its bundle of the run's group, restarted when
    lost."""
    return {
        "num_cpus": WORKER_CPUS,
        **in_group(group, bundle_index),
        "max_restarts": MAX_RESTARTS,
        "max_task_retries": 0,  # a lost episode is retried by the head, attempts recorded
        "runtime_env": runtime_env,
        "name": name,
    }


def model_options(
    manifest: NodeSetManifest,
    runtime_env: dict[str, Any],
    name: str,
    placement: tuple[Any, int] | None = None,
) -> dict[str, Any]:
    """Options of a shared node set's actor: the resources its manifest declares, in its
    bundle of the run's group (``placement``: group and index) when it declares any."""
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
        options["memory"] = int(declared.memory_mb * _MIB)
    if placement is not None:
        options.update(in_group(*placement))
    return options
