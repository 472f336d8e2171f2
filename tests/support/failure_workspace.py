"""A workspace whose runs fail in several ways at once, for the failure-triage and retry tests.

It holds ``support.truth_workspace`` (its node sets and graphs) and two more node sets:
``fenv``, an env over the tasks ``walk`` (an episode lasts 2 steps, then succeeds) and
``explode`` (passes the task check, but the env cannot start it), whose step node also
outputs the episode's index; and ``fglue`` with ``mid``, a local node that raises on an odd
episode index. The graph ``mixed`` wires them: env → mid → env's action. With ``-n 4`` a
run's plan is (task-major) 0-3 ``walk`` and 4-7 ``explode``, and

- ``walk`` #0 and #2 succeed;
- ``walk`` #1 and #3 are node errors (``mid`` raised ``RuntimeError: mid failed on episode
  <n>``): kind ``node_error``, node ``mid``;
- every ``explode`` episode is an exception (the env could not start it): kind ``exception``.

``mid`` decides from the env's episode index, not the run index, so a retried episode fails
(or succeeds) exactly as it did in the original run.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from support.truth_workspace import graph, write_truth_workspace
from support.workspace import write_files

FENV = textwrap.dedent(
    '''
    """fenv: an env whose step node also says the episode's index."""

    from agentcanvas.errors import UserInputError
    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec


    class State:
        def __init__(self):
            self.index, self.counter = 0, 0


    class FPanel(Panel):
        spec = PanelSpec(
            fields=[
                FieldSpec(name="task_id", kind="choice", default="walk",
                          choices=["walk", "explode"]),
                FieldSpec(name="episode_index", kind="int", default=0),
                FieldSpec(name="seed", kind="int", default=0),
            ],
            actions=["play", "reset"],
        )

        def on_action(self, name):
            if name != "play":
                return super().on_action(name)
            if self.values["task_id"] == "explode":
                raise UserInputError("panel field 'task_id': explode cannot start")
            self.state.index, self.state.counter = int(self.values["episode_index"]), 0
            return dict(self.values)

        def on_load(self):
            return LoadInfo(episode_id=f"walk/{self.state.index}", step_budget=5)


    NODESET = NodeSet(name="fenv", parallelism="replicated", state_factory=State,
                      panel_class=FPanel)


    @NODESET.node("step", inputs=[PortSpec(name="action", required=False)],
                  outputs=[PortSpec(name="done", type="bool"), PortSpec(name="index"),
                           PortSpec(name="metrics", type="dict")], done_port="done")
    def step(inputs, config, state, ctx):
        if inputs.get("action") is not None:
            state.counter += 1
        done = state.counter >= 2
        return {"done": done, "index": state.index, "metrics": {"success": int(done)}}
    '''
)

FGLUE = textwrap.dedent(
    '''
    """fglue: a local node that raises on an odd episode index."""

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    NODESET = NodeSet(name="fglue", parallelism="local")


    @NODESET.node("mid", inputs=[PortSpec(name="index", required=False)],
                  outputs=[PortSpec(name="value")])
    def mid(inputs, config, state, ctx):
        index = inputs.get("index")
        if index is not None and int(index) % 2 == 1:
            raise RuntimeError(f"mid failed on episode {index}")
        return {"value": 1}
    '''
)


def mixed_graph() -> dict[str, Any]:
    """fenv → fglue.mid → fenv's action, over the tasks walk and explode."""
    return graph(
        "mixed",
        [{"id": "env", "type": "fenv.step"}, {"id": "mid", "type": "fglue.mid"}],
        [
            {"source": "env.index", "target": "mid.index"},
            {"source": "mid.value", "target": "env.action", "next_iteration": True},
            {"source": "env.metrics", "target": "out.metrics"},
        ],
        env={"nodeset": "fenv", "fields": {}, "tasks": ["walk", "explode"]},
    )


def write_failure_workspace(root: Path) -> Path:
    """The truth workspace under ``root``, plus ``fenv``, ``fglue`` and the graph ``mixed``."""
    write_truth_workspace(root)
    files = {
        "graph_nodes/fenv/__init__.py": FENV,
        "graph_nodes/fglue/__init__.py": FGLUE,
        "graphs/mixed.json": json.dumps(mixed_graph(), indent=1),
    }
    return write_files(root, files)
