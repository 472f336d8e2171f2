"""A workspace with user batched functions: a light replicated env and a shared model.

``probe_env`` draws observations from the episode seed and sums the values it is sent;
``probe_model`` scores an observation three ways: ``steady`` (row by row: batch-invariant,
declares examples), ``centred`` (subtracts half the batch mean: batch-dependent, declares
examples), ``centred_unchecked`` (the same, no examples) and ``sneaky`` (row by row on
inputs like its examples, whose values are all multiples of 1/4, centred otherwise: it passes
its start-up check, and every observation the env draws makes it batch-dependent).
``<function>_graph`` wires the env to one of them.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from support.workspace import write_files, write_nodeset

PROBE_ENV = textwrap.dedent(
    '''
    """probe_env: observations drawn from the episode seed; sums the values it is sent."""

    import numpy as np
    from pydantic import BaseModel, ConfigDict

    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec

    N_STEPS = 6


    class State:
        def __init__(self):
            self.seed, self.total = 0, 0.0


    class ProbePanel(Panel):
        spec = PanelSpec(fields=[FieldSpec(name="task_id", kind="choice", default="t0",
                                           choices=["t0", "t1"]),
                                 FieldSpec(name="episode_index", kind="int", default=0),
                                 FieldSpec(name="seed", kind="int", default=0)],
                         actions=["play"])

        def on_action(self, name):
            if name != "play":
                return super().on_action(name)
            self.state.seed, self.state.total = int(self.values["seed"]), 0.0
            return dict(self.values)

        def on_load(self):
            return LoadInfo(episode_id=f"{self.values['task_id']}/{self.values['episode_index']}",
                            step_budget=N_STEPS)


    NODESET = NodeSet(name="probe_env", parallelism="replicated", state_factory=State,
                      panel_class=ProbePanel)


    class StepConfig(BaseModel):
        model_config = ConfigDict(extra="forbid")


    @NODESET.node("step", inputs=[PortSpec(name="value", type="float", required=False)],
                  outputs=[PortSpec(name="obs", type="array"), PortSpec(name="done", type="bool"),
                           PortSpec(name="metrics", type="dict")],
                  done_port="done", config=StepConfig)
    def step(inputs, config, state, ctx):
        if inputs.get("value") is not None:
            state.total += inputs["value"]
        obs = np.random.default_rng([state.seed, ctx.step]).normal(size=4).astype(np.float32)
        return {"obs": obs, "done": ctx.step >= N_STEPS - 1, "metrics": {"total": state.total}}
    '''
)

PROBE_MODEL = textwrap.dedent(
    '''
    """probe_model: four batched scorers of an observation (shared)."""

    import numpy as np
    from pydantic import BaseModel, ConfigDict

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    NODESET = NodeSet(name="probe_model", parallelism="shared")
    W = np.linspace(-1.0, 1.0, 4)
    EXAMPLES = [{"obs": np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)},
                {"obs": np.array([-1.5, 0.75, 0.0, 1.0], dtype=np.float32)},
                {"obs": np.array([3.0, 0.5, -0.5, -2.0], dtype=np.float32)}]
    PORTS = dict(inputs=[PortSpec(name="obs", type="array")],
                 outputs=[PortSpec(name="value", type="float")])


    class ScoreConfig(BaseModel):
        model_config = ConfigDict(extra="forbid")  # a misspelt key is refused
        scale: float = 1.0


    def _rows(items):
        return np.stack([np.asarray(inputs["obs"], dtype=np.float64) for inputs, _ in items])


    @NODESET.batched_node("steady", config=ScoreConfig, examples=EXAMPLES, **PORTS)
    def steady(items, config, state):
        """Row by row: a request's value never sees the rest of its batch."""
        scale = ScoreConfig.model_validate(config).scale
        return [{"value": scale * float(row @ W)} for row in _rows(items)]


    def _centred(items, config):
        rows = _rows(items)
        mean = rows.mean(axis=0)  # the batch leaks into every row
        return [{"value": float((row - 0.5 * mean) @ W)} for row in rows]


    @NODESET.batched_node("centred", config=ScoreConfig, examples=EXAMPLES, **PORTS)
    def centred(items, config, state):
        """Subtracts half the batch mean: batch-dependent, with examples."""
        return _centred(items, config)


    @NODESET.batched_node("sneaky", config=ScoreConfig, examples=EXAMPLES, **PORTS)
    def sneaky(items, config, state):
        """Batch-invariant on inputs like its examples only: the start-up check passes."""
        rows = _rows(items)
        if np.array_equal(rows * 4, np.round(rows * 4)):
            return [{"value": float(row @ W)} for row in rows]
        return _centred(items, config)


    @NODESET.batched_node("centred_unchecked", config=ScoreConfig, **PORTS)
    def centred_unchecked(items, config, state):
        """The same, declaring no examples: only the running audit can catch it."""
        return _centred(items, config)
    '''
)


def graph_json(function: str) -> str:
    return json.dumps(
        {
            "version": 1,
            "name": f"{function}_graph",
            "env": {"nodeset": "probe_env", "tasks": ["t0", "t1"]},
            "nodes": [
                {"id": "env", "type": "probe_env.step"},
                {"id": "model", "type": f"probe_model.{function}"},
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [
                {"source": "env.obs", "target": "model.obs"},
                {"source": "model.value", "target": "env.value", "next_iteration": True},
                {"source": "env.metrics", "target": "out.metrics"},
            ],
        }
    )


FUNCTIONS = ("steady", "centred", "centred_unchecked", "sneaky")


def write_batched_workspace(root: Path) -> Path:
    """Both node sets and the three graphs under ``root``; returns ``root``."""
    write_nodeset(root, "probe_env", PROBE_ENV)
    write_nodeset(root, "probe_model", PROBE_MODEL)
    return write_files(root, {f"graphs/{f}_graph.json": graph_json(f) for f in FUNCTIONS})
