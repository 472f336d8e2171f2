"""The one-host recipe of docs/cluster.md, run as written: real ``ray start`` processes (a
head and a second node, token authentication on), an eval on them, a node stopped as the page
says, and a node's raylet killed during a ``--json`` run. Only loopback is ever connected to,
and every process the recipe started is stopped at the end, also when the test fails."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval.config import EpisodeResult
from support.cli import run_cli
from support.polling import poll_until
from support.ray_recipe import RecipeCluster, all_interface_ports, host_of, sockets
from support.slow_workspace import write_slow_workspace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
NODE_DIR = "ray-node1"


@pytest.fixture
def recipe() -> Iterator[RecipeCluster]:
    root = Path(tempfile.mkdtemp(prefix="acr-", dir="/tmp"))  # Ray's socket paths are short
    cluster = RecipeCluster.create(root)
    try:
        yield cluster
    finally:
        killed = cluster.close()
        shutil.rmtree(root, ignore_errors=True)
        assert cluster.processes() == {}, "recipe processes left running"
        assert not [cmd for cmd in killed if "raylet/raylet" in cmd], killed


def _alive_nodes(recipe: RecipeCluster, workspace: Path) -> int:
    done = recipe.run("status", workspace, 60.0)
    return done.stdout.count(" node_") if done.returncode == 0 else 0


def _wait_nodes(recipe: RecipeCluster, workspace: Path, count: int) -> None:
    """Until ``ray status`` lists ``count`` alive nodes. It is asked only once as many
    raylets run as it should list, and then once a second: each call is a Python process
    of about 2 s of CPU, and back to back they took a core from the rest of the suite."""

    def ready() -> bool:
        ended = [name for name, proc in recipe.nodes.items() if proc.poll() is not None]
        assert not ended, f"ray start {ended} ended: {_logs(recipe)}"
        if _raylets(recipe) != count:
            return False
        if _alive_nodes(recipe, workspace) == count:
            return True
        time.sleep(1.0)
        return False

    poll_until(
        ready,
        f"{count} alive node(s) in ray status",
        180.0,
        explain=lambda: _logs(recipe),
    )


def _raylets(recipe: RecipeCluster) -> int:
    return sum("raylet/raylet" in cmd for cmd in recipe.processes().values())


def _logs(recipe: RecipeCluster) -> str:
    return "\n".join(p.read_text()[-3000:] for p in recipe.root.glob("*.log"))


def _records(workspace: Path, run_id: str) -> list[dict[str, Any]]:
    summary = json.loads((workspace / "outputs/eval_runs" / run_id / "summary.json").read_text())
    episodes = sorted(summary["episodes"], key=lambda e: e["index"])
    return [EpisodeResult.model_validate(e).identity() for e in episodes]


def _only_run(workspace: Path, before: set[str]) -> str:
    runs = {p.name for p in (workspace / "outputs/eval_runs").iterdir()} - before
    (run_id,) = runs
    return run_id


def _runs(workspace: Path) -> set[str]:
    folder = workspace / "outputs/eval_runs"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def test_one_host_recipe_runs_as_written(recipe: RecipeCluster, tmp_path: Path) -> None:
    workspace = write_slow_workspace(tmp_path / "ws")
    setup = recipe.run("auth", workspace, 60.0)
    assert setup.returncode == 0, setup.stderr
    assert (recipe.root / "home/.ray/auth_token").stat().st_mode & 0o077 == 0
    recipe.start("head")
    _wait_nodes(recipe, workspace, 1)
    recipe.start("node")
    _wait_nodes(recipe, workspace, 2)
    _check_sockets(recipe)

    refused = _refused(recipe, workspace, recipe.shell_env(auth=False))
    assert "RAY_AUTH_MODE is not set here" in refused and "token authentication" in refused
    wrong = recipe.shell_env() | {"RAY_AUTH_TOKEN": "0" * 32}
    assert "the token this process sends is not the cluster's" in _refused(recipe, workspace, wrong)

    before = _runs(workspace)
    done = recipe.run("eval", workspace, 600.0)
    assert done.returncode == 0, done.stderr[-3000:]
    ray_run = _only_run(workspace, before)
    local = _local_run(recipe, workspace, "babyai_oracle", 2)
    assert _records(workspace, ray_run) == _records(workspace, local)
    spec = json.loads((workspace / "outputs/eval_runs" / ray_run / "spec.json").read_text())
    assert spec["config"]["ray_address"] == f"127.0.0.2:{recipe.port(6379)}"

    recipe.ctrl_c("node")  # stopping one node as the page says: the head stays
    _wait_nodes(recipe, workspace, 1)
    assert not [c for c in recipe.processes().values() if NODE_DIR in c]

    recipe.start("node")
    _wait_nodes(recipe, workspace, 2)
    _json_run_survives_a_raylet_kill(recipe, workspace)


def _check_sockets(recipe: RecipeCluster) -> None:
    """Every socket the recipe's processes listen on is on loopback or is a port the page's
    table says is bound to all interfaces; every connection they hold is on loopback."""
    pids = set(recipe.processes())
    documented = {port + recipe.offset for port in all_interface_ports()}
    for local, _, pid in sockets(pids, "listening"):
        host, port = host_of(local), int(local.rsplit(":", 1)[1])
        assert host.startswith("127.") or port in documented, (local, pid)
    for local, peer, pid in sockets(pids, "established"):
        assert host_of(local).startswith("127.") and host_of(peer).startswith("127."), (
            local,
            peer,
            pid,
        )


def _refused(recipe: RecipeCluster, workspace: Path, env: dict[str, str]) -> str:
    """The page's eval command with ``env``: refused at once, naming why."""
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-euc", recipe.text("eval")],
        cwd=workspace,
        env=env | {"AGENTCANVAS_HOME": str(workspace)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert time.monotonic() - started < 20.0  # Ray's own connect gives up after ~20 s
    assert "Traceback" not in done.stderr
    return done.stderr


def _local_run(recipe: RecipeCluster, workspace: Path, graph: str, n: int) -> str:
    before = _runs(workspace)
    args = ["eval", graph, "-n", str(n), "-w", "1", "--json"]
    done = run_cli(*args, workspace=workspace, timeout_s=600, env=recipe.shell_env())
    assert done.returncode == 0, done.stderr[-2000:]
    return _only_run(workspace, before)


def _json_run_survives_a_raylet_kill(recipe: RecipeCluster, workspace: Path) -> None:
    """A ``--json`` run (127.0.0.1: the GCS listens there too) whose second node loses its
    raylet mid-run: stdout is the summary alone, the records are the local engine's."""
    address = f"127.0.0.1:{recipe.port(6379)}"
    args = ["eval", "slow_graph", "-n", "6", "-w", "2", "--engine", "ray", "--json"]
    env = recipe.shell_env() | {"AGENTCANVAS_HOME": str(workspace)}
    before = _runs(workspace)
    proc = subprocess.Popen(
        ["agentcanvas", *args, "--ray-address", address],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run_id = poll_until(lambda: _started_run(workspace, before), "the run folder", 240.0)
        poll_until(lambda: _episodes_done(workspace, run_id) >= 2, "two episodes", 240.0)
        os.kill(recipe.raylet_of(NODE_DIR), signal.SIGKILL)
        out, err = proc.communicate(timeout=600)
        exited = time.time()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out)  # nothing but the summary on stdout
    assert summary["status"] == "completed" and summary["run_id"] == run_id
    local = _local_run(recipe, workspace, "slow_graph", 6)
    assert _records(workspace, run_id) == _records(workspace, local)
    last = max(p.stat().st_mtime for p in _episode_files(workspace, run_id))
    print(f"last episode to exit after a raylet kill: {exited - last:.1f} s")


def _started_run(workspace: Path, before: set[str]) -> str | None:
    runs = _runs(workspace) - before
    return next(iter(runs)) if runs else None


def _episode_files(workspace: Path, run_id: str) -> list[Path]:
    return list((workspace / "outputs/eval_runs" / run_id / "episodes").glob("*/episode.json"))


def _episodes_done(workspace: Path, run_id: str) -> int:
    return len(_episode_files(workspace, run_id))
