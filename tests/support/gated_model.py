"""A workspace whose shared model loads until the test says so: ``gated_model`` is
``probe_model`` (support.batched_nodesets) whose server start writes ``loading`` beside its
code and then waits for a ``gate`` file there (at most GATE_WAIT_S); ``gated_graph`` wires
``probe_env`` to its ``steady`` scorer."""

from __future__ import annotations

import json
from pathlib import Path

from support.batched_nodesets import PROBE_MODEL, graph_json, write_batched_workspace
from support.workspace import write_files, write_nodeset

GATE_WAIT_S = 90.0  # below the server's ready timeout (120 s): a forgotten gate fails the load
GATED_STATE = f'''

class Loading:
    """Loads until the test opens the gate (a file beside this one)."""

    def __init__(self):
        import time
        from pathlib import Path

        here = Path(__file__).parent
        (here / "loading").write_text("")
        deadline = time.monotonic() + {GATE_WAIT_S}
        while not (here / "gate").exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the test never opened the gate")
            time.sleep(0.05)


NODESET = NodeSet(name="gated_model", parallelism="shared", state_factory=Loading,
                  forkable=False)
'''
GATED_MODEL = PROBE_MODEL.replace(
    '\nNODESET = NodeSet(name="probe_model", parallelism="shared")\n', GATED_STATE
)


def write_gated_workspace(root: Path) -> Path:
    """The probe workspace plus ``gated_model`` and ``gated_graph``; returns ``root``."""
    assert GATED_MODEL != PROBE_MODEL
    write_batched_workspace(root)
    write_nodeset(root, "gated_model", GATED_MODEL)
    graph = json.loads(graph_json("steady"))
    graph["name"] = "gated_graph"
    graph["nodes"][1]["type"] = "gated_model.steady"
    return write_files(root, {"graphs/gated_graph.json": json.dumps(graph)})


def gate_folder(root: Path) -> Path:
    """Where ``loading`` appears and ``gate`` opens the load."""
    return root / "graph_nodes" / "gated_model"
