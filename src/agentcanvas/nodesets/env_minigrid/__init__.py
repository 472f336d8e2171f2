"""env_minigrid: BabyAI / MiniGrid levels through Gymnasium (replicated: one env per process).

Panel cascade: ``dataset`` (babyai, minigrid) → ``split`` (level family) → ``task_id`` (a
Gymnasium level id). ``episode_index`` and ``seed`` pick the episode; the ``play`` action
builds the level and resets it with ``seed``. ``on_load`` reports the mission as the
instruction and the level's step budget (``max_steps`` actions + the first observe).

``step`` with no ``action`` observes; with an action it steps the level. Its ``metrics``:
``success`` (1 when the level ended with a positive reward), ``spl`` (success × shortest
path / max(path taken, shortest path); shortest path by BFS from the start state), ``steps``
(actions taken) and ``return``. ``step_latency_ms`` simulates a slow renderer.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from agentcanvas.gridnav import find_cells, shortest_plan
from agentcanvas.nodes import (
    MIN_FRAME_PX,
    CallContext,
    FieldSpec,
    LoadInfo,
    MetricSpec,
    NodeSet,
    NodeSetError,
    PanelSpec,
    PortSpec,
    TaskPanel,
    caption_lines,
    captioned,
    task_fields,
    upscaled,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import gymnasium as gym
    import minigrid  # noqa: F401  (registers the BabyAI / MiniGrid levels)
    from minigrid.core.actions import Actions

LEVELS: dict[str, dict[str, list[str]]] = {
    "babyai": {
        "GoTo": [
            "BabyAI-GoToObj-v0",
            "BabyAI-GoToRedBallGrey-v0",
            "BabyAI-GoToRedBall-v0",
            "BabyAI-GoToLocal-v0",
        ],
        "GoToLocal": [
            "BabyAI-GoToLocalS5N2-v0",
            "BabyAI-GoToLocalS6N3-v0",
            "BabyAI-GoToLocalS7N4-v0",
            "BabyAI-GoToLocalS8N7-v0",
        ],
    },
    "minigrid": {"Empty": ["MiniGrid-Empty-5x5-v0", "MiniGrid-Empty-8x8-v0"]},
}
FRAME_TILE_PX = 8  # drawn at 8 px per cell, then enlarged (frames >= MIN_FRAME_PX)


class MiniGridState:
    """The process's simulator: one level instance plus the current episode's bookkeeping."""

    def __init__(self) -> None:
        self.env: Any = None
        self.level: str | None = None
        self.episode_id = ""
        self.steps = 0
        self.total_return = 0.0
        self.finished = False
        self.success = False
        self.shortest = 0
        self.image: np.ndarray | None = None  # the egocentric view of the last reset / step
        self.step_latency_ms = 0.0
        self.render = False

    def start(self, level: str, seed: int) -> None:
        if level != self.level:
            self.close()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.env = gym.make(level)
            self.level = level
        obs, _ = self.env.reset(seed=seed)
        self.image = obs["image"]
        self.steps, self.total_return = 0, 0.0
        self.finished = self.success = False
        self.shortest = self._shortest_path()

    def _shortest_path(self) -> int:
        plan = shortest_plan(self.grid(), self.agent_state(), *self.targets())
        return len(plan) if plan is not None else 0

    def require_env(self) -> Any:
        if self.env is None:
            raise NodeSetError("env_minigrid: no episode loaded (set the panel and run 'play')")
        return self.env.unwrapped

    def grid(self) -> np.ndarray:
        encoded: np.ndarray = self.require_env().grid.encode()
        return encoded

    def agent_state(self) -> tuple[int, int, int]:
        env = self.require_env()
        return int(env.agent_pos[0]), int(env.agent_pos[1]), int(env.agent_dir)

    def targets(self) -> tuple[list[tuple[int, int]], str]:
        """Ground-truth target cells and whether the agent must face or reach them."""
        env = self.require_env()
        instrs = getattr(env, "instrs", None)
        if instrs is not None and hasattr(instrs, "desc"):
            cells = [(int(o.cur_pos[0]), int(o.cur_pos[1])) for o in instrs.desc.obj_set]
            return cells, "face"
        return find_cells(self.grid(), "goal"), "reach"

    def metrics(self) -> dict[str, float]:
        spl = self.shortest / max(self.steps, self.shortest, 1) if self.success else 0.0
        return {
            "success": int(self.success),
            "spl": float(spl),
            "steps": self.steps,
            "return": float(self.total_return),
        }

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
        self.env, self.level, self.image = None, None, None


class MiniGridPanel(TaskPanel):
    """dataset → split → task_id cascade, episode_index/seed, play, on_load."""

    tasks = LEVELS
    task_noun = "level"
    spec = PanelSpec(
        fields=[
            *task_fields(LEVELS, "BabyAI-GoToObj-v0"),
            FieldSpec(name="episode_index", kind="int", default=0),
            FieldSpec(name="seed", kind="int", default=0, description="Level seed."),
            FieldSpec(
                name="step_latency_ms",
                kind="float",
                default=0.0,
                description="Simulated renderer latency added to every step.",
            ),
            FieldSpec(
                name="render",
                kind="bool",
                default=False,
                description="Return an RGB frame from every step (>= 256 px, with the "
                "action and reward in a caption strip below).",
            ),
        ],
        actions=["play", "reset"],
    )

    def on_action(self, name: str) -> dict[str, Any]:
        if name != "play":
            return super().on_action(name)
        state: MiniGridState = self.state
        state.step_latency_ms = float(self.values["step_latency_ms"] or 0.0)
        state.render = bool(self.values["render"])
        state.start(str(self.values["task_id"]), int(self.values["seed"]))
        state.episode_id = f"{self.values['task_id']}/{int(self.values['episode_index'])}"
        return dict(self.values)

    def on_load(self) -> LoadInfo:
        state: MiniGridState = self.state
        env = state.require_env()
        return LoadInfo(
            episode_id=state.episode_id,
            scene_id=f"{state.level}@seed{int(self.values['seed'])}",
            instruction=str(env.mission),
            step_budget=int(env.max_steps) + 1,
            extra={"shortest_path": state.shortest},
        )


NODESET = NodeSet(
    name="env_minigrid",
    version="0.1.0",
    parallelism="replicated",
    description="BabyAI / MiniGrid levels (Gymnasium), fully observed grid + egocentric view.",
    state_factory=MiniGridState,
    panel_class=MiniGridPanel,
    metrics={
        "success": MetricSpec(kind="binary", description="the level ended with a reward"),
        "spl": MetricSpec(kind="bounded", lo=0.0, hi=1.0, description="success × path ratio"),
        "steps": MetricSpec(kind="count", description="actions taken"),
        # MiniGrid pays 1 - 0.9 * steps / max_steps once, on success: within [0, 1].
        "return": MetricSpec(kind="bounded", lo=0.0, hi=1.0, description="episode return"),
    },
)


@NODESET.node(
    "step",
    inputs=[PortSpec(name="action", type="int", required=False)],
    outputs=[
        PortSpec(name="image", type="array", description="Egocentric 7x7x3 view."),
        PortSpec(name="grid", type="array", description="Full grid encoding WxHx3."),
        PortSpec(name="agent_pos", type="list"),
        PortSpec(name="agent_dir", type="int"),
        PortSpec(name="mission", type="str"),
        PortSpec(name="objects", type="list", description="Objects: desc, type, color, pos."),
        PortSpec(name="target", type="dict", description="Ground truth: cells and mode."),
        PortSpec(name="reward", type="float"),
        PortSpec(name="done", type="bool"),
        PortSpec(name="metrics", type="dict"),
        PortSpec(
            name="frame",
            type="array",
            description="RGB frame when render is on: the full grid (>= 256 px), captioned "
            "with the step, the action's name and the reward.",
        ),
    ],
    done_port="done",
    blocking=True,
)
def step(
    inputs: dict[str, Any], config: dict[str, Any], state: MiniGridState, ctx: CallContext
) -> dict[str, Any]:
    """Step the level with ``action`` (or just observe when there is none)."""
    env = state.require_env()
    reward = 0.0
    acted = inputs.get("action") is not None and not state.finished
    if acted:
        if state.step_latency_ms > 0:
            time.sleep(state.step_latency_ms / 1000.0)
        obs, r, terminated, truncated, _ = state.env.step(int(inputs["action"]))
        state.image = obs["image"]
        reward = float(r)
        state.steps += 1
        state.total_return += reward
        state.finished = bool(terminated or truncated)
        state.success = bool(terminated and reward > 0)
    out = _observation(state, env, reward)
    if state.render:
        out["frame"] = _frame(state, env, int(inputs["action"]) if acted else None, reward)
    return out


def _observation(state: MiniGridState, env: Any, reward: float) -> dict[str, Any]:
    cells, mode = state.targets()
    # The view reset / step already computed (``gen_obs`` again would cost as much as the
    # step itself); a copy, so that no caller shares the state's array.
    image = state.image if state.image is not None else env.gen_obs()["image"]
    out: dict[str, Any] = {
        "image": image.copy(),
        "grid": state.grid(),
        "agent_pos": [int(env.agent_pos[0]), int(env.agent_pos[1])],
        "agent_dir": int(env.agent_dir),
        "mission": str(env.mission),
        "objects": _objects(env),
        "target": {"cells": [list(c) for c in cells], "mode": mode},
        "reward": reward,
        "done": state.finished,
        "metrics": state.metrics(),
    }
    return out


def _frame(state: MiniGridState, env: Any, action: int | None, reward: float) -> np.ndarray:
    """The full grid at FRAME_TILE_PX per cell, enlarged to >= MIN_FRAME_PX, captioned.

    Small tiles, then a whole-factor enlargement: MiniGrid draws every tile it has not
    drawn before at that size (supersampled, in Python), a cost that grows steeply with the
    tile size, while enlarging the drawn frame is a cheap array operation."""
    picture = upscaled(env.get_frame(highlight=False, tile_size=FRAME_TILE_PX), MIN_FRAME_PX)
    name = None if action is None else _action_name(action)
    return captioned(picture, caption_lines(state.steps, name, reward, state.total_return))


def _action_name(action: int) -> str:
    try:
        return Actions(action).name
    except ValueError:
        return f"action {action}"


def _objects(env: Any) -> list[dict[str, Any]]:
    objects = []
    for x in range(env.grid.width):
        for y in range(env.grid.height):
            obj = env.grid.get(x, y)
            if obj is not None and obj.type not in ("wall", "floor", "door", "goal"):
                desc = f"{obj.color} {obj.type}"
                objects.append({"desc": desc, "type": obj.type, "color": obj.color, "pos": [x, y]})
    return objects
