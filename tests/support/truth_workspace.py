"""A workspace for run-health tests: node sets that answer, raise, hang, or return what
cannot cross a process boundary, an env with typed panel fields, and graphs using them.

- ``tglue`` (local): ``ok`` answers; ``boom`` raises; ``hang`` (blocking) sleeps an hour from
  step ``at_step`` on; ``label`` outputs a string metric.
- ``tremote`` (replicated): ``hang`` sleeps an hour from step 1 on; ``opaque`` returns an
  ``object()``, which the wire cannot carry.
- ``tenv`` (replicated env): panel fields ``task_id`` (choice: walk, explode), ``slip``
  (float), ``episode_index``, ``seed``; an episode of ``walk`` lasts 2 steps; ``explode``
  passes the task check but its ``play`` raises UserInputError.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from support.workspace import write_files

TGLUE = textwrap.dedent(
    '''
    """tglue: local nodes that answer, raise or hang."""

    import time

    from pydantic import BaseModel

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    NODESET = NodeSet(name="tglue", parallelism="local")


    class HangConfig(BaseModel):
        at_step: int = 1


    @NODESET.node("ok", outputs=[PortSpec(name="value")])
    def ok(inputs, config, state, ctx):
        return {"value": 1}


    @NODESET.node("label", outputs=[PortSpec(name="value", type="str")])
    def label(inputs, config, state, ctx):
        return {"value": "fine"}


    @NODESET.node("boom", outputs=[PortSpec(name="value")])
    def boom(inputs, config, state, ctx):
        raise RuntimeError(f"boom at step {ctx.step}")


    @NODESET.node("hang", outputs=[PortSpec(name="value")], config=HangConfig, blocking=True)
    def hang(inputs, config, state, ctx):
        if ctx.step >= config["at_step"]:
            time.sleep(3600)
        return {"value": 1}
    '''
)

TREMOTE = textwrap.dedent(
    '''
    """tremote: replicated nodes that hang or return what cannot cross a process."""

    import time

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    NODESET = NodeSet(name="tremote", parallelism="replicated")


    @NODESET.node("hang", outputs=[PortSpec(name="value")], blocking=True)
    def hang(inputs, config, state, ctx):
        if ctx.step >= 1:
            time.sleep(3600)
        return {"value": 1}


    @NODESET.node("opaque", outputs=[PortSpec(name="value")])
    def opaque(inputs, config, state, ctx):
        return {"value": object()}
    '''
)

TENV = textwrap.dedent(
    '''
    """tenv: a replicated env with typed panel fields; an episode of walk lasts 2 steps."""

    from agentcanvas.errors import UserInputError
    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec


    class State:
        def __init__(self):
            self.task, self.index, self.slip, self.counter = "", 0, 0.0, 0


    class TPanel(Panel):
        spec = PanelSpec(
            fields=[
                FieldSpec(name="task_id", kind="choice", default="walk",
                          choices=["walk", "explode"]),
                FieldSpec(name="slip", kind="float", default=0.0),
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
            s = self.state
            s.task, s.index = str(self.values["task_id"]), int(self.values["episode_index"])
            s.slip, s.counter = float(self.values["slip"]), 0
            return dict(self.values)

        def on_load(self):
            return LoadInfo(episode_id=f"{self.state.task}/{self.state.index}", step_budget=5)


    NODESET = NodeSet(name="tenv", parallelism="replicated", state_factory=State,
                      panel_class=TPanel)


    @NODESET.node("step", inputs=[PortSpec(name="action", required=False)],
                  outputs=[PortSpec(name="done", type="bool"),
                           PortSpec(name="metrics", type="dict")], done_port="done")
    def step(inputs, config, state, ctx):
        if inputs.get("action") is not None:
            state.counter += 1
        done = state.counter >= 2
        return {"done": done, "metrics": {"success": int(done), "slip": state.slip}}
    '''
)

NODESETS = {"tglue": TGLUE, "tremote": TREMOTE, "tenv": TENV}


def graph(
    name: str, nodes: Iterable[dict[str, Any]], edges: Iterable[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    """A graph document whose ``out`` node (core.graphOut) is added for you."""
    return {
        "version": 1,
        "name": name,
        "step_budget": 3,
        **extra,
        "nodes": [*nodes, {"id": "out", "type": "core.graphOut"}],
        "edges": list(edges),
    }


def one_node(name: str, node_type: str, port: str = "success", **config: Any) -> dict[str, Any]:
    """``node_type``'s ``value`` into graphOut's ``port``."""
    node = {"id": "n", "type": node_type, **({"config": config} if config else {})}
    return graph(name, [node], [{"source": "n.value", "target": f"out.{port}"}])


def env_graph(name: str, fields: dict[str, Any], tasks: list[str]) -> dict[str, Any]:
    """tenv driven by tglue.ok as its action."""
    return graph(
        name,
        [{"id": "env", "type": "tenv.step"}, {"id": "act", "type": "tglue.ok"}],
        [
            {"source": "act.value", "target": "env.action", "next_iteration": True},
            {"source": "env.metrics", "target": "out.metrics"},
        ],
        env={"nodeset": "tenv", "fields": fields, "tasks": tasks},
    )


GRAPHS = [
    one_node("clean", "tglue.ok"),
    one_node("raises", "tglue.boom"),
    one_node("local_hang", "tglue.hang"),
    one_node("remote_hang", "tremote.hang"),
    one_node("opaque", "tremote.opaque"),
    one_node("labelled", "tglue.label", port="label"),
    env_graph("walk", {"slip": 0.5}, ["walk"]),
    env_graph("explodes", {}, ["explode"]),
    env_graph("slippery", {"slip": "lots"}, ["walk"]),
]


def write_truth_workspace(root: Path) -> Path:
    """The node sets and graphs above under ``root`` (graph_nodes/, graphs/)."""
    files = {f"graph_nodes/{name}/__init__.py": src for name, src in NODESETS.items()}
    files |= {f"graphs/{g['name']}.json": json.dumps(g, indent=1) for g in GRAPHS}
    return write_files(root, files)
