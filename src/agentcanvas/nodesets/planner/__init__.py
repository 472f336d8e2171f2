"""planner: BFS navigation on the observed grid toward a target (local, stateless).

``target`` is either ground truth ``{"cells": [[x, y], ...], "mode": "face" | "reach"}`` or a
description ``{"type": "ball", "color": "red"}`` (colour optional) matched against the grid.
The output ``action`` is the first action of a shortest plan (left 0, right 1, forward 2);
when no plan exists the planner turns left and says so in ``plan_found``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentcanvas.gridnav import LEFT, find_cells, shortest_plan
from agentcanvas.nodes import CallContext, NodeSet, PortSpec

NODESET = NodeSet(
    name="planner",
    version="0.1.0",
    parallelism="local",
    description="Shortest-path navigation on a MiniGrid grid (BFS).",
)


def _target_cells(grid: np.ndarray, target: dict[str, Any]) -> tuple[list[tuple[int, int]], str]:
    if "cells" in target:
        return [(int(c[0]), int(c[1])) for c in target["cells"]], str(target.get("mode", "face"))
    obj_type = str(target.get("type", ""))
    if obj_type == "goal":
        return find_cells(grid, "goal"), "reach"
    color = target.get("color")
    return find_cells(grid, obj_type, str(color) if color else None), "face"


@NODESET.node(
    "navigate",
    inputs=[
        PortSpec(name="grid", type="array"),
        PortSpec(name="agent_pos", type="list"),
        PortSpec(name="agent_dir", type="int"),
        PortSpec(name="target", type="dict"),
    ],
    outputs=[
        PortSpec(name="action", type="int"),
        PortSpec(name="plan_length", type="int"),
        PortSpec(name="plan_found", type="bool"),
    ],
)
def navigate(
    inputs: dict[str, Any], config: dict[str, Any], state: None, ctx: CallContext
) -> dict[str, Any]:
    """First action of a shortest plan to the target."""
    grid = np.asarray(inputs["grid"])
    pos = inputs["agent_pos"]
    start = (int(pos[0]), int(pos[1]), int(inputs["agent_dir"]))
    cells, mode = _target_cells(grid, dict(inputs["target"]))
    plan = shortest_plan(grid, start, cells, mode)
    if not plan:
        return {"action": LEFT, "plan_length": 0, "plan_found": plan is not None}
    return {"action": plan[0], "plan_length": len(plan), "plan_found": True}
