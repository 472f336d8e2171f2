"""policy_mlp: a small PyTorch MLP policy for CartPole-v1 (shared, batched).

Weights are trained by ``scripts/train_policy_mlp.py`` and committed small. ``act`` is greedy by
default; ``mode: sample`` draws from a generator seeded by (episode seed, step) carried in the
request, never from a server-global RNG. The batch mode (padded or single) is measured at
start-up and reported through ``determinism``.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from agentcanvas.nodes import BatchItem, NodeSet, PortSpec


class ActConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["greedy", "sample"] = "greedy"


class PolicyState:
    """The loaded policy and its measured batch mode."""

    def __init__(self) -> None:
        from agentcanvas.models.policy_mlp import choose_mode, load_policy

        self.policy = load_policy()
        probes = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
        self.report = choose_mode(self.policy, probes, self.policy.max_batch)
        self.mode = self.report.mode


NODESET = NodeSet(
    name="policy_mlp",
    version="0.1.0",
    parallelism="shared",
    description="MLP policy for CartPole-v1 (PyTorch), batch-invariant.",
    forkable=False,  # torch: spawned, never forked from a template
    state_factory=PolicyState,
    determinism=lambda state: {
        "act": state.mode if state.report.ok else f"{state.mode} (check failed)"
    },
)


@NODESET.batched_node(
    "act",
    inputs=[PortSpec(name="obs", type="array")],
    outputs=[PortSpec(name="action", type="int"), PortSpec(name="logits", type="array")],
    config=ActConfig,
    examples=[
        {"obs": row} for row in np.random.default_rng(1).normal(size=(6, 4)).astype(np.float32)
    ],
)
def act(items: list[BatchItem], config: dict[str, Any], state: PolicyState) -> list[dict[str, Any]]:
    """One action per observation."""
    mode = ActConfig.model_validate(config).mode
    obs = np.stack([np.asarray(inputs["obs"], dtype=np.float32) for inputs, _ in items])
    seeds = [(ctx.episode_seed, ctx.step) for _, ctx in items]
    logits = state.policy.logits(obs, state.mode)
    actions = state.policy.act(
        obs, mode, seeds if mode == "sample" else None, batch_mode=state.mode
    )
    return [{"action": int(actions[i]), "logits": logits[i]} for i in range(len(items))]
