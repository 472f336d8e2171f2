"""A workspace whose episodes take long enough to interrupt: ``slow_graph`` is the probe
graph (support.batched_nodesets) with an env that sleeps a little at each step."""

from __future__ import annotations

import json
from pathlib import Path

from support.batched_nodesets import PROBE_ENV, graph_json, write_batched_workspace
from support.workspace import write_files, write_nodeset

STEP_SLEEP_S = 0.04
SLOW_ENV = PROBE_ENV.replace('name="probe_env"', 'name="slow_env"').replace(
    '    if inputs.get("value") is not None:',
    f'    import time\n    time.sleep({STEP_SLEEP_S})\n    if inputs.get("value") is not None:',
)


def write_slow_workspace(root: Path) -> Path:
    """The probe workspace plus ``slow_env`` and ``slow_graph`` (slow_env → probe_model.steady)."""
    write_batched_workspace(root)
    write_nodeset(root, "slow_env", SLOW_ENV)
    graph = json.loads(graph_json("steady"))
    graph["name"] = "slow_graph"
    graph["env"]["nodeset"] = "slow_env"
    graph["nodes"][0]["type"] = "slow_env.step"
    return write_files(root, {"graphs/slow_graph.json": json.dumps(graph)})
