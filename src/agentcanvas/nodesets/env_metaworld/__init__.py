"""env_metaworld: MetaWorld v3 manipulation tasks on MuJoCo (replicated: one env per process).

Panel cascade: ``dataset`` (the benchmark: MT10, MT50, ML10, ML45) → ``split`` (train; the
ML benchmarks also test) → ``task_id`` (a MetaWorld env name such as ``reach-v3``).

**Which episode is which.** Each task has MetaWorld's 50 goal variations (object and goal
positions) of its single-task benchmark: ``metaworld.MT1(task, seed=benchmark_seed)
.train_tasks`` for the MT benchmarks, ``metaworld.ML1(task, seed=benchmark_seed)`` train or
test tasks for the ML ones. Episode *i* of a task uses variation ``i mod 50`` — episodes 0–49
visit every variation once, as MetaWorld's own evaluation does — and the env is seeded with
the episode's seed (``env.seed(seed)``; ``reset(seed=)`` is ignored by MetaWorld) before its
reset. A task's variations therefore do not depend on which other tasks the run has, nor on
the worker or what it ran before: a plain loop reproduces episode *i* with::

    env = metaworld.MT1(task, seed=0).train_classes[task]()
    env.set_task(metaworld.MT1(task, seed=0).train_tasks[i % 50]); env.seed(seed)
    obs, _ = env.reset()

``step`` with no action observes; with a 4-vector action in [-1, 1] (clipped) it steps.
The episode ends at ``max_steps`` (MetaWorld's 500) or, with ``terminate_on_success`` (the
default), at the first step MetaWorld reports success. Metrics: ``success`` (1 if any step
succeeded), ``return`` and ``length``. ``obs`` is MetaWorld's 39-float state; ``task`` the
env name; with ``images`` on, ``image`` is the ``camera``'s ``image_size``² RGB picture
(MuJoCo offscreen rendering, EGL); with ``render`` on (``--frames``), ``frame`` is that
picture captioned.

**Processes.** Importing the node set creates no GL context (MuJoCo makes one per renderer,
on the first picture), so its servers can be forked from a template: every GL context
belongs to the process that drew with it. ``MUJOCO_GL`` defaults to ``egl``.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")

import msgpack
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

CAMERAS = ["corner", "corner2", "corner3", "topview", "behindGripper", "gripperPOV"]
VARIATIONS = 50  # goal variations per task in MetaWorld's single-task benchmarks


TASKS: dict[str, dict[str, list[str]]] = json.loads(
    (Path(__file__).parent / "tasks.json").read_text(encoding="utf-8")
)
"""MetaWorld's benchmark definitions (``metaworld.env_dict``), copied so that listing the
node set does not import MuJoCo (a test keeps them equal)."""


def variations(dataset: str, split: str, task: str, benchmark_seed: int) -> list[Any]:
    """The task's 50 goal variations (MetaWorld ``Task`` objects), made by MetaWorld (it
    resets the env 50 times) or read from the cache it was saved in the first time
    (``variations_cache``). MetaWorld seeds NumPy's global generator to make them; it is
    restored afterwards."""
    import metaworld
    from metaworld.types import Task

    kind = "test" if dataset.startswith("ML") and split == "test" else "train"
    family = "ML1" if dataset.startswith("ML") else "MT1"
    cache = variations_cache() / f"{family}-{kind}-{task}-seed{benchmark_seed}.msgpack"
    with contextlib.suppress(OSError, ValueError, TypeError):
        saved_tasks = msgpack.unpackb(cache.read_bytes())
        return [Task(env_name=name, data=data) for name, data in saved_tasks]
    saved = np.random.get_state()
    try:
        if family == "ML1":
            bench: Any = metaworld.ML1(task, seed=benchmark_seed)  # type: ignore[no-untyped-call]
            made = list(bench.test_tasks if kind == "test" else bench.train_tasks)
        else:
            mt1: Any = metaworld.MT1(task, seed=benchmark_seed)  # type: ignore[no-untyped-call]
            made = list(mt1.train_tasks)
    finally:
        np.random.set_state(saved)
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        partial = cache.with_name(f".{cache.name}.{os.getpid()}.partial")
        partial.write_bytes(msgpack.packb([[t.env_name, t.data] for t in made]))
        os.replace(partial, cache)
    return made


def variations_cache() -> Path:
    """Where made variations are kept: ``$XDG_CACHE_HOME/agentcanvas/metaworld-<version>``
    (default ``~/.cache``), one file per task, benchmark and seed. They depend only on those
    and MetaWorld's version (in the folder's name)."""
    from importlib.metadata import version

    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "agentcanvas" / f"metaworld-{version('metaworld')}"


def _env_class(task: str) -> Any:
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS

    return ALL_V3_ENVIRONMENTS[task]


class MetaWorldState:
    """One MetaWorld env (rebuilt when the task or the picture settings change) and the
    current episode's bookkeeping."""

    def __init__(self) -> None:
        self.env: Any = None
        self.built_for: tuple[Any, ...] | None = None
        self._variations: dict[tuple[str, str, str, int], list[Any]] = {}
        self.task = ""
        self.episode_id = ""
        self.obs: np.ndarray | None = None
        self.length = 0
        self.total_return = 0.0
        self.succeeded = False
        self.finished = False
        self.max_steps = 500
        self.terminate_on_success = True
        self.images = False
        self.render = False
        self.camera = "corner2"
        self.image_size = 128
        self.env_builds = 0
        self._gl: ThreadPoolExecutor | None = None

    def start(self, values: dict[str, Any]) -> None:
        dataset, split, task = str(values["dataset"]), str(values["split"]), str(values["task_id"])
        seed, bench_seed = int(values["seed"]), int(values["benchmark_seed"])
        index = int(values["episode_index"])
        camera, image_size = str(values["camera"]), int(values["image_size"])
        max_steps = int(values["max_steps"])
        # every field checked before any is kept: a refused play leaves the state as it was
        if camera not in CAMERAS:
            raise NodeSetError(f"env_metaworld: camera {camera!r} is not one of {CAMERAS}")
        if not 16 <= image_size <= 1024:
            raise NodeSetError("env_metaworld: image_size must be 16..1024 pixels")
        if not 1 <= max_steps <= 500:
            raise NodeSetError("env_metaworld: max_steps must be 1..500 (MetaWorld's limit)")
        self.images, self.render = bool(values["images"]), bool(values.get("render"))
        self.camera, self.image_size, self.max_steps = camera, image_size, max_steps
        self.terminate_on_success = bool(values["terminate_on_success"])
        pictures = self.images or self.render
        key = (task, pictures, self.camera if pictures else None, self.image_size)
        if key != self.built_for:
            self.close()
            kwargs: dict[str, Any] = {}
            if pictures:
                kwargs = dict(
                    render_mode="rgb_array",
                    camera_name=self.camera,
                    width=self.image_size,
                    height=self.image_size,
                )
            self.env = _env_class(task)(**kwargs)
            self.built_for, self.env_builds = key, self.env_builds + 1
        variation_key = (dataset, split, task, bench_seed)
        if variation_key not in self._variations:
            self._variations[variation_key] = variations(dataset, split, task, bench_seed)
        self.env.set_task(self._variations[variation_key][index % VARIATIONS])
        self.env.seed(seed)
        obs, _ = self.env.reset()
        self.task, self.obs = task, np.asarray(obs, dtype=np.float64)
        self.length, self.total_return = 0, 0.0
        self.succeeded = self.finished = False
        self.episode_id = f"{dataset}/{split}/{task}/{index}"

    def require_env(self) -> Any:
        if self.env is None:
            raise NodeSetError("env_metaworld: no episode loaded (set the panel and run 'play')")
        return self.env

    def metrics(self) -> dict[str, float]:
        return {
            "success": int(self.succeeded),
            "return": self.total_return,
            "length": self.length,
        }

    def picture(self) -> np.ndarray:
        """The camera's picture, drawn on the state's own GL thread: MuJoCo's GL context is
        current only in the thread that made it (another thread's picture comes back black),
        and a server may call from more than one thread."""
        env = self.require_env()
        if self._gl is None:
            self._gl = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mujoco-gl")
        drawn = self._gl.submit(env.render).result()
        return np.ascontiguousarray(np.asarray(drawn, dtype=np.uint8))

    def close(self) -> None:
        env, self.env, self.built_for = self.env, None, None
        if env is None:
            return
        if self._gl is not None:  # frees the renderer's GL context where it was made
            self._gl.submit(env.close).result()
        else:
            env.close()


class MetaWorldPanel(TaskPanel):
    """dataset → split → task_id, the episode, the protocol's knobs, play, on_load."""

    tasks = TASKS
    spec = PanelSpec(
        fields=[
            *task_fields(TASKS, "reach-v3"),
            FieldSpec(name="episode_index", kind="int", default=0),
            FieldSpec(name="seed", kind="int", default=0),
            FieldSpec(
                name="benchmark_seed",
                kind="int",
                default=0,
                description="Seed of MetaWorld's single-task benchmark that makes the task's "
                "50 goal variations (MT1/ML1(task, seed=...)).",
            ),
            FieldSpec(
                name="max_steps",
                kind="int",
                default=500,
                description="Steps before the episode is cut (MetaWorld's max_path_length).",
            ),
            FieldSpec(
                name="terminate_on_success",
                kind="bool",
                default=True,
                description="End the episode at the first successful step (the score is the "
                "same: success is 1 if any step succeeded).",
            ),
            FieldSpec(
                name="images",
                kind="bool",
                default=False,
                description="Return the camera's picture as the 'image' observation.",
            ),
            FieldSpec(name="camera", kind="choice", default="corner2", choices=CAMERAS),
            FieldSpec(
                name="image_size",
                kind="int",
                default=128,
                description="Side of the rendered square picture, pixels.",
            ),
            FieldSpec(
                name="render",
                kind="bool",
                default=False,
                description="Return a captioned RGB frame from every step (videos).",
            ),
        ],
        actions=["play", "reset"],
    )

    def on_action(self, name: str) -> dict[str, Any]:
        if name != "play":
            return super().on_action(name)
        state: MetaWorldState = self.state
        state.start(self.values)
        return dict(self.values)

    def on_load(self) -> LoadInfo:
        state: MetaWorldState = self.state
        state.require_env()
        return LoadInfo(
            episode_id=state.episode_id,
            scene_id=f"{state.task}@variation{int(self.values['episode_index']) % VARIATIONS}",
            instruction=state.task,
            step_budget=state.max_steps + 1,
            extra={"env_builds": state.env_builds},
        )


def _preload() -> None:
    """In the fork template: MetaWorld, its envs and MuJoCo, imported once for all servers."""
    import metaworld.env_dict  # noqa: F401


NODESET = NodeSet(
    name="env_metaworld",
    version="0.1.0",
    parallelism="replicated",
    description="MetaWorld v3 manipulation tasks (MuJoCo).",
    forkable=True,  # no GL context before the fork: one is made per renderer, in the child
    preload=_preload,
    state_factory=MetaWorldState,
    panel_class=MetaWorldPanel,
    metrics={
        "success": MetricSpec(kind="binary", description="MetaWorld reported success at a step"),
        "return": MetricSpec(kind="continuous", description="sum of MetaWorld's rewards"),
        "length": MetricSpec(kind="count", description="steps taken"),
    },
)


@NODESET.node(
    "step",
    inputs=[PortSpec(name="action", type="array", required=False)],
    outputs=[
        PortSpec(name="obs", type="array", description="MetaWorld's 39-float state."),
        PortSpec(name="reward", type="float"),
        PortSpec(name="done", type="bool"),
        PortSpec(name="metrics", type="dict"),
        PortSpec(name="task", type="str", description="The MetaWorld env name."),
        PortSpec(name="image", type="array", description="The camera's picture (images on)."),
        PortSpec(name="frame", type="array", description="Captioned frame (render on)."),
    ],
    done_port="done",
    blocking=True,
)
def step(
    inputs: dict[str, Any], config: dict[str, Any], state: MetaWorldState, ctx: CallContext
) -> dict[str, Any]:
    """Step with ``action`` (4 floats, clipped to [-1, 1]) or observe when there is none."""
    env = state.require_env()
    reward = 0.0
    action = inputs.get("action")
    acted = action is not None and not state.finished
    if acted:
        vector = np.clip(np.asarray(action, dtype=np.float64).reshape(-1), -1.0, 1.0)
        if vector.shape != (4,):
            raise NodeSetError(f"env_metaworld: an action is 4 floats, got shape {vector.shape}")
        obs, r, _, truncated, info = env.step(vector.astype(np.float32))
        state.obs = np.asarray(obs, dtype=np.float64)
        reward = float(r)
        state.length += 1
        state.total_return += reward
        success = bool(info.get("success", 0.0))
        state.succeeded = state.succeeded or success
        state.finished = bool(
            truncated or state.length >= state.max_steps or (success and state.terminate_on_success)
        )
    out: dict[str, Any] = {
        "obs": state.obs,
        "reward": reward,
        "done": state.finished,
        "metrics": state.metrics(),
        "task": state.task,
    }
    if state.images or state.render:
        picture = state.picture()
        if state.images:
            out["image"] = picture
        if state.render:
            name = _action_name(action) if acted else None
            lines = caption_lines(state.length, name, reward, state.total_return)
            out["frame"] = captioned(upscaled(picture), lines)
    return out


def _action_name(action: Any) -> str:
    vector = np.clip(np.asarray(action, dtype=np.float64).reshape(-1), -1.0, 1.0)
    return "action " + ", ".join(f"{v:+.2f}" for v in vector.tolist())


warnings.filterwarnings("ignore", message="Constant\\(s\\) may be too high", module="metaworld")
