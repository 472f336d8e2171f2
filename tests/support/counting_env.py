"""``tenv``: the test env node set several eval tests write into their workspace.

A replicated env whose episode is a pure function of its seed: it lasts
``base_length + seed % 3`` actions, each sleeping ``step_latency_ms`` inside the server (so
that a kill or a cancel lands mid-episode). Its panel fields choose what a test needs:

- ``base_length`` (default 3): the shortest episode;
- ``step_budget`` (default 0): the budget ``on_load`` reports; 0 means ``length + 5``;
- ``render``: each step also returns a 4×4 frame whose pixels encode ``seed + steps``;
- task ``bad_load``: ``on_load`` raises a ``NodeSetError`` (a level that cannot be built).

``on_load`` reports ``episode_id = task/index``, ``scene_id = scene<seed % 5>`` and
``instruction = "take <length> steps"``; ``step`` outputs ``obs`` (seed + steps), ``done``,
``metrics`` (success, steps, score = (seed % 1000) / 1000) and, with render on, ``frame``.
"""

from __future__ import annotations

import textwrap

TENV = textwrap.dedent(
    '''
    """tenv: a replicated env; an episode lasts base_length + seed % 3 actions."""

    import time

    import numpy as np

    from agentcanvas.errors import NodeSetError
    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, MetricSpec, PanelSpec, PortSpec


    class State:
        def __init__(self):
            self.task, self.seed, self.length, self.steps = "", 0, 0, 0
            self.latency_s, self.render = 0.0, False


    class TPanel(Panel):
        spec = PanelSpec(
            fields=[
                FieldSpec(name="task_id", kind="str", default="ok"),
                FieldSpec(name="episode_index", kind="int", default=0),
                FieldSpec(name="seed", kind="int", default=0),
                FieldSpec(name="step_latency_ms", kind="float", default=0.0),
                FieldSpec(name="render", kind="bool", default=False),
                FieldSpec(name="base_length", kind="int", default=3),
                FieldSpec(name="step_budget", kind="int", default=0),
            ],
            actions=["play"],
        )

        def on_action(self, name):
            if name != "play":
                return super().on_action(name)
            s = self.state
            s.task, s.seed = str(self.values["task_id"]), int(self.values["seed"])
            s.latency_s = float(self.values["step_latency_ms"]) / 1000.0
            s.render = bool(self.values["render"])
            s.length, s.steps = int(self.values["base_length"]) + s.seed % 3, 0
            return dict(self.values)

        def on_load(self):
            s = self.state
            if s.task == "bad_load":
                raise NodeSetError("tenv: level 'bad_load' cannot be built")
            budget = int(self.values["step_budget"]) or s.length + 5
            return LoadInfo(episode_id=f"{s.task}/{self.values['episode_index']}",
                            scene_id=f"scene{s.seed % 5}", instruction=f"take {s.length} steps",
                            step_budget=budget)


    NODESET = NodeSet(name="tenv", parallelism="replicated", state_factory=State,
                      panel_class=TPanel,
                      metrics={"score": MetricSpec(kind="bounded", lo=0.0, hi=1.0)})


    @NODESET.node("step", inputs=[PortSpec(name="action", required=False)],
                  outputs=[PortSpec(name="obs", type="int"), PortSpec(name="done", type="bool"),
                           PortSpec(name="metrics", type="dict"),
                           PortSpec(name="frame", type="array")],
                  done_port="done", blocking=True)
    def step(inputs, config, state, ctx):
        if inputs.get("action") is not None and state.steps < state.length:
            time.sleep(state.latency_s)
            state.steps += 1
        done = state.steps >= state.length
        out = {"obs": state.seed + state.steps, "done": done,
               "metrics": {"success": int(done), "steps": state.steps,
                           "score": (state.seed % 1000) / 1000.0}}
        if state.render:
            out["frame"] = np.full((4, 4, 3), (state.seed + state.steps) % 256, dtype=np.uint8)
        return out
    '''
)
