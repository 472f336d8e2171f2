"""metaworld_expert: MetaWorld's scripted expert policies (local, stateless).

Every MetaWorld v3 task ships a hand-written expert (``metaworld.policies.ENV_POLICY_MAP``):
a function of the current 39-float state alone, with no memory and no randomness. ``act``
picks the expert of the episode's task (the task the run's env is on) and returns its action
clipped to [-1, 1], as MetaWorld's own evaluation does. It is the baseline a learned policy
on MetaWorld is compared against. The experts read the goal from the state: on the ML
benchmarks, where the goal is hidden (zeros), they fail the tasks that need it (reach-v3
on ML1's test goals: 0 of 50).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from agentcanvas.nodes import CallContext, NodeSet, NodeSetError, PortSpec


class ExpertState:
    """One expert object per task, made on first use. MetaWorld's fifty policy modules are
    imported with the state, as the run starts (about 0.3 s here), not by the first episode's
    first call, whose per-step deadline and timing would pay for it."""

    def __init__(self) -> None:
        from metaworld.policies import ENV_POLICY_MAP

        # The experts warn "Constant(s) may be too high" on many steps (the action is
        # clipped, as here): filtered for the process as the state is made, not per call (a
        # filter change per call makes every later warning check start over).
        warnings.filterwarnings(
            "ignore", "Constant\\(s\\) may be too high", UserWarning, "metaworld"
        )

        self.policies: dict[str, Any] = dict(ENV_POLICY_MAP)
        self.experts: dict[str, Any] = {}

    def expert(self, task: str) -> Any:
        if task not in self.experts:
            policies = self.policies
            if task not in policies:
                raise NodeSetError(
                    f"metaworld_expert: no scripted expert for task {task!r} "
                    f"(MetaWorld ships one per v3 task, e.g. 'reach-v3')"
                )
            self.experts[task] = policies[task]()
        return self.experts[task]


NODESET = NodeSet(
    name="metaworld_expert",
    version="0.1.0",
    parallelism="local",
    description="MetaWorld's scripted expert policies, one per task.",
    state_factory=ExpertState,
)


def expert_action(state: ExpertState, task: str, obs: Any) -> np.ndarray:
    """The task's expert action for ``obs``, clipped to [-1, 1] (float64, 4 values)."""
    action = state.expert(task).get_action(np.asarray(obs, dtype=np.float64))
    return np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)


@NODESET.node(
    "act",
    inputs=[PortSpec(name="obs", type="array", description="MetaWorld's 39-float state.")],
    outputs=[PortSpec(name="action", type="array", description="4 floats in [-1, 1].")],
)
def act(
    inputs: dict[str, Any], config: dict[str, Any], state: ExpertState, ctx: CallContext
) -> dict[str, Any]:
    """The scripted expert's action for the episode's task."""
    if not ctx.task:
        raise NodeSetError("metaworld_expert: the call carries no task (run it in an episode)")
    return {"action": expert_action(state, ctx.task, inputs["obs"])}
