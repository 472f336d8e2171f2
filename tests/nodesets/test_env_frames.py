"""Env frames people can see: >= 256 px, captioned with step, action name and reward.

Drives the built-in env node sets in-process (real MiniGrid and Gymnasium CartPole) with
``render`` on, and checks that rendering changes nothing of what the env returns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agentcanvas.catalogue import ACTIVE_WORKSPACE_ENV
from agentcanvas.frame_caption import MIN_FRAME_PX, caption_lines, captioned, upscaled
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.nodesets.env_gym import _action_name as gym_action_name
from agentcanvas.nodesets.env_minigrid import _action_name as minigrid_action_name
from agentcanvas.server.registry import WorkspaceComponentRegistry

LEFT, FORWARD = 0, 2  # MiniGrid actions


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> WorkspaceComponentRegistry:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ACTIVE_WORKSPACE_ENV, raising=False)
        reg = WorkspaceComponentRegistry(workspace=tmp_path_factory.mktemp("frames_workspace"))
        reg.scan_all()
    return reg


async def _env(registry: WorkspaceComponentRegistry, name: str, **fields: Any) -> LocalNodeSet:
    env = LocalNodeSet(registry.nodeset(name))
    for field, value in fields.items():
        await env.panel_change(field, value)
    await env.panel_action("play")
    return env


def _ctx(step: int) -> CallContext:
    return CallContext(node_id="env", step=step, episode_key="ep")


def _strip(frame: np.ndarray, picture_px: int) -> np.ndarray:
    return frame[picture_px:]


async def test_minigrid_frames_are_large_and_captioned(
    registry: WorkspaceComponentRegistry,
) -> None:
    env = await _env(registry, "env_minigrid", task_id="MiniGrid-Empty-5x5-v0", seed=1, render=True)
    start = env.call_sync("step", {}, {}, _ctx(0))["frame"]
    turned = env.call_sync("step", {}, {"action": LEFT}, _ctx(1))["frame"]
    await env.close()
    width = start.shape[1]
    assert width >= MIN_FRAME_PX and start.shape[0] > width  # the caption strip sits below
    assert start.shape == turned.shape and start.dtype == np.uint8
    assert not np.array_equal(_strip(start, width), _strip(turned, width))  # new caption
    assert _strip(turned, width).max() > 200  # light text on the dark strip
    assert minigrid_action_name(FORWARD) == "forward" and minigrid_action_name(LEFT) == "left"
    assert minigrid_action_name(99) == "action 99"


async def test_cartpole_renders_large_frames_without_changing_the_episode(
    registry: WorkspaceComponentRegistry,
) -> None:
    plain = await _env(registry, "env_gym", task_id="CartPole-v1", seed=3)
    shown = await _env(registry, "env_gym", task_id="CartPole-v1", seed=3, render=True)
    for step in range(6):
        action = None if step == 0 else step % 2
        inputs = {} if action is None else {"action": action}
        a = plain.call_sync("step", {}, inputs, _ctx(step))
        b = shown.call_sync("step", {}, inputs, _ctx(step))
        assert "frame" not in a
        assert np.array_equal(a["obs"], b["obs"]) and a["metrics"] == b["metrics"]
        assert min(b["frame"].shape[:2]) >= MIN_FRAME_PX
    assert gym_action_name(shown.state, 0) == "push left"
    assert gym_action_name(shown.state, 1) == "push right"
    await plain.close()
    await shown.close()


def test_caption_lines_name_the_action_and_the_reward() -> None:
    assert caption_lines(0, None, 0.0, 0.0) == ["step 0 · start", "return 0.000"]
    assert caption_lines(7, "forward", 0.9, 0.9) == [
        "step 7 · forward",
        "reward +0.900 · return 0.900",
    ]


def test_captioned_keeps_the_picture_and_upscaled_is_a_whole_factor() -> None:
    picture = np.arange(8 * 5 * 3, dtype=np.uint8).reshape(8, 5, 3)
    big = upscaled(picture)
    assert big.shape == (8 * 52, 5 * 52, 3)  # ceil(256 / 5) = 52
    assert np.array_equal(big[::52, ::52], picture)
    out = captioned(big, ["a long caption that will not fit in so narrow a frame at all"])
    assert np.array_equal(out[: big.shape[0]], big) and out.shape[1] == big.shape[1]
