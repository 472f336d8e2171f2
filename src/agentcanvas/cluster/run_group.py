"""The placement group a run's actors are scheduled into, and the Ray calls on groups.

An eval process admitted by the scheduler finds the group reserved for it in
``PLACEMENT_GROUP_ENV`` (its hex id): it checks that the group's bundles are the ones its own
plan needs and uses it (one that no longer fits is released and reserved anew). Without one
(a foreground ``agentcanvas eval``, a local Ray) it reserves its own group and waits until Ray
has placed it, up to ``START_TIMEOUT_S``, then fails naming what the cluster lacks; while it
waits, the reason (what the group needs, what the cluster has free) goes to the caller's
``WaitReport`` after a second and then every few seconds. Either way the group is removed
when the run ends (removing a removed group is a no-op, so the scheduler may remove it again
when it reaps).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentcanvas.cluster.placement import (
    PLACEMENT_GROUP_ENV,
    PlacementPlan,
    describe_wait,
    group_name,
    group_view,
)
from agentcanvas.cluster.session import import_ray
from agentcanvas.errors import ConfigError, ServerError

__all__ = [
    "IN_FLIGHT_S",
    "START_TIMEOUT_S",
    "RunGroup",
    "WaitReport",
    "awaited",
    "cluster_free",
    "create_group",
    "group_by_id",
    "remove_group",
]

log = logging.getLogger("agentcanvas.cluster")
START_TIMEOUT_S = 300.0  # an actor's first start: a new node may install its runtime env
FIRST_REPORT_S = 1.0  # a group placed at once says nothing
REPORT_EVERY_S = 5.0
WaitReport = Callable[[str, float, dict[str, Any]], None]
"""Told while a group waits: the reason (``describe_wait``), seconds waited, the group as
``/queue`` shows it (``group_view``)."""


def create_group(plan: PlacementPlan, name: str) -> Any:
    """Ask Ray for the plan's group (returns at once; ``group.ready()`` says when placed)."""
    ray = import_ray()
    bundles = [dict(b) for b in plan.bundles]
    return ray.util.placement_group(bundles, strategy=plan.strategy, name=name)


def group_by_id(group_id: str) -> Any:
    """A handle to the group with this hex id (made by another process, the scheduler)."""
    import_ray()
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup

    return PlacementGroup(PlacementGroupID.from_hex(group_id))


def _granted_group(group_id: str) -> tuple[Any, Any]:
    """The scheduler's group by id and its bundles (ConfigError naming it when Ray does not
    know the id)."""
    ray = import_ray()
    try:
        group = group_by_id(group_id)
        return group, group.bundle_specs
    except (KeyError, ValueError, ray.exceptions.RayError) as exc:
        raise ConfigError(
            f"{PLACEMENT_GROUP_ENV}={group_id}: no such Ray placement group (the run's "
            "reservation is gone); resume the run to queue it again"
        ) from exc


IN_FLIGHT_S = 1.0
"""How long a removal first waits for a group Ray may be placing right now to be placed."""


def remove_group(group: Any) -> None:
    """Remove the group (its actors die with it); a group already removed is left alone.

    Ray (2.60) leaks the bundles of a group removed while it is being placed: their CPUs stay
    reserved on the nodes with no group left to release them (ray-project/ray#64693). So a
    group not yet placed gets ``IN_FLIGHT_S`` to be placed first; one still waiting then
    waits for what the cluster lacks, not in the middle of being placed."""
    ray = import_ray()
    with contextlib.suppress(ray.exceptions.RayError, ValueError):
        ray.wait([group.ready()], timeout=IN_FLIGHT_S)
        ray.util.remove_placement_group(group)


def cluster_free() -> dict[str, float]:
    """What the cluster has free now, outside every placement group (``CPU``, ``GPU``,
    ``memory`` in bytes)."""
    free = import_ray().available_resources()
    return {r: float(free.get(r, 0.0)) for r in ("CPU", "GPU", "memory")}


@dataclass
class RunGroup:
    """One run's group: ``owned`` when this process reserved it (no scheduler did)."""

    group: Any
    plan: PlacementPlan
    owned: bool

    @property
    def group_id(self) -> str:
        return str(self.group.id.hex())

    def bundle_of_model(self, name: str) -> tuple[Any, int] | None:
        """Where a shared node set's actor goes; None: it reserves nothing."""
        index = self.plan.model_bundles.get(name)
        return None if index is None else (self.group, index)

    @classmethod
    async def acquire(
        cls, plan: PlacementPlan, run_id: str, report: WaitReport | None = None
    ) -> RunGroup:
        """The group the scheduler reserved (``PLACEMENT_GROUP_ENV``), else a new one of
        this process named after ``run_id``, once Ray has placed it (``report`` is told why
        while it waits). A reservation that no longer fits the run (a manifest changed since
        it was queued, or a spec written before resources were recorded) is released and the
        run reserves what it needs now."""
        granted = os.environ.get(PLACEMENT_GROUP_ENV)
        run_group: RunGroup | None = None
        if granted:
            group, bundles = await asyncio.to_thread(_granted_group, granted)
            if plan.same_bundles(bundles):
                run_group = cls(group, plan, owned=False)
            else:
                log.warning(
                    "placement group %s holds %s but the run needs %s: reserving anew",
                    granted,
                    bundles,
                    [dict(b) for b in plan.bundles],
                )
                await asyncio.to_thread(remove_group, group)
        if run_group is None:
            run_group = cls(create_group(plan, group_name(run_id)), plan, owned=True)
        await run_group._ready(report)
        return run_group

    async def _ready(self, report: WaitReport | None) -> None:
        placed: asyncio.Future[Any] = asyncio.ensure_future(awaited(self.group.ready()))
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                await self._report_until(placed, report)
        except TimeoutError as exc:
            free = await asyncio.to_thread(cluster_free)
            self.remove()
            raise ServerError(
                f"Ray could not place the run's actors within {START_TIMEOUT_S:g} s: "
                f"{describe_wait(self.plan.demand(), free)}"
            ) from exc
        except BaseException:  # cancelled while waiting: a group of ours must not outlive it
            if self.owned:
                self.remove()
            raise
        finally:
            placed.cancel()

    async def _report_until(self, placed: asyncio.Future[Any], report: WaitReport | None) -> None:
        """Until ``placed`` resolves, tell ``report`` what the group waits for."""
        started = time.monotonic()
        pause = FIRST_REPORT_S
        while not placed.done():
            await asyncio.wait({placed}, timeout=pause)
            pause = REPORT_EVERY_S
            if placed.done() or report is None:
                continue
            free = await asyncio.to_thread(cluster_free)
            view = group_view(self.plan, "pending", self.group_id)
            report(describe_wait(self.plan.demand(), free), time.monotonic() - started, view)
        placed.result()

    def remove(self) -> None:
        remove_group(self.group)


async def awaited(ref: Any) -> Any:
    """An ObjectRef awaited in a task of its own (so the wait can be polled and cancelled)."""
    return await ref
