"""env_gym: Gymnasium classic-control tasks (replicated: one env per process).

Panel cascade as env_minigrid: ``dataset`` (classic_control) → ``split`` (discrete,
continuous) → ``task_id``. ``step`` with no action observes; metrics are ``return``,
``length`` and ``success``: 1 when the episode's return reaches the task's Gymnasium
``reward_threshold`` (CartPole-v1: 475, Acrobot-v1: -100, MountainCar-v0: -110,
Pendulum-v1: none, so success is always 0 there). With ``render`` on, ``step`` also returns
a ``frame``: the env's ``rgb_array`` picture (>= 256 px) captioned with the step, the action
by name (CartPole: push left / push right) and the reward.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np

from agentcanvas.nodes import (
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

TASKS: dict[str, dict[str, list[str]]] = {
    "classic_control": {
        "discrete": ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"],
        "continuous": ["Pendulum-v1"],
    }
}
ACTION_NAMES: dict[str, tuple[str, ...]] = {
    "CartPole-v1": ("push left", "push right"),
    "Acrobot-v1": ("torque -1", "torque 0", "torque +1"),
    "MountainCar-v0": ("push left", "no push", "push right"),
}


class GymState:
    """One Gymnasium env and the current episode's bookkeeping."""

    def __init__(self) -> None:
        self.env: Any = None
        self.task: str | None = None
        self.obs: np.ndarray | None = None
        self.episode_id = ""
        self.length = 0
        self.total_return = 0.0
        self.finished = False
        self.step_latency_ms = 0.0
        self.render = False
        self._made_render = False

    def start(self, task: str, seed: int) -> None:
        if task != self.task or self.render != self._made_render:
            self.close()
            self.env = gym.make(task, render_mode="rgb_array" if self.render else None)
            self.task, self._made_render = task, self.render
        obs, _ = self.env.reset(seed=seed)
        self.obs = np.asarray(obs)
        self.length, self.total_return, self.finished = 0, 0.0, False

    def require_env(self) -> Any:
        if self.env is None:
            raise NodeSetError("env_gym: no episode loaded (set the panel and run 'play')")
        return self.env

    def metrics(self) -> dict[str, float]:
        threshold = self.env.spec.reward_threshold if self.env is not None else None
        success = threshold is not None and self.total_return >= threshold
        return {"return": self.total_return, "length": self.length, "success": int(success)}

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
        self.env, self.task = None, None


class GymPanel(TaskPanel):
    """dataset → split → task_id, episode_index/seed, play, on_load."""

    tasks = TASKS
    spec = PanelSpec(
        fields=[
            *task_fields(TASKS, "CartPole-v1"),
            FieldSpec(name="episode_index", kind="int", default=0),
            FieldSpec(name="seed", kind="int", default=0),
            FieldSpec(name="step_latency_ms", kind="float", default=0.0),
            FieldSpec(
                name="render",
                kind="bool",
                default=False,
                description="Return a captioned RGB frame (>= 256 px) from every step.",
            ),
        ],
        actions=["play", "reset"],
    )

    def on_action(self, name: str) -> dict[str, Any]:
        if name != "play":
            return super().on_action(name)
        state: GymState = self.state
        state.step_latency_ms = float(self.values["step_latency_ms"] or 0.0)
        state.render = bool(self.values.get("render"))
        state.start(str(self.values["task_id"]), int(self.values["seed"]))
        state.episode_id = f"{self.values['task_id']}/{int(self.values['episode_index'])}"
        return dict(self.values)

    def on_load(self) -> LoadInfo:
        state: GymState = self.state
        env = state.require_env()
        max_steps = env.spec.max_episode_steps
        return LoadInfo(
            episode_id=state.episode_id,
            scene_id=f"{state.task}@seed{int(self.values['seed'])}",
            instruction="",
            step_budget=int(max_steps) + 1 if max_steps else None,
        )


NODESET = NodeSet(
    name="env_gym",
    version="0.1.0",
    parallelism="replicated",
    description="Gymnasium classic-control tasks.",
    state_factory=GymState,
    panel_class=GymPanel,
    metrics={
        "success": MetricSpec(kind="binary", description="return reached the task's threshold"),
        "return": MetricSpec(kind="continuous", description="sum of rewards"),
        "length": MetricSpec(kind="count", description="steps taken"),
    },
)


@NODESET.node(
    "step",
    inputs=[PortSpec(name="action", required=False)],
    outputs=[
        PortSpec(name="obs", type="array"),
        PortSpec(name="reward", type="float"),
        PortSpec(name="done", type="bool"),
        PortSpec(name="metrics", type="dict"),
        PortSpec(name="frame", type="array", description="Captioned RGB frame when render is on."),
    ],
    done_port="done",
    blocking=True,
)
def step(
    inputs: dict[str, Any], config: dict[str, Any], state: GymState, ctx: CallContext
) -> dict[str, Any]:
    """Step with ``action`` (or observe when there is none)."""
    env = state.require_env()
    reward = 0.0
    action = inputs.get("action")
    acted = action is not None and not state.finished
    if acted:
        if state.step_latency_ms > 0:
            time.sleep(state.step_latency_ms / 1000.0)
        if isinstance(env.action_space, gym.spaces.Discrete):
            action = int(np.asarray(action).reshape(-1)[0])
        else:
            action = np.asarray(action, dtype=np.float32).reshape(env.action_space.shape)
        obs, r, terminated, truncated, _ = env.step(action)
        state.obs = np.asarray(obs)
        reward = float(r)
        state.length += 1
        state.total_return += reward
        state.finished = bool(terminated or truncated)
    out: dict[str, Any] = {
        "obs": state.obs,
        "reward": reward,
        "done": state.finished,
        "metrics": state.metrics(),
    }
    if state.render:
        name = _action_name(state, action) if acted else None
        out["frame"] = _frame(state, env, name, reward)
    return out


def _frame(state: GymState, env: Any, action: str | None, reward: float) -> np.ndarray:
    picture = upscaled(np.asarray(env.render(), dtype=np.uint8))
    return captioned(picture, caption_lines(state.length, action, reward, state.total_return))


def _action_name(state: GymState, action: Any) -> str:
    """CartPole's 0/1 as push left/right; a continuous action as its numbers."""
    if isinstance(action, np.ndarray):
        return "action " + ", ".join(f"{v:+.2f}" for v in action.reshape(-1).tolist())
    names = ACTION_NAMES.get(str(state.task), ())
    return names[action] if 0 <= action < len(names) else f"action {action}"
