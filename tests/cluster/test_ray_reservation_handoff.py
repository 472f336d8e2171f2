"""The eval process's side of a reservation: the group the scheduler hands over in
``AGENTCANVAS_RAY_PLACEMENT_GROUP`` is used when it fits the run, released and reserved anew
when it does not (a manifest changed since the run was queued), and refused by name when it
is gone."""

from __future__ import annotations

from typing import Any

import pytest

from agentcanvas.cluster.placement import PLACEMENT_GROUP_ENV, plan_placement
from agentcanvas.cluster.run_group import (
    RunGroup,
    awaited,
    create_group,
    remove_group,
)
from agentcanvas.errors import ConfigError
from support.ray_cluster import live_groups

pytestmark = pytest.mark.slow


async def test_a_fitting_reservation_is_used_as_it_is(
    ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_placement(1, {})
    granted = create_group(plan, "agentcanvas:handoff-fits")
    monkeypatch.setenv(PLACEMENT_GROUP_ENV, granted.id.hex())
    run_group = await RunGroup.acquire(plan, "handoff-fits")
    try:
        assert run_group.group_id == granted.id.hex() and not run_group.owned
    finally:
        run_group.remove()
    assert live_groups() == []


async def test_a_reservation_that_no_longer_fits_is_released_and_made_anew(
    ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = create_group(plan_placement(2, {}), "agentcanvas:handoff-stale")  # 2 workers
    # Placed first, as the scheduler hands over only a placed group. Ray 2.60 leaks the
    # bundles of a group removed while it is being placed (ray-project/ray#64693): here 2 CPUs
    # stayed reserved with no group left, and every later test on the cluster waited in vain.
    await awaited(stale.ready())
    monkeypatch.setenv(PLACEMENT_GROUP_ENV, stale.id.hex())
    plan = plan_placement(1, {})  # the run needs 1 now
    run_group = await RunGroup.acquire(plan, "handoff-new")
    try:
        assert run_group.owned and run_group.group_id != stale.id.hex()
        assert live_groups() == [run_group.group_id]  # the stale one was removed
        assert plan.same_bundles(run_group.group.bundle_specs)
    finally:
        run_group.remove()
    assert live_groups() == []


async def test_a_reservation_that_is_gone_is_refused_naming_it(
    ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PLACEMENT_GROUP_ENV, "ab" * 18)  # the form of an id Ray never made
    with pytest.raises(ConfigError, match=f"{PLACEMENT_GROUP_ENV}=abab.*no such Ray placement"):
        await RunGroup.acquire(plan_placement(1, {}), "handoff-gone")


async def test_a_group_being_placed_is_placed_before_it_is_removed(ray_cluster: Any) -> None:
    """Ray 2.60 leaks the bundles of a group removed while it is being placed
    (ray-project/ray#64693): remove_group lets a group that fits be placed first (Ray's stats
    show a creation time), and still removes one that cannot be placed."""
    import ray

    fits = create_group(plan_placement(2, {}), "agentcanvas:placed-then-removed")
    remove_group(fits)  # at once, as a cancel right after the reservation would
    stats = ray.util.placement_group_table(fits)["stats"]
    assert stats["scheduling_state"] == "REMOVED"
    assert stats["end_to_end_creation_latency_ms"] > 0, stats  # it was placed, then removed
    too_big = create_group(plan_placement(_cluster_cpus() + 1, {}), "agentcanvas:never-placed")
    remove_group(too_big)  # after IN_FLIGHT_S: it waits for capacity, not in placement
    assert ray.util.placement_group_table(too_big)["stats"]["scheduling_state"] == "REMOVED"
    assert live_groups() == []


def _cluster_cpus() -> int:
    import ray

    return int(ray.cluster_resources().get("CPU", 0))
