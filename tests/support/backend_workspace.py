"""The workspace of the backend end-to-end tests (``integration/test_backend*.py``).

``slow_oracle`` (the oracle on an env with a step latency, so a run lasts long enough to be
interrupted), ``spin`` (turns on the spot until the step budget ends: an episode of known
length) and ``leaky`` (``spin`` plus a helper process that ignores SIGTERM). A calibration
recorded before the backend starts makes (babyai_oracle, HUGE_WORKERS workers) need more RAM
than any machine has: such a run waits for admission for as long as a test needs it to.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from agentcanvas.graph.model import load_graph_file
from agentcanvas.scheduler.calibration import CalibrationStore, graph_fingerprint

PROCESS_GONE_DEADLINE_S = 30.0
HUGE_WORKERS = 3
HUGE_RAM_MB = 1e9  # recorded peak for (babyai_oracle, HUGE_WORKERS): never fits
RAM_REASON = re.compile(r"^waiting for memory: this run needs (\d+) MB of RAM, (\d+) MB are free")
SLOW_ORACLE_LATENCY_MS = 200
SPIN_LATENCY_MS = 100

# A local node set that starts a helper process ignoring SIGTERM, as a leaky simulator might:
# it lives in the run's process group, and only a kill of that group ends it.
STRAGGLER_NODESET = """
import subprocess
import sys

from agentcanvas.nodes.base import NodeSet
from agentcanvas.nodes.manifest import PortSpec

IGNORE_TERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"


class State:
    def __init__(self):
        self.proc = None


NODESET = NodeSet(name="straggler", version="0.1.0", parallelism="local",
                  description="Starts a helper that ignores SIGTERM.", state_factory=State)


@NODESET.node("spawn", outputs=[PortSpec(name="pid", type="int")])
def spawn(inputs, config, state, ctx):
    if state.proc is None:
        state.proc = subprocess.Popen([sys.executable, "-c", IGNORE_TERM])
    return {"pid": state.proc.pid}
"""

_ORACLE_PATH = Path(__file__).resolve().parents[2] / "src/agentcanvas/graphs/babyai_oracle.json"
_ORACLE = json.loads(_ORACLE_PATH.read_text())
ORACLE_KEY = graph_fingerprint(load_graph_file(_ORACLE_PATH).model_dump(mode="json"))
"""The calibration key of babyai_oracle: the content of the graph a run's spec freezes."""


def write_workspace(root: Path) -> Path:
    """The module's workspace: the two graphs and the never-fitting calibration."""
    graphs = root / "graphs"
    graphs.mkdir(parents=True, exist_ok=True)
    slow = {
        **_ORACLE,
        "name": "slow_oracle",
        "env": {
            **_ORACLE["env"],
            "fields": {**_ORACLE["env"]["fields"], "step_latency_ms": SLOW_ORACLE_LATENCY_MS},
        },
    }
    spin = {
        "version": 1,
        "name": "spin",
        "description": "Turns on the spot until the budget ends.",
        "env": {
            "nodeset": "env_minigrid",
            "tasks": ["BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0"],
            "fields": {
                "dataset": "babyai",
                "split": "GoTo",
                "task_id": "BabyAI-GoToObj-v0",
                "step_latency_ms": SPIN_LATENCY_MS,
            },
        },
        "nodes": [
            {"id": "env", "type": "env_minigrid.step"},
            {"id": "turn", "type": "core.constant", "config": {"value": 0}},
            {"id": "out", "type": "core.graphOut"},
        ],
        "edges": [
            {"source": "turn.value", "target": "env.action", "next_iteration": True},
            {"source": "env.metrics", "target": "out.metrics"},
        ],
    }
    leaky = {
        **spin,
        "name": "leaky",
        "nodes": [*spin["nodes"], {"id": "helper", "type": "straggler.spawn"}],
        "edges": [*spin["edges"], {"source": "helper.pid", "target": "out.helper_pid"}],
    }
    for graph in (slow, spin, leaky):
        (graphs / f"{graph['name']}.json").write_text(json.dumps(graph, indent=1))
    nodeset = root / "graph_nodes" / "straggler"
    nodeset.mkdir(parents=True, exist_ok=True)
    (nodeset / "__init__.py").write_text(STRAGGLER_NODESET)
    calibration = CalibrationStore(root / "outputs" / "calibration.json")
    calibration.record(ORACLE_KEY, HUGE_WORKERS, {"ram": HUGE_RAM_MB}, graph_name="babyai_oracle")
    return root
