"""LIBERO through us — the benchmark's init states exactly, and the same episodes
at 1 and 2 workers through a real policy server.

- ``tasks.json`` is LIBERO's own benchmark (suites, task names, instructions);
- the first observation of episode *i* (state, agent view, wrist view) is byte-identical to
  LIBERO's own API for init state *i* after the protocol's settling steps, written here the
  way openpi's LIBERO client does it (seeding before the reset);
- ``libero_policy_server`` against the openpi reference server (openpi-client's own packer,
  in .venv-openpi; its actions are made from the state it receives, 3-row chunks, 2 rows
  executed): records identical at ``-w 1`` and ``-w 2``, and the server received the same
  requests — every observation, bit for bit (sha256 of each message) — in both runs.

Small pictures and few steps: LIBERO builds an env in 3–8 s here and resets in 2–3 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentcanvas.eval.config import EpisodeResult
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.nodesets.env_libero import NO_OP, SUITE_TASKS, observation, prepare_libero
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.cli import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

REPO = Path(__file__).resolve().parents[2]
OPENPI_PYTHON = REPO / ".venv-openpi" / "bin" / "python"
REFERENCE = REPO / "tests" / "support" / "openpi_reference.py"
TASK = "libero_object:0"
SIZE = 32


def test_the_task_list_is_liberos_own() -> None:
    prepare_libero()
    from libero.libero import benchmark

    suites = benchmark.get_benchmark_dict()
    for suite, tasks in SUITE_TASKS.items():
        bench = suites[suite]()
        assert bench.n_tasks == len(tasks)
        for i, task in enumerate(tasks):
            assert (bench.get_task(i).name, bench.get_task(i).language) == (
                task["name"],
                task["language"],
            )


STALE_CONFIG_PROBE = """
import json, os
from agentcanvas.nodesets.env_libero import prepare_libero
prepare_libero()
from libero.libero import get_libero_path
found = {"config": os.environ["LIBERO_CONFIG_PATH"], "bddl": get_libero_path("bddl_files")}
print(json.dumps(found))
"""


def test_a_config_written_by_another_install_is_not_read(tmp_path: Path) -> None:
    """LIBERO's config holds absolute paths; one left by an install that is gone (another
    clone, the old shared location) must not send this one to missing files."""
    stale = tmp_path / "agentcanvas" / "libero"
    stale.mkdir(parents=True)
    gone = "/nonexistent/site-packages/libero/libero"
    keys = ("benchmark_root", "bddl_files", "init_states", "datasets", "assets")
    (stale / "config.yaml").write_text("".join(f"{k}: {gone}/{k}\n" for k in keys))
    env = {k: v for k, v in os.environ.items() if k != "LIBERO_CONFIG_PATH"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    done = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "-c", STALE_CONFIG_PROBE],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(found["config"]).parent == stale and len(Path(found["config"]).name) == 12
    assert Path(found["bddl"]).is_dir() and "nonexistent" not in found["bddl"]


def libero_first_observation(index: int) -> dict[str, np.ndarray]:
    """LIBERO's own API, as openpi's examples/libero/main.py uses it, seeded before reset."""
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    bench = benchmark.get_benchmark_dict()["libero_object"]()
    task = bench.get_task(0)
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=SIZE, camera_widths=SIZE)
    try:
        env.seed(7)
        env.reset()
        raw = env.set_init_state(bench.get_task_init_states(0)[index])
        for _ in range(10):
            raw, _, _, _ = env.step(NO_OP)
        return observation(raw)
    finally:
        env.close()


async def test_episode_i_starts_from_the_benchmarks_init_state_i(tmp_path: Path) -> None:
    prepare_libero()
    registry = WorkspaceComponentRegistry(workspace=tmp_path)
    registry.scan_all()
    env = LocalNodeSet(registry.nodeset("env_libero"))
    try:
        for name, value in {"task_id": TASK, "camera_size": SIZE}.items():
            await env.panel_change(name, value)
        firsts = []
        for index in (3, 4):
            await env.panel_change("episode_index", index)
            await env.panel_action("play")
            load = await env.panel_load()
            assert load.instruction == SUITE_TASKS["libero_object"][0]["language"]
            ctx = CallContext(node_id="env", step=0, episode_key=f"e{index}")
            firsts.append(await env.call("step", {}, {}, ctx))
        theirs = libero_first_observation(3)
        for key in ("obs", "image", "wrist_image"):
            assert firsts[0][key].dtype == theirs[key].dtype, key
            assert firsts[0][key].tobytes() == theirs[key].tobytes(), key
        assert firsts[0]["obs"].shape == (8,) and firsts[0]["image"].shape == (SIZE, SIZE, 3)
        assert firsts[0]["obs"].tobytes() != firsts[1]["obs"].tobytes()  # another init state
        assert firsts[0]["image"].std() > 0  # a picture, not a black frame
    finally:
        await env.close()


@pytest.fixture
def reference_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    if not OPENPI_PYTHON.exists():
        pytest.skip(f"{OPENPI_PYTHON} is missing (make test creates it)")
    port_file, log = tmp_path / "port", tmp_path / "requests.log"
    proc = subprocess.Popen(
        [str(OPENPI_PYTHON), str(REFERENCE), "server", str(port_file)],
        env={**os.environ, "REQUEST_LOG": str(log)},
    )
    try:
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, "no reference server"
            time.sleep(0.05)
        yield f"ws://127.0.0.1:{port_file.read_text()}", log
    finally:
        proc.kill()
        proc.wait(10)


def identities(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [EpisodeResult.model_validate(e).identity() for e in summary["episodes"]]


def test_a_policy_server_run_is_the_same_at_w1_and_w2(
    tmp_path: Path, reference_server: tuple[str, Path]
) -> None:
    url, log = reference_server
    graph = json.loads((REPO / "src/agentcanvas/graphs/libero_policy_server.json").read_text())
    graph["name"] = "libero_reference"
    graph["env"]["fields"].update({"max_steps": 4, "camera_size": SIZE})
    (policy,) = [n for n in graph["nodes"] if n["id"] == "policy"]
    policy["config"].update(url=url, execute_steps=2, extra={"action_dim": 7})
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "libero_reference.json").write_text(json.dumps(graph))
    runs, requests = [], []
    for workers in ("1", "2"):
        log.write_text("")
        done = run_cli(
            "eval", "libero_reference", "--tasks", TASK, "-n", "2", "-w", workers, "--json",
            workspace=tmp_path, timeout_s=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        assert summary["status_counts"] == {"completed": 2}, summary["status_counts"]
        runs.append(summary)
        requests.append(sorted(log.read_text().split()))
    assert identities(runs[0]) == identities(runs[1])  # at W = 2: one episode a worker
    assert [e["steps"] for e in runs[0]["episodes"]] == [5, 5]  # 4 actions + the opening
    assert len(requests[0]) == 2 * 3  # 5 policy calls an episode, a new chunk every 2
    assert len(set(requests[0])) == len(requests[0])  # two init states: no repeats
    assert requests[0] == requests[1]
    assert runs[1]["determinism"]["level"] == "unverified"
