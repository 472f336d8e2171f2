"""The built-in node sets (core, env_minigrid, env_gym, planner) and the babyai_oracle graph."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from agentcanvas.catalogue import ACTIVE_WORKSPACE_ENV
from agentcanvas.errors import UserInputError
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.episode import EpisodeOptions, EpisodeSpec, EpisodeWiring, run_episode
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.server.registry import WorkspaceComponentRegistry

FORWARD = 2  # MiniGrid action


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> WorkspaceComponentRegistry:
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ACTIVE_WORKSPACE_ENV, raising=False)
        reg = WorkspaceComponentRegistry(workspace=tmp_path_factory.mktemp("empty_workspace"))
        reg.scan_all()
    return reg


def _fresh(registry: WorkspaceComponentRegistry, name: str) -> LocalNodeSet:
    """An instance with its own state, so tests do not share a simulator."""
    return LocalNodeSet(registry.nodeset(name))


def _ctx(step: int = 0, key: str = "ep", **kwargs: Any) -> CallContext:
    return CallContext(node_id="n", step=step, episode_key=key, **kwargs)


async def _play(env: LocalNodeSet, **fields: Any) -> Any:
    for name, value in fields.items():
        await env.panel_change(name, value)
    await env.panel_action("play")
    return await env.panel_load()


# -- babyai_oracle: env_minigrid driven by the planner -----------------------------------


async def _oracle_episode(
    registry: WorkspaceComponentRegistry, env: LocalNodeSet, task: str, index: int
) -> EpisodeResult:
    graph = registry.load_graph("babyai_oracle")
    spec = EpisodeSpec(index, task, index, episode_seed(0, task, index), key=f"{task}:{index}")
    wiring = EpisodeWiring(resolver=registry, env=env, env_panel_overrides={"env_minigrid": env})
    return await asyncio.wait_for(run_episode(graph, spec, wiring, EpisodeOptions()), 60.0)


@pytest.mark.parametrize("task", ["BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0"])
async def test_the_planner_reaches_success_on_several_seeds(
    registry: WorkspaceComponentRegistry, task: str
) -> None:
    env = _fresh(registry, "env_minigrid")
    seeds = set()
    for index in range(6):
        result = await _oracle_episode(registry, env, task, index)
        assert result.status == "completed", result.error
        assert result.metrics["success"] == 1
        assert result.metrics["spl"] == 1.0  # an oracle walks a shortest path
        assert result.metrics["return"] > 0
        assert result.steps == result.metrics["steps"] + 1  # iteration 0 only observes
        seeds.add(result.seed)
    assert len(seeds) == 6
    await env.close()


async def test_the_same_oracle_episode_twice_gives_the_same_record(
    registry: WorkspaceComponentRegistry,
) -> None:
    env = _fresh(registry, "env_minigrid")
    first = await _oracle_episode(registry, env, "BabyAI-GoToLocal-v0", 3)
    await _oracle_episode(registry, env, "BabyAI-GoToLocal-v0", 4)  # something in between
    again = await _oracle_episode(registry, env, "BabyAI-GoToLocal-v0", 3)
    assert first.identity() == again.identity()
    await env.close()


# -- env_minigrid ------------------------------------------------------------------------


async def test_minigrid_panel_cascade(registry: WorkspaceComponentRegistry) -> None:
    env = _fresh(registry, "env_minigrid")
    assert env.panel is not None
    assert env.panel.values["dataset"] == "babyai" and env.panel.values["split"] == "GoTo"
    values = await env.panel_change("dataset", "minigrid")
    assert (values["split"], values["task_id"]) == ("Empty", "MiniGrid-Empty-5x5-v0")
    values = await env.panel_change("dataset", "babyai")
    assert (values["split"], values["task_id"]) == ("GoTo", "BabyAI-GoToObj-v0")
    values = await env.panel_change("split", "GoToLocal")
    assert values["task_id"] == "BabyAI-GoToLocalS5N2-v0"
    assert env.panel.choices("task_id") == [
        "BabyAI-GoToLocalS5N2-v0",
        "BabyAI-GoToLocalS6N3-v0",
        "BabyAI-GoToLocalS7N4-v0",
        "BabyAI-GoToLocalS8N7-v0",
    ]
    # a task id alone selects its dataset and split
    values = await env.panel_change("task_id", "MiniGrid-Empty-8x8-v0")
    assert (values["dataset"], values["split"]) == ("minigrid", "Empty")
    with pytest.raises(UserInputError, match="'dataset'"):
        await env.panel_change("dataset", "atari")
    with pytest.raises(UserInputError, match="unknown level 'BabyAI-Nope-v0'"):
        await env.panel_change("task_id", "BabyAI-Nope-v0")


async def test_minigrid_on_load_and_step(registry: WorkspaceComponentRegistry) -> None:
    env = _fresh(registry, "env_minigrid")
    info = await _play(env, task_id="BabyAI-GoToObj-v0", episode_index=4, seed=123)
    sim = env.state.env.unwrapped
    assert info.episode_id == "BabyAI-GoToObj-v0/4"
    assert info.scene_id == "BabyAI-GoToObj-v0@seed123"
    assert info.instruction == sim.mission and info.instruction.startswith("go to the ")
    assert info.step_budget == sim.max_steps + 1
    assert info.extra["shortest_path"] >= 1

    first = env.call_sync("step", {}, {}, _ctx(0))
    assert first["mission"] == info.instruction
    assert first["image"].shape == (7, 7, 3)
    assert first["done"] is False and first["reward"] == 0.0
    assert first["metrics"] == {"success": 0, "spl": 0.0, "steps": 0, "return": 0.0}
    assert first["target"]["mode"] == "face" and first["target"]["cells"]
    after = env.call_sync("step", {}, {"action": FORWARD}, _ctx(1))
    assert after["metrics"]["steps"] == 1
    assert "frame" not in after  # render is off


async def test_minigrid_view_is_the_one_the_level_computes_after_every_step(
    registry: WorkspaceComponentRegistry,
) -> None:
    """The step reuses the view reset / step computed instead of asking the level again: it
    must be the view ``gen_obs`` gives at that state, after observing, acting and finishing,
    and a caller that writes into it changes nothing the next call returns."""
    env = _fresh(registry, "env_minigrid")
    await _play(env, task_id="BabyAI-GoToLocal-v0", seed=5)
    sim = env.state.env.unwrapped
    actions = [None, 0, FORWARD, FORWARD, 1, FORWARD, None, 2, 0, 0, FORWARD]
    for step, action in enumerate(actions):
        inputs = {} if action is None else {"action": action}
        view = env.call_sync("step", {}, inputs, _ctx(step))["image"]
        assert np.array_equal(view, sim.gen_obs()["image"]), f"step {step}"
        view[...] = 0  # the caller's copy
    assert np.array_equal(env.call_sync("step", {}, {}, _ctx(99))["image"], sim.gen_obs()["image"])


async def test_minigrid_same_seed_same_level(registry: WorkspaceComponentRegistry) -> None:
    env = _fresh(registry, "env_minigrid")
    grids = []
    for _ in range(2):
        await _play(env, task_id="BabyAI-GoToLocal-v0", seed=77)
        grids.append(env.call_sync("step", {}, {}, _ctx(0))["grid"])
    assert np.array_equal(grids[0], grids[1])


async def test_minigrid_frames_are_saved_as_png_assets(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    env = _fresh(registry, "env_minigrid")
    await _play(env, task_id="MiniGrid-Empty-5x5-v0", seed=1, render=True)
    frame = env.call_sync("step", {}, {}, _ctx(0))["frame"]
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
    core = _fresh(registry, "core")
    ctx = CallContext(node_id="rec", step=3, asset_dir=str(tmp_path / "assets"))
    name = core.call_sync("recordFrame", {}, {"frame": frame}, ctx)["path"]
    assert name == "step0003_rec.png"
    with Image.open(tmp_path / "assets" / name) as image:
        assert image.format == "PNG" and image.size == (frame.shape[1], frame.shape[0])
    assert core.call_sync("recordFrame", {}, {"frame": frame}, _ctx(0)) == {"path": ""}


# -- env_gym -----------------------------------------------------------------------------


async def _cartpole(registry: WorkspaceComponentRegistry, policy: Any) -> dict[str, Any]:
    env = _fresh(registry, "env_gym")
    info = await _play(env, task_id="CartPole-v1", seed=0)
    assert (info.episode_id, info.step_budget) == ("CartPole-v1/0", 501)
    out = env.call_sync("step", {}, {}, _ctx(0))
    assert out["obs"].shape == (4,) and out["done"] is False
    assert out["metrics"] == {"return": 0.0, "length": 0, "success": 0}
    for step in range(1, info.step_budget):
        out = env.call_sync("step", {}, {"action": policy(out["obs"])}, _ctx(step))
        if out["done"]:
            break
    await env.close()
    return out


async def test_cartpole_balanced_to_the_threshold_is_a_success(
    registry: WorkspaceComponentRegistry,
) -> None:
    out = await _cartpole(registry, lambda obs: int(obs[2] + 0.5 * obs[3] > 0))
    assert out["done"] is True
    assert out["metrics"] == {"return": 500.0, "length": 500, "success": 1}  # threshold 475


async def test_cartpole_falling_over_is_not_a_success(registry: WorkspaceComponentRegistry) -> None:
    out = await _cartpole(registry, lambda obs: 0)
    assert out["done"] is True
    assert out["metrics"]["length"] < 100 and out["metrics"]["success"] == 0
    assert out["metrics"]["return"] == float(out["metrics"]["length"])


async def test_gym_panel_cascade_and_a_task_without_threshold(
    registry: WorkspaceComponentRegistry,
) -> None:
    env = _fresh(registry, "env_gym")
    values = await env.panel_change("split", "continuous")
    assert values["task_id"] == "Pendulum-v1"
    info = await _play(env, seed=5)
    assert info.episode_id == "Pendulum-v1/0" and info.step_budget == 201
    out = env.call_sync("step", {}, {"action": [0.0]}, _ctx(1))
    assert out["metrics"]["length"] == 1 and out["metrics"]["success"] == 0
    await env.close()


# -- core --------------------------------------------------------------------------------


def test_core_counter_keeps_keyed_state_that_evict_drops(
    registry: WorkspaceComponentRegistry,
) -> None:
    core = _fresh(registry, "core")
    for key in ("ep1", "ep1", "ep2"):
        core.call_sync("counter", {}, {}, _ctx(key=key))
    assert core.call_sync("counter", {}, {"increment": 2.5}, _ctx(key="ep1")) == {"count": 4.5}
    assert set(core.state.counters) == {("ep1", "n"), ("ep2", "n")}
    asyncio.run(core.evict("ep1"))
    assert set(core.state.counters) == {("ep2", "n")}
    assert core.call_sync("counter", {}, {}, _ctx(key="ep1")) == {"count": 1.0}


@pytest.mark.parametrize(
    ("node", "config", "inputs", "expected"),
    [
        ("constant", {"value": [1, 2]}, {}, {"value": [1, 2]}),
        ("arith", {"op": "sub"}, {"a": 5, "b": 3}, {"out": 2}),
        ("arith", {}, {"a": 5, "b": 3}, {"out": 8}),
        ("arith", {"op": "max"}, {"a": 5, "b": 9}, {"out": 9}),
        ("compare", {"op": "lt"}, {"a": 1, "b": 2}, {"out": True}),
        ("compare", {}, {"a": 1, "b": 2}, {"out": False}),
        ("select", {}, {"cond": False, "a": "x", "b": "y"}, {"out": "y"}),
        ("stopWhen", {}, {"cond": 1}, {"done": True}),
        ("graphOut", {}, {"anything": 1}, {}),
    ],
)
def test_core_glue_nodes(
    registry: WorkspaceComponentRegistry,
    node: str,
    config: dict[str, Any],
    inputs: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    assert _fresh(registry, "core").call_sync(node, config, inputs, _ctx()) == expected


def test_core_graph_in_reports_the_episode(registry: WorkspaceComponentRegistry) -> None:
    ctx = _ctx(step=4, key="k", episode_seed=99, task="t")
    out = _fresh(registry, "core").call_sync("graphIn", {}, {}, ctx)
    assert out == {"task": "t", "episode_key": "k", "seed": 99, "step": 4}


def test_builtin_manifests(registry: WorkspaceComponentRegistry) -> None:
    kinds = {
        n: registry.manifest(n).parallelism for n in ("core", "planner", "env_minigrid", "env_gym")
    }
    assert kinds == {
        "core": "local",
        "planner": "local",
        "env_minigrid": "replicated",
        "env_gym": "replicated",
    }
    for env in ("env_minigrid", "env_gym"):
        manifest = registry.manifest(env)
        assert manifest.panel is not None and manifest.panel.actions == ["play", "reset"]
        assert {"dataset", "split", "task_id", "episode_index", "seed"} <= {
            f.name for f in manifest.panel.fields
        }
        step = manifest.node_type("step")
        assert step is not None and step.done_port == "done" and step.blocking


def test_planner_without_a_path_turns_and_says_so(registry: WorkspaceComponentRegistry) -> None:
    grid = np.zeros((5, 5, 3), dtype=np.uint8)
    grid[:, :, 0] = 2  # all walls
    grid[2, 2, 0] = 1  # the agent's empty cell
    out = _fresh(registry, "planner").call_sync(
        "navigate",
        {},
        {
            "grid": grid,
            "agent_pos": [2, 2],
            "agent_dir": 0,
            "target": {"type": "ball", "color": "red"},
        },
        _ctx(),
    )
    assert out == {"action": 0, "plan_length": 0, "plan_found": False}
