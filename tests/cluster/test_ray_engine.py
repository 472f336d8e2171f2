"""The Ray engine on a simulated three-node cluster: same records as the local engine."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.cluster import runner as runner_mod
from agentcanvas.cluster.engine import RayEngine
from agentcanvas.cluster.session import node_addresses
from agentcanvas.eval.config import EvalRun
from agentcanvas.eval.media import frame_views
from support.batched_nodesets import write_batched_workspace
from support.cli import run_cli
from support.ray_cluster import identities, live_actor_names, live_groups, run_graph
from support.truth_workspace import write_truth_workspace
from support.workspace import home_workspace

pytestmark = pytest.mark.slow
BUILTIN = {"babyai_goto": 1, "babyai_oracle": 2, "cartpole_mlp": 2}


@pytest.fixture(scope="module")
def probe_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    for root in home_workspace(tmp_path_factory, "ray_probe", {}):
        write_batched_workspace(root)
        yield root


def test_every_node_is_on_loopback(ray_cluster: Any) -> None:
    import ray

    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == 3
    assert {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")  # this driver too
    assert set(node_addresses()) == {"127.0.0.1"}


@pytest.mark.parametrize("graph", sorted(BUILTIN))
async def test_builtin_graph_records_equal_local(
    ray_cluster: Any, tmp_path: Path, graph: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = BUILTIN[graph]
    local = await run_graph(tmp_path, graph, episode_count=n, worker_count=1)
    shipped = _count_logs(monkeypatch)
    ray_run = await run_graph(tmp_path, graph, RayEngine(), episode_count=n, worker_count=2)
    assert shipped == {"written by the actor": ray_run.episodes_total}  # they see the folder
    assert ray_run.status == local.status == "completed"
    assert identities(ray_run) == identities(local)
    assert ray_run.determinism.engine == "ray" and local.determinism.engine == "local"
    assert local.determinism.level == "certified"  # one worker: every call alone
    assert ray_run.determinism.level in {"certified", "sampled"}  # batched: not proven
    assert live_actor_names() == []  # the run's actors are gone with it
    assert ray_run.determinism.placement_group  # its own group: no scheduler reserved one
    assert live_groups() == []  # and it is removed with the run
    assert _logs(tmp_path, ray_run) == _logs(tmp_path, local)
    nodes = ray_run.determinism.worker_nodes  # SPREAD: the two workers on two nodes
    assert sorted(nodes) == ["0", "1"] and len({ids[0] for ids in nodes.values()}) == 2
    assert sum(w.episodes for w in ray_run.workers) == ray_run.episodes_total


async def test_workspace_nodeset_records_equal_local(
    ray_cluster: Any, probe_workspace: Path
) -> None:
    """A node set written into the workspace reaches the actors through the runtime env;
    its shared model runs in a model actor with the same start-up check and batching."""
    local = await run_graph(probe_workspace, "steady_graph", episode_count=4, worker_count=1)
    ray_run = await run_graph(
        probe_workspace, "steady_graph", RayEngine(), episode_count=4, worker_count=2, certify=True
    )
    assert ray_run.status == "completed"
    assert identities(ray_run) == identities(local)
    function = ray_run.determinism.batched_functions["probe_model.steady"]
    assert function.verified and function.mode == "batched"
    assert function.certify and function.batched_requests == 0  # the actor served rows alone
    assert ray_run.determinism.level == "certified" and ray_run.determinism.guaranteed


def test_cli_engine_ray_joins_a_cluster(ray_cluster: Any, tmp_path: Path) -> None:
    """``agentcanvas eval --engine ray --ray-address`` joins the cluster; the run folder is
    the head's, its spec and summary say the engine; the actors ship each episode's frames,
    recorded as one video per view, a frame per step."""
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    args = ["eval", "babyai_oracle", "-n", "1", "-w", "2", "--engine", "ray", "--json"]
    args.append("--save-frames")
    done = run_cli(
        *args, "--ray-address", ray_cluster.address, workspace=tmp_path, timeout_s=240, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["status"] == "completed" and summary["config"]["engine"] == "ray"
    assert summary["determinism"]["engine"] == "ray"
    (spec,) = tmp_path.glob("outputs/eval_runs/*/spec.json")
    assert json.loads(spec.read_text())["config"]["ray_address"] == ray_cluster.address
    assert live_actor_names() == []
    for episode in summary["episodes"]:
        assets = spec.parent / f"episodes/ep{episode['index']:04d}/assets"
        assert [p.name for p in assets.iterdir()] == ["env.mp4"]
        assert frame_views(assets)["env"].steps == tuple(range(episode["steps"]))


def test_cli_refuses_a_bad_ray_address(tmp_path: Path) -> None:
    done = run_cli(
        "eval",
        "babyai_oracle",
        "-n",
        "1",
        "--engine",
        "ray",
        "--ray-address",
        "no address!",
        workspace=tmp_path,
        timeout_s=60,
    )
    assert done.returncode == 1
    assert "ray_address" in done.stderr and "Traceback" not in done.stderr


def test_cli_names_an_address_where_nothing_listens(tmp_path: Path) -> None:
    """Refused at once (Ray's own connect would retry), naming what is wrong there."""
    started = time.monotonic()
    args = ["eval", "babyai_oracle", "-n", "1", "--engine", "ray", "--ray-address", "127.0.0.1:1"]
    done = run_cli(*args, workspace=tmp_path, timeout_s=60)
    assert done.returncode == 1 and time.monotonic() - started < 20.0
    assert "nothing that speaks Ray's protocol listens at 127.0.0.1:1" in done.stderr
    assert "Connection refused" in done.stderr and "Traceback" not in done.stderr


async def test_an_actor_that_does_not_see_the_run_folder_sends_its_logs(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the run folder is not the actors' (another machine's disk at that path), the
    token they look for is not there: each log comes back with the record and the head
    writes it, the same lines as where the actors write them."""
    local = await run_graph(tmp_path, "babyai_oracle", episode_count=2, worker_count=1)
    shipped = _count_logs(monkeypatch)
    monkeypatch.setattr(runner_mod, "check_token", lambda run_dir: "a token nobody wrote")
    ray_run = await run_graph(
        tmp_path, "babyai_oracle", RayEngine(), episode_count=2, worker_count=2
    )
    assert ray_run.status == "completed"
    assert shipped == {"sent to the head": ray_run.episodes_total}
    assert _logs(tmp_path, ray_run) == _logs(tmp_path, local)


def _count_logs(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How the head gets each episode's log (counted as the recorder writes its files)."""
    counts: dict[str, int] = {}
    write_rest = runner_mod.ShippedFiles.write_rest

    def counted(self: runner_mod.ShippedFiles) -> None:
        how = "sent to the head" if self.reply.log_staged is None else "written by the actor"
        counts[how] = counts.get(how, 0) + 1
        write_rest(self)

    monkeypatch.setattr(runner_mod.ShippedFiles, "write_rest", counted)
    return counts


def _logs(base: Path, run: EvalRun) -> list[list[dict[str, Any]]]:
    """Each episode's log.jsonl, without its wall-clock latencies."""
    root = base / "runs" / run.run_id / "episodes"
    logs = []
    for folder in sorted(root.glob("ep*")):
        lines = (folder / "log.jsonl").read_text().splitlines()
        logs.append([{k: v for k, v in json.loads(x).items() if k != "latency_ms"} for x in lines])
    assert len(logs) == run.episodes_total
    return logs


async def test_max_errors_stops_a_ray_run_as_failed(ray_cluster: Any, tmp_path: Path) -> None:
    """The error budget on the Ray engine: counted when a result comes back, so past it no
    further episode starts (one worker: exactly the third error stops the run)."""
    workspace = write_truth_workspace(tmp_path / "ws")
    run = await run_graph(
        workspace, "raises", RayEngine(), episode_count=20, worker_count=1, max_errors=2
    )
    assert run.status == "failed"
    assert run.error is not None and run.error.startswith("max_errors 2 exceeded: 3 episodes")
    assert run.status_counts == {"error": 3}, run.status_counts
    assert live_actor_names() == []
