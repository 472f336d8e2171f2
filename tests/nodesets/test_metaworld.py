"""The env_metaworld and metaworld_expert node sets and the metaworld_expert graph.

Episodes run in-process on real MetaWorld v3 (MuJoCo): state observations, the fast tasks
(reach, drawer-close, button-press-topdown), pictures only at 32 px. Each episode the node set
runs is checked against a plain MetaWorld loop written here as the module docstring gives it.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentcanvas.catalogue import ACTIVE_WORKSPACE_ENV
from agentcanvas.errors import UserInputError
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.episode import EpisodeOptions, EpisodeSpec, EpisodeWiring, run_episode
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.frame_caption import upscaled
from agentcanvas.nodes import NodeSetError
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.nodes.manifest import LoadInfo
from agentcanvas.nodesets import env_metaworld
from agentcanvas.nodesets.env_metaworld import (
    TASKS,
    MetaWorldState,
    variations,
    variations_cache,
)
from agentcanvas.nodesets.metaworld_expert import ExpertState, expert_action
from agentcanvas.server.registry import WorkspaceComponentRegistry

pytestmark = pytest.mark.filterwarnings("ignore:Constant\\(s\\) may be too high:UserWarning")

REACH, DRAWER_CLOSE, BUTTON = "reach-v3", "drawer-close-v3", "button-press-topdown-v3"
DOOR_CLOSE = "door-close-v3"  # an ML10 test task
_OTHER = {"train": "test", "test": "train"}
STATE_DIM = 39  # MetaWorld's state observation
GOAL = slice(36, 39)  # its last three floats: the goal (zeros when hidden, the ML benchmarks)


@pytest.fixture(scope="module", autouse=True)
def variations_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The made variations are cached under XDG_CACHE_HOME: this module's own, never ~/.cache."""
    home = tmp_path_factory.mktemp("xdg_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(home))
        yield home


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


async def _play(env: LocalNodeSet, **fields: Any) -> LoadInfo:
    """The panel's defaults, then ``fields`` in order, ``play`` and ``on_load``."""
    await env.panel_action("reset")
    for name, value in fields.items():
        await env.panel_change(name, value)
    await env.panel_action("play")
    return await env.panel_load()


# -- a plain MetaWorld loop, as the env_metaworld docstring gives it --------------------------


_BENCHMARKS: dict[tuple[str, str, int], Any] = {}


def _benchmark(kind: str, task: str, benchmark_seed: int) -> Any:
    """metaworld.MT1 / ML1 of ``task`` (cached: building one resets an env 50 times)."""
    import metaworld

    key = (kind, task, benchmark_seed)
    if key not in _BENCHMARKS:
        maker = metaworld.MT1 if kind == "MT" else metaworld.ML1
        _BENCHMARKS[key] = maker(task, seed=benchmark_seed)
    return _BENCHMARKS[key]


@dataclass
class Trajectory:
    observations: list[np.ndarray] = field(default_factory=list)
    successes: list[bool] = field(default_factory=list)  # MetaWorld's info["success"], per step
    total_return: float = 0.0
    generator: dict[str, Any] = field(default_factory=dict)  # env.np_random after the reset

    @property
    def metrics(self) -> dict[str, Any]:
        return {
            "success": int(any(self.successes)),
            "return": self.total_return,
            "length": len(self.successes),
        }


def _plain_episode(
    task: str,
    index: int,
    seed: int,
    *,
    kind: str = "MT",
    split: str = "train",
    benchmark_seed: int = 0,
    max_steps: int = 500,
    terminate_on_success: bool = True,
    expert: bool = True,
) -> Trajectory:
    """Episode ``index`` of ``task`` with MetaWorld alone, stepped by the task's scripted
    expert (its action clipped to [-1, 1]), or only reset (``expert=False``)."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS
    from metaworld.policies import ENV_POLICY_MAP

    bench = _benchmark(kind, task, benchmark_seed)
    goals = bench.test_tasks if split == "test" else bench.train_tasks
    assert bench.train_classes[task] is ALL_V3_ENVIRONMENTS[task]
    env = bench.train_classes[task]()
    env.set_task(goals[index % 50])
    env.seed(seed)
    obs, _ = env.reset()
    out = Trajectory(observations=[obs.copy()], generator=env.np_random.bit_generator.state)
    policy = ENV_POLICY_MAP[task]()
    while expert and len(out.successes) < max_steps:
        obs, reward, _, truncated, info = env.step(np.clip(policy.get_action(obs), -1.0, 1.0))
        out.observations.append(obs.copy())
        out.successes.append(bool(info["success"]))
        out.total_return += float(reward)
        if truncated or (terminate_on_success and info["success"]):
            break
    env.close()
    return out


# -- the node sets, driven here or by the graph ---------------------------------------------


async def _node_episode(
    env: LocalNodeSet, expert: LocalNodeSet, task: str, **fields: Any
) -> tuple[Trajectory, list[dict[str, Any]], LoadInfo]:
    """Play ``task`` with ``fields`` on the panel; observe, then step with the expert node's
    action until ``done``. The trajectory, every step's output, and the load info."""
    info = await _play(env, task_id=task, **fields)
    out = env.call_sync("step", {}, {}, _ctx(0))
    trajectory, outputs = Trajectory(observations=[out["obs"].copy()]), [out]
    for step in range(1, info.step_budget):
        action = expert.call_sync("act", {}, {"obs": out["obs"]}, _ctx(step, task=task))["action"]
        out = env.call_sync("step", {}, {"action": action}, _ctx(step))
        trajectory.observations.append(out["obs"].copy())
        trajectory.successes.append(bool(out["metrics"]["success"]))
        trajectory.total_return += out["reward"]
        outputs.append(out)
        if out["done"]:
            break
    return trajectory, outputs, info


def _same_observations(a: Trajectory, b: Trajectory) -> bool:
    return len(a.observations) == len(b.observations) and all(
        x.dtype == y.dtype == np.float64 and x.tobytes() == y.tobytes()
        for x, y in zip(a.observations, b.observations, strict=True)
    )


async def _graph_episode(
    registry: WorkspaceComponentRegistry, env: LocalNodeSet, task: str, index: int
) -> EpisodeResult:
    graph = registry.load_graph("metaworld_expert")
    spec = EpisodeSpec(index, task, index, episode_seed(0, task, index), key=f"{task}:{index}")
    wiring = EpisodeWiring(resolver=registry, env=env, env_panel_overrides={"env_metaworld": env})
    return await asyncio.wait_for(run_episode(graph, spec, wiring, EpisodeOptions()), 60.0)


# -- the benchmark lists and the manifests --------------------------------------------------


def test_tasks_json_is_metaworlds_own_benchmark_lists() -> None:
    from metaworld import env_dict

    metaworlds = {
        "MT10": {"train": list(env_dict.MT10_V3)},
        "MT50": {"train": list(env_dict.MT50_V3)},
        "ML10": {split: list(env_dict.ML10_V3[split]) for split in ("train", "test")},
        "ML45": {split: list(env_dict.ML45_V3[split]) for split in ("train", "test")},
    }
    assert metaworlds == TASKS
    assert len(TASKS["MT50"]["train"]) == 50 and set(TASKS["MT50"]["train"]) == set(
        env_dict.ALL_V3_ENVIRONMENTS
    )


def test_importing_the_node_sets_loads_no_mujoco_and_defaults_to_egl() -> None:
    """Listing the node sets (and forking their servers) must not start MuJoCo."""
    code = (
        "import os, sys\n"
        "os.environ.pop('MUJOCO_GL', None)\n"
        "import agentcanvas.nodesets.env_metaworld, agentcanvas.nodesets.metaworld_expert\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('mujoco', 'metaworld'))\n"
        "print(os.environ['MUJOCO_GL'], heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "egl []"


def test_manifests(registry: WorkspaceComponentRegistry) -> None:
    env, expert = registry.manifest("env_metaworld"), registry.manifest("metaworld_expert")
    assert (env.parallelism, env.forkable, expert.parallelism) == ("replicated", True, "local")
    assert env.panel is not None and env.panel.actions == ["play", "reset"]
    defaults = {f.name: f.default for f in env.panel.fields}
    assert defaults == {
        "dataset": "MT10",
        "split": "train",
        "task_id": REACH,
        "episode_index": 0,
        "seed": 0,
        "benchmark_seed": 0,
        "max_steps": 500,
        "terminate_on_success": True,
        "images": False,
        "camera": "corner2",
        "image_size": 128,
        "render": False,
    }
    assert {name: spec.kind for name, spec in env.metrics.items()} == {
        "success": "binary",
        "return": "continuous",
        "length": "count",
    }
    step = env.node_type("step")
    assert step is not None and step.done_port == "done" and step.blocking
    assert expert.node_type("act") is not None
    graph = registry.load_graph("metaworld_expert")
    assert graph.env is not None and graph.env.tasks == TASKS["MT10"]["train"]


# -- episodes are MetaWorld's ---------------------------------------------------------------


@pytest.mark.parametrize("index", [1, 7])
async def test_an_expert_episode_is_the_plain_metaworld_loop(
    registry: WorkspaceComponentRegistry, index: int
) -> None:
    seed = episode_seed(0, REACH, index)
    plain = _plain_episode(REACH, index, seed)
    assert plain.metrics["success"] == 1 and plain.metrics["length"] < 500

    env, expert = _fresh(registry, "env_metaworld"), _fresh(registry, "metaworld_expert")
    driven, outputs, info = await _node_episode(env, expert, REACH, episode_index=index, seed=seed)
    assert (info.episode_id, info.scene_id) == (
        f"MT10/train/{REACH}/{index}",
        f"{REACH}@variation{index}",
    )
    assert (info.instruction, info.step_budget) == (REACH, 501)
    assert outputs[0]["obs"].shape == (STATE_DIM,) and outputs[0]["task"] == REACH
    assert outputs[0]["metrics"] == {"success": 0, "return": 0.0, "length": 0}
    assert _same_observations(driven, plain)
    assert env.state.env.np_random.bit_generator.state == plain.generator  # env.seed(seed)
    assert outputs[-1]["metrics"] == plain.metrics and outputs[-1]["done"] is True
    assert driven.total_return == plain.total_return

    # the graph's episode: the same record, run by the episode runner
    result = await _graph_episode(registry, env, REACH, index)
    assert result.status == "completed", result.error
    assert result.metrics == plain.metrics
    assert result.steps == plain.metrics["length"] + 1  # iteration 0 only observes
    assert (result.episode_id, result.seed, result.step_budget) == (info.episode_id, seed, 501)
    await env.close()


async def test_the_episodes_of_a_task_visit_different_goals(
    registry: WorkspaceComponentRegistry,
) -> None:
    env = _fresh(registry, "env_metaworld")
    firsts = []
    for index in range(4):
        await _play(env, task_id=DRAWER_CLOSE, episode_index=index, seed=5)
        firsts.append(env.call_sync("step", {}, {}, _ctx(0))["obs"])
    assert len({first.tobytes() for first in firsts}) == 4
    assert len({first[GOAL].tobytes() for first in firsts}) == 4  # the goal is observed (MT)
    await env.close()


async def test_episode_index_50_and_up_reuses_the_goal_variation_of_index_minus_50(
    registry: WorkspaceComponentRegistry,
) -> None:
    env, expert = _fresh(registry, "env_metaworld"), _fresh(registry, "metaworld_expert")
    low_seed, high_seed = episode_seed(0, DRAWER_CLOSE, 3), episode_seed(0, DRAWER_CLOSE, 53)
    assert low_seed != high_seed
    low, _, _ = await _node_episode(env, expert, DRAWER_CLOSE, episode_index=3, seed=low_seed)
    high, _, info = await _node_episode(env, expert, DRAWER_CLOSE, episode_index=53, seed=high_seed)
    assert info.scene_id == f"{DRAWER_CLOSE}@variation3"
    assert info.episode_id == f"MT10/train/{DRAWER_CLOSE}/53"
    # the goal and object positions repeat; MetaWorld's reset does not draw from the seed
    assert high.observations[0][GOAL].tobytes() == low.observations[0][GOAL].tobytes()
    assert high.observations[0].tobytes() == low.observations[0].tobytes()
    assert _same_observations(high, _plain_episode(DRAWER_CLOSE, 3, high_seed))
    assert high.metrics == low.metrics and high.metrics["success"] == 1
    await env.close()


async def test_benchmark_seed_picks_metaworlds_variations_of_that_seed(
    registry: WorkspaceComponentRegistry,
) -> None:
    env = _fresh(registry, "env_metaworld")
    firsts = {}
    for bench_seed in (0, 1):
        await _play(env, task_id=BUTTON, episode_index=2, seed=9, benchmark_seed=bench_seed)
        firsts[bench_seed] = env.call_sync("step", {}, {}, _ctx(0))["obs"]
        plain = _plain_episode(BUTTON, 2, 9, benchmark_seed=bench_seed, expert=False)
        assert firsts[bench_seed].tobytes() == plain.observations[0].tobytes()
    assert firsts[0].tobytes() != firsts[1].tobytes()
    await env.close()


async def test_ml_benchmarks_use_ml1_train_and_test_goals_with_the_goal_hidden(
    registry: WorkspaceComponentRegistry,
) -> None:
    env = _fresh(registry, "env_metaworld")
    for split, task in (("train", DRAWER_CLOSE), ("test", DOOR_CLOSE)):
        info = await _play(env, dataset="ML10", split=split, task_id=task, episode_index=4)
        assert info.episode_id == f"ML10/{split}/{task}/4"
        first = env.call_sync("step", {}, {}, _ctx(0))["obs"]
        assert not first[GOAL].any()  # partially observable: no goal in the state
        plain = _plain_episode(task, 4, 0, kind="ML", split=split, expert=False)
        assert first.tobytes() == plain.observations[0].tobytes()
        other = _plain_episode(task, 4, 0, kind="ML", split=_OTHER[split], expert=False)
        assert first.tobytes() != other.observations[0].tobytes()  # ML1's other goals differ
    # back on an MT benchmark the same env shows the goal again
    await _play(env, dataset="MT50", task_id=DRAWER_CLOSE, episode_index=4)
    shown = env.call_sync("step", {}, {}, _ctx(0))["obs"]
    plain = _plain_episode(DRAWER_CLOSE, 4, 0, expert=False)
    assert shown.tobytes() == plain.observations[0].tobytes()
    assert shown[GOAL].any()
    await env.close()


async def test_an_episode_does_not_depend_on_what_the_instance_ran_before(
    registry: WorkspaceComponentRegistry,
) -> None:
    fresh = _fresh(registry, "env_metaworld")
    first = await _graph_episode(registry, fresh, REACH, 2)
    await fresh.close()

    used = _fresh(registry, "env_metaworld")
    for task, index in ((DRAWER_CLOSE, 0), (REACH, 5), (BUTTON, 1)):
        assert (await _graph_episode(registry, used, task, index)).status == "completed"
    again = await _graph_episode(registry, used, REACH, 2)
    assert used.state.env_builds == 4  # the env was rebuilt for each task change
    assert first.status == "completed" and first.metrics["success"] == 1
    assert first.identity() == again.identity()
    await used.close()


def test_building_variations_leaves_numpys_global_random_state_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # nothing cached: MetaWorld makes them
    np.random.seed(1234)
    expected = np.random.random(4)
    np.random.seed(1234)
    mt = variations("MT10", "train", REACH, 0)
    ml = variations("ML10", "test", DOOR_CLOSE, 3)
    assert np.array_equal(np.random.random(4), expected)
    assert len(mt) == len(ml) == 50
    assert {t.env_name for t in mt} == {REACH} and {t.env_name for t in ml} == {DOOR_CLOSE}
    assert [t.data for t in mt] == [t.data for t in _benchmark("MT", REACH, 0).train_tasks]
    assert [t.data for t in ml] == [t.data for t in _benchmark("ML", DOOR_CLOSE, 3).test_tasks]


def test_variations_restores_numpys_state_even_when_metaworld_does_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The restore is variations()' own: a benchmark that reseeds NumPy, or fails, is undone."""
    import metaworld
    from metaworld.types import Task

    class Reseeding:
        def __init__(self, task: str, seed: int) -> None:
            np.random.seed(seed)
            self.train_tasks = [Task(env_name=task, data=bytes([i])) for i in range(50)]
            np.random.random()
            if task == "fails-v3":
                raise ValueError("boom")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(metaworld, "MT1", Reseeding)
    np.random.seed(99)
    expected = np.random.random(3)
    np.random.seed(99)
    assert [t.data for t in variations("MT10", "train", REACH, 0)] == [
        bytes([i]) for i in range(50)
    ]
    with pytest.raises(ValueError, match="boom"):
        variations("MT10", "train", "fails-v3", 0)
    assert np.array_equal(np.random.random(3), expected)


def test_made_variations_are_cached_and_a_broken_cache_is_remade(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import metaworld

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = variations_cache()
    assert folder.parent == tmp_path / "agentcanvas" and folder.name.startswith("metaworld-")
    made = variations("ML45", "test", DOOR_CLOSE, 0)
    assert sorted(p.name for p in folder.iterdir()) == [f"ML1-test-{DOOR_CLOSE}-seed0.msgpack"]

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("MetaWorld asked although the variations are cached")

    with monkeypatch.context() as patch:
        patch.setattr(metaworld, "ML1", unavailable)
        patch.setattr(metaworld, "MT1", unavailable)
        read = variations("ML10", "test", DOOR_CLOSE, 0)  # same family, split, task and seed
    assert [(t.env_name, t.data) for t in read] == [(t.env_name, t.data) for t in made]

    cached = folder / f"ML1-test-{DOOR_CLOSE}-seed0.msgpack"
    cached.write_bytes(b"\x00not msgpack")
    remade = variations("ML10", "test", DOOR_CLOSE, 0)
    assert [t.data for t in remade] == [t.data for t in made]
    assert cached.read_bytes() != b"\x00not msgpack"
    assert not [p for p in folder.iterdir() if p.name.endswith(".partial")]


async def test_playing_an_episode_leaves_numpys_global_random_state_alone(
    registry: WorkspaceComponentRegistry,
) -> None:
    env = _fresh(registry, "env_metaworld")
    np.random.seed(7)
    expected = np.random.random(2)
    np.random.seed(7)
    await _play(env, task_id=BUTTON, episode_index=1, seed=3)
    env.call_sync("step", {}, {"action": [0.1, 0.0, -0.1, 0.0]}, _ctx(1))
    assert np.array_equal(np.random.random(2), expected)
    await env.close()


# -- the expert and the episode's end -------------------------------------------------------


@pytest.mark.parametrize("task", [REACH, DRAWER_CLOSE])
async def test_the_expert_solves_every_episode(
    registry: WorkspaceComponentRegistry, task: str
) -> None:
    env = _fresh(registry, "env_metaworld")
    results = [await _graph_episode(registry, env, task, index) for index in range(5)]
    assert [r.status for r in results] == ["completed"] * 5, [r.error for r in results]
    assert [r.metrics["success"] for r in results] == [1] * 5
    assert all(r.metrics["length"] < 500 and r.steps == r.metrics["length"] + 1 for r in results)
    assert len({r.seed for r in results}) == 5
    await env.close()


async def test_terminate_on_success_ends_the_episode_at_its_first_success(
    registry: WorkspaceComponentRegistry,
) -> None:
    env, expert = _fresh(registry, "env_metaworld"), _fresh(registry, "metaworld_expert")
    seed = episode_seed(0, REACH, 2)
    plain = _plain_episode(REACH, 2, seed, max_steps=60, terminate_on_success=False)
    first_success = plain.successes.index(True) + 1
    assert 30 < first_success < 60  # the test's premise: success after 30 steps, before 60

    on, _, _ = await _node_episode(env, expert, REACH, episode_index=2, seed=seed)
    assert on.metrics["length"] == first_success and on.metrics["success"] == 1

    off, outputs, info = await _node_episode(
        env, expert, REACH, episode_index=2, seed=seed, max_steps=60, terminate_on_success=False
    )
    assert info.step_budget == 61
    assert _same_observations(off, plain) and off.total_return == plain.total_return
    assert outputs[-1]["metrics"] == plain.metrics == {**plain.metrics, "success": 1, "length": 60}
    assert [o["done"] for o in outputs] == [False] * 60 + [True]
    # success is 1 from the first successful step on: "any step succeeded"
    assert [o["metrics"]["success"] for o in outputs[1:]] == [
        int(any(plain.successes[: t + 1])) for t in range(60)
    ]

    cut, outputs, _ = await _node_episode(
        env, expert, REACH, episode_index=2, seed=seed, max_steps=30
    )
    assert outputs[-1]["done"] is True
    assert outputs[-1]["metrics"] == {
        "success": 0,
        "return": sum(float(o["reward"]) for o in outputs),
        "length": 30,
    }
    assert _same_observations(cut, Trajectory(observations=plain.observations[:31]))
    # after the end an action changes nothing
    after = env.call_sync("step", {}, {"action": [1.0, 1.0, 1.0, 1.0]}, _ctx(31))
    assert after["obs"].tobytes() == outputs[-1]["obs"].tobytes()
    assert (after["reward"], after["done"], after["metrics"]) == (0.0, True, outputs[-1]["metrics"])
    await env.close()


class _ScriptedEnv:
    """Stands in for a MetaWorld env: reports the given successes, step by step."""

    def __init__(self, successes: list[bool]) -> None:
        self.successes, self.actions = list(successes), []

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.actions.append(action)
        success = self.successes.pop(0)
        return (
            np.full(STATE_DIM, len(self.actions), dtype=np.float64),
            0.5,
            False,
            False,
            {"success": float(success)},
        )


@pytest.mark.parametrize(
    ("terminate", "lengths", "successes"),
    [(False, [1, 2, 3, 4], [0, 1, 1, 1]), (True, [1, 2, 2, 2], [0, 1, 1, 1])],
)
def test_success_counts_a_success_that_did_not_last(
    terminate: bool, lengths: list[int], successes: list[int]
) -> None:
    state = MetaWorldState()
    state.env = _ScriptedEnv([False, True, False, False])
    state.task, state.obs, state.max_steps = REACH, np.zeros(STATE_DIM), 4
    state.terminate_on_success = terminate
    outs = [
        env_metaworld.step({"action": [2.0, 0.0, 0.0, -2.0]}, {}, state, _ctx(t))
        for t in range(1, 5)
    ]
    assert [o["metrics"]["length"] for o in outs] == lengths
    assert [o["metrics"]["success"] for o in outs] == successes
    assert outs[-1]["done"] is True
    assert outs[-1]["metrics"]["return"] == 0.5 * lengths[-1]
    assert state.env.actions[0].dtype == np.float32
    assert state.env.actions[0].tolist() == [1.0, 0.0, 0.0, -1.0]  # clipped


async def test_the_expert_node_is_metaworlds_policy_clipped(
    registry: WorkspaceComponentRegistry,
) -> None:
    from metaworld.policies import ENV_POLICY_MAP

    env, expert = _fresh(registry, "env_metaworld"), _fresh(registry, "metaworld_expert")
    await _play(env, task_id=BUTTON, episode_index=0, seed=1)
    obs = env.call_sync("step", {}, {}, _ctx(0))["obs"]
    action = expert.call_sync("act", {}, {"obs": obs}, _ctx(1, task=BUTTON))["action"]
    raw = ENV_POLICY_MAP[BUTTON]().get_action(obs)
    assert action.dtype == np.float64 and action.shape == (4,)
    assert np.array_equal(action, np.clip(raw, -1.0, 1.0))
    assert np.abs(raw).max() > 1.0  # the clip matters for this first action
    assert set(expert.state.experts) == {BUTTON}
    await env.close()


# -- pictures -------------------------------------------------------------------------------


async def test_images_and_captioned_frames(registry: WorkspaceComponentRegistry) -> None:
    env = _fresh(registry, "env_metaworld")
    await _play(env, task_id=REACH, episode_index=1, seed=4)
    plain_obs = env.call_sync("step", {}, {}, _ctx(0))
    assert "image" not in plain_obs and "frame" not in plain_obs

    pictures = {}
    for camera in ("corner2", "topview"):
        await _play(
            env, task_id=REACH, episode_index=1, seed=4, images=True, camera=camera, image_size=32
        )
        out = env.call_sync("step", {}, {}, _ctx(0))
        image = out["image"]
        assert image.shape == (32, 32, 3) and image.dtype == np.uint8
        assert len(np.unique(image.reshape(-1, 3), axis=0)) > 20  # a picture, not one colour
        assert out["obs"].tobytes() == plain_obs["obs"].tobytes()  # pictures change no state
        assert "frame" not in out
        pictures[camera] = image
    assert not np.array_equal(pictures["corner2"], pictures["topview"])

    await _play(
        env, task_id=REACH, episode_index=1, seed=4, images=True, render=True, image_size=32
    )
    start = env.call_sync("step", {}, {}, _ctx(0))
    assert np.array_equal(start["image"], pictures["corner2"])
    frame = start["frame"]
    big = upscaled(start["image"])
    assert frame.dtype == np.uint8 and frame.shape[1] == big.shape[1] >= 256
    assert frame.shape[0] > big.shape[0]  # the caption strip below the picture
    assert np.array_equal(frame[: big.shape[0]], big)
    moved = env.call_sync("step", {}, {"action": [1.0, 0.0, 1.0, 0.0]}, _ctx(1))
    assert not np.array_equal(moved["image"], start["image"])  # the arm moved
    assert not np.array_equal(moved["frame"][big.shape[0] :], frame[big.shape[0] :])  # caption

    await _play(env, task_id=REACH, render=True, image_size=32)  # frames without images
    out = env.call_sync("step", {}, {}, _ctx(0))
    assert "image" not in out and out["frame"].shape == frame.shape
    await env.close()


def test_a_picture_drawn_on_another_thread_is_the_same_picture() -> None:
    state = MetaWorldState()
    values = {
        "dataset": "MT10",
        "split": "train",
        "task_id": REACH,
        "seed": 0,
        "benchmark_seed": 0,
        "episode_index": 0,
        "images": True,
        "camera": "corner2",
        "image_size": 32,
        "max_steps": 500,
        "terminate_on_success": True,
    }
    state.start(values)
    pictures: list[np.ndarray] = []
    for _ in range(2):
        thread = threading.Thread(target=lambda: pictures.append(state.picture()))
        thread.start()
        thread.join()
    state.close()
    assert pictures[0].any()
    assert np.array_equal(pictures[0], pictures[1])


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("task_id", "reach-v9", "panel field 'task_id': unknown task 'reach-v9'"),
        ("camera", "fisheye", "panel field 'camera': 'fisheye' is not one of"),
        ("split", "test", "panel field 'split': 'test' is not one of"),  # MT10 has no test
        ("colour", "red", "panel has no field 'colour'"),
    ],
)
async def test_the_panel_refuses_an_unknown_value(
    registry: WorkspaceComponentRegistry, name: str, value: Any, message: str
) -> None:
    env = _fresh(registry, "env_metaworld")
    with pytest.raises(UserInputError) as raised:
        await env.panel_change(name, value)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("image_size", 8, "image_size must be 16..1024"),
        ("image_size", 2048, "image_size must be 16..1024"),
        ("max_steps", 501, "max_steps must be 1..500"),
        ("max_steps", 0, "max_steps must be 1..500"),
    ],
)
async def test_play_refuses_a_value_out_of_range(
    registry: WorkspaceComponentRegistry, name: str, value: int, message: str
) -> None:
    env = _fresh(registry, "env_metaworld")
    with pytest.raises(NodeSetError, match=message):
        await _play(env, **{name: value})
    assert env.state.env is None  # nothing was built
    await _play(env, task_id=REACH)  # a good episode, then a refused play with images on
    with pytest.raises(NodeSetError, match=message):
        await _play(env, images=True, **{name: value})
    state = env.state
    assert (state.images, state.image_size, state.max_steps) == (False, 128, 500)
    out = await env.call("step", {}, {"action": np.zeros(4)}, _ctx(1))
    assert "image" not in out and out["metrics"]["length"] == 1
    await env.close()


def test_an_unknown_camera_given_to_the_state_is_refused() -> None:
    values = {
        "dataset": "MT10",
        "split": "train",
        "task_id": REACH,
        "seed": 0,
        "benchmark_seed": 0,
        "episode_index": 0,
        "images": True,
        "camera": "fisheye",
        "image_size": 32,
        "max_steps": 500,
        "terminate_on_success": True,
    }
    with pytest.raises(NodeSetError, match="camera 'fisheye' is not one of"):
        MetaWorldState().start(values)


async def test_the_step_refuses_a_bad_action_and_clips_a_large_one(
    registry: WorkspaceComponentRegistry,
) -> None:
    env = _fresh(registry, "env_metaworld")
    with pytest.raises(NodeSetError, match="no episode loaded"):
        env.call_sync("step", {}, {}, _ctx(0))
    await _play(env, task_id=REACH, seed=2)
    for bad, shape in (([0.0, 0.0, 0.0], "(3,)"), ([0.0] * 5, "(5,)"), (0.5, "(1,)")):
        with pytest.raises(NodeSetError, match=re.escape(f"4 floats, got shape {shape}")):
            env.call_sync("step", {}, {"action": bad}, _ctx(1))
    assert env.state.length == 0  # a refused action did not step

    big = env.call_sync("step", {}, {"action": [5.0, -3.0, 2.0, -9.0]}, _ctx(1))
    await _play(env, task_id=REACH, seed=2)
    unit = env.call_sync("step", {}, {"action": [1.0, -1.0, 1.0, -1.0]}, _ctx(1))
    assert big["obs"].tobytes() == unit["obs"].tobytes() and big["reward"] == unit["reward"]
    assert big["metrics"]["length"] == 1
    await env.close()


async def test_the_expert_refuses_an_unknown_task_or_a_call_without_one(
    registry: WorkspaceComponentRegistry,
) -> None:
    with pytest.raises(NodeSetError, match="no scripted expert for task 'reach-v9'"):
        expert_action(ExpertState(), "reach-v9", np.zeros(STATE_DIM))
    expert = _fresh(registry, "metaworld_expert")
    with pytest.raises(NodeSetError, match="the call carries no task"):
        expert.call_sync("act", {}, {"obs": np.zeros(STATE_DIM)}, _ctx(0))
    with pytest.raises(NodeSetError, match="'nope-v3'"):
        expert.call_sync("act", {}, {"obs": np.zeros(STATE_DIM)}, _ctx(0, task="nope-v3"))
    assert expert.state.experts == {}
