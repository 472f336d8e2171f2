"""env_gym: Gymnasium classic-control tasks (replicated: one env per process).

Panel cascade as env_minigrid: ``dataset`` (classic_control) → ``split`` (discrete,
continuous) → ``task_id``. ``step`` with no action observes; metrics are ``return``,
``length`` and ``success``: 1 when the episode's return reaches the task's Gymnasium
``reward_threshold`` (CartPole-v1: 475, Acrobot-v1: -100, MountainCar-v0: -110,
Pendulum-v1: none, so success is always 0 there).
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
    NodeSet,
    NodeSetError,
    PanelSpec,
    PortSpec,
    TaskPanel,
    task_fields,
)

TASKS: dict[str, dict[str, list[str]]] = {
    "classic_control": {
        "discrete": ["CartPole-v1", "Acrobot-v1", "MountainCar-v0"],
        "continuous": ["Pendulum-v1"],
    }
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

    def start(self, task: str, seed: int) -> None:
        if task != self.task:
            self.close()
            self.env = gym.make(task)
            self.task = task
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
        ],
        actions=["play", "reset"],
    )

    def on_action(self, name: str) -> dict[str, Any]:
        if name != "play":
            return super().on_action(name)
        state: GymState = self.state
        state.step_latency_ms = float(self.values["step_latency_ms"] or 0.0)
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
)


@NODESET.node(
    "step",
    inputs=[PortSpec(name="action", required=False)],
    outputs=[
        PortSpec(name="obs", type="array"),
        PortSpec(name="reward", type="float"),
        PortSpec(name="done", type="bool"),
        PortSpec(name="metrics", type="dict"),
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
    if action is not None and not state.finished:
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
    return {"obs": state.obs, "reward": reward, "done": state.finished, "metrics": state.metrics()}
