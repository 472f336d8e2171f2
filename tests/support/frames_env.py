"""``fenv``: a test env whose frames a test can render again, pixel for pixel.

A replicated env (written into a test workspace) whose episode lasts ``3 + seed % 3`` actions
and succeeds when its seed is even. With ``render`` on each step returns a frame like a grid
world's: an 8×8 board of flat cells (coloured from the seed) with the agent's cell moving
one cell per step, enlarged to 256 px, and a caption strip with the step's text, made by the
same ``agentcanvas.nodes`` helpers the built-in envs use. :func:`render` is that frame, here,
for a test to compare what it is served with what the node rendered. ``step_latency_ms``
sleeps in each action, so that a kill lands mid-episode.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

RENDER = textwrap.dedent(
    '''
    def render(seed, step):
        """The frame of ``step`` (0 = before the first action) of the episode of ``seed``."""
        rng = np.random.default_rng(seed)
        board = rng.integers(40, 200, size=(8, 8, 3), dtype=np.uint8)
        board[::2, ::2] = (20, 20, 24)
        board[step % 8, (step // 8) % 8] = (230, 30, 30)
        action = None if step == 0 else "forward"
        lines = caption_lines(step, action, float(step % 2), float((step + 1) // 2))
        return captioned(upscaled(board), lines)
    '''
)

FENV = (
    textwrap.dedent(
        '''
        """fenv: a replicated env with grid-world frames a test can render again."""

        import time

        import numpy as np

        from agentcanvas.nodes import (
            FieldSpec, LoadInfo, NodeSet, Panel, PanelSpec, PortSpec, caption_lines, captioned,
            upscaled,
        )
        '''
    )
    + RENDER
    + textwrap.dedent(
        """

        class State:
            def __init__(self):
                self.seed, self.length, self.steps = 0, 0, 0
                self.latency_s, self.render = 0.0, False


        class FPanel(Panel):
            spec = PanelSpec(
                fields=[
                    FieldSpec(name="task_id", kind="str", default="grid"),
                    FieldSpec(name="episode_index", kind="int", default=0),
                    FieldSpec(name="seed", kind="int", default=0),
                    FieldSpec(name="step_latency_ms", kind="float", default=0.0),
                    FieldSpec(name="render", kind="bool", default=False),
                ],
                actions=["play"],
            )

            def on_action(self, name):
                if name != "play":
                    return super().on_action(name)
                s = self.state
                s.seed, s.steps = int(self.values["seed"]), 0
                s.latency_s = float(self.values["step_latency_ms"]) / 1000.0
                s.render = bool(self.values["render"])
                s.length = 3 + s.seed % 3
                return dict(self.values)

            def on_load(self):
                s = self.state
                return LoadInfo(episode_id=f"grid/{self.values['episode_index']}",
                                step_budget=s.length + 5)


        NODESET = NodeSet(name="fenv", parallelism="replicated", state_factory=State,
                          panel_class=FPanel)


        @NODESET.node("step", inputs=[PortSpec(name="action", required=False)],
                      outputs=[PortSpec(name="done", type="bool"),
                               PortSpec(name="metrics", type="dict"),
                               PortSpec(name="frame", type="array")],
                      done_port="done", blocking=True)
        def step(inputs, config, state, ctx):
            if inputs.get("action") is not None and state.steps < state.length:
                time.sleep(state.latency_s)
                state.steps += 1
            done = state.steps >= state.length
            out = {"done": done,
                   "metrics": {"success": int(done and state.seed % 2 == 0),
                               "steps": state.steps}}
            if state.render:
                out["frame"] = render(state.seed, state.steps)
            return out
        """
    )
)


def fenv_graph(name: str = "fgraph", latency_ms: float = 0.0) -> dict[str, Any]:
    """A graph of ``fenv``: a constant action into its step, its metrics out."""
    return {
        "version": 1,
        "name": name,
        "env": {"nodeset": "fenv", "fields": {"step_latency_ms": latency_ms}, "tasks": ["grid"]},
        "nodes": [
            {"id": "act", "type": "core.constant", "config": {"value": 1}},
            {"id": "env", "type": "fenv.step"},
            {"id": "out", "type": "core.graphOut"},
        ],
        "edges": [
            {"source": "act.value", "target": "env.action"},
            {"source": "env.metrics", "target": "out.metrics"},
        ],
    }


def _render_function() -> Any:
    from agentcanvas.nodes import caption_lines, captioned, upscaled

    namespace: dict[str, Any] = {
        "np": np,
        "caption_lines": caption_lines,
        "captioned": captioned,
        "upscaled": upscaled,
    }
    exec(RENDER, namespace)  # the node set's own source: the same frame, not a copy of it
    return namespace["render"]


render = _render_function()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of ``b`` against ``a`` in dB (inf when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * float(np.log10(255**2 / mse))
