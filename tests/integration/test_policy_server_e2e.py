"""Policies behind the openpi policy-server protocol, end to end.

- ``agentcanvas serve-policy`` answers openpi's own ``WebsocketClientPolicy`` (run in the
  NumPy-1 environment ``.venv-openpi`` that ``make test`` creates) with exactly what the
  node computes in process;
- our ``policy_server`` node reads a server that packs with openpi's ``msgpack_numpy``
  bit for bit, executes its chunks, and carries its errors;
- MetaWorld's scripted experts served over the protocol (``serve-policy
  metaworld_expert.act``, a real process on 127.0.0.1) give records bit-identical to the
  in-process ``metaworld_expert`` graph, at ``-w 1`` and ``-w 4``; the run says its
  determinism is ``unverified`` (an external server), or ``sampled`` with ``repeat_check``;
- ``--frames failures`` on MetaWorld keeps the frames of the failed episodes only.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.media import frame_views
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.nodesets.policy_server import NodeSetError
from agentcanvas.policy_protocol import unpack
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.cli import COMMAND, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
OPENPI_PYTHON = REPO / ".venv-openpi" / "bin" / "python"
REFERENCE = REPO / "tests" / "support" / "openpi_reference.py"
DOC = REPO / "docs" / "metaworld.md"
TASKS = "reach-v3,drawer-close-v3,button-press-topdown-v3"
SERVING = re.compile(r"serving \S+ at (ws://127\.0\.0\.1:\d+)")


@pytest.fixture(scope="module")
def openpi_python() -> Path:
    if not OPENPI_PYTHON.exists():
        pytest.skip(f"{OPENPI_PYTHON} is missing (make test creates it: openpi-client, numpy<2)")
    return OPENPI_PYTHON


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("policy_server_e2e")
    (root / "graphs").mkdir()
    return root


def serve_policy(workspace: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """``agentcanvas serve-policy ARGS --port 0`` as a real process; it and its URL."""
    env = {**os.environ, "AGENTCANVAS_HOME": str(workspace)}
    proc = subprocess.Popen(
        [*COMMAND, "serve-policy", *args, "--port", "0"],
        cwd=workspace,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        found = SERVING.search(line)
        if found:
            return proc, found.group(1)
    proc.wait(10)
    raise AssertionError("serve-policy did not start:\n" + "".join(seen))


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture(scope="module")
def expert_server(workspace: Path) -> Iterator[str]:
    proc, url = serve_policy(workspace, "metaworld_expert.act", "--input", "obs=observation/state")
    yield url
    stop(proc)


def ctx(step: int, key: str = "ep") -> CallContext:
    return CallContext(node_id="policy", step=step, episode_key=key, client="w0")


async def test_openpi_client_gets_what_the_node_computes_in_process(
    workspace: Path, openpi_python: Path, tmp_path: Path
) -> None:
    proc, url = serve_policy(workspace, "policy_mlp.act")
    try:
        out = tmp_path / "replies.npz"
        done = subprocess.run(
            [str(openpi_python), str(REFERENCE), "client", url, str(out)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        stop(proc)
    replies = np.load(out)
    metadata = unpack(replies["metadata"].tobytes())
    assert metadata["nodeset"] == "policy_mlp" and metadata["node"] == "act"
    assert metadata["determinism"]["act"] in ("padded", "single")
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    policy = LocalNodeSet(registry.nodeset("policy_mlp"))
    rng = np.random.default_rng(7)  # openpi_reference.observations()
    sent = [rng.normal(size=4).astype(np.float32), np.zeros(4, np.float32)]
    sent.append(rng.normal(size=4).astype(np.float32))
    for i, obs in enumerate(sent):
        here = await policy.call("act", {}, {"obs": obs}, ctx(i))
        assert int(replies[f"reply{i}/action"]) == here["action"]
        theirs = replies[f"reply{i}/logits"]
        assert theirs.dtype == here["logits"].dtype
        assert theirs.tobytes() == np.asarray(here["logits"]).tobytes()
    await policy.close()


@pytest.fixture
def reference_server(openpi_python: Path, tmp_path: Path) -> Iterator[str]:
    port_file = tmp_path / "port"
    proc = subprocess.Popen([str(openpi_python), str(REFERENCE), "server", str(port_file)])
    try:
        for _ in range(200):
            if port_file.exists() and port_file.read_text():
                break
            assert proc.poll() is None, "the reference server exited"
            subprocess.run(["sleep", "0.05"], check=True)
        yield f"ws://127.0.0.1:{port_file.read_text()}"
    finally:
        proc.kill()
        proc.wait(10)


async def test_our_node_reads_an_openpi_packed_server_bit_for_bit(
    workspace: Path, reference_server: str
) -> None:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    node = LocalNodeSet(registry.nodeset("policy_server"))
    config = {"url": reference_server, "execute_steps": 2}
    states = [np.random.default_rng(s).normal(size=4).astype(np.float32) for s in range(4)]
    rows = []
    for step in range(4):  # rows 0, 1 of the chunk for state 0; rows 0, 1 for state 2
        out = await node.call("act", config, {"obs": states[step]}, ctx(step))
        rows.append((out["chunk_row"], out["action"]))
    assert [r for r, _ in rows] == [0, 1, 0, 1]
    expected = [states[0], states[0] * 2, states[2], states[2] * 2]
    for (_, got), want in zip(rows, expected, strict=True):
        assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
    bad = {**config, "keys": {"obs": "observation/other"}}
    with pytest.raises(NodeSetError, match=r"(?s)replied with an error: .*KeyError"):
        await node.call("act", bad, {"obs": states[0]}, ctx(0, "another"))
    await node.close()


def policy_graph(workspace: Path, url: str, name: str, **config: Any) -> Path:
    """The graph docs/metaworld.md writes (its snippet run as written, in the workspace),
    pointed at ``url``; serve-policy replies with the node's outputs, so ``action``."""
    (snippet,) = re.findall(r"python - <<'EOF'\n(.*?)EOF\n", DOC.read_text("utf-8"), re.S)
    done = subprocess.run(
        [sys.executable, "-c", snippet], cwd=workspace, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    graph = json.loads((workspace / "graphs" / "metaworld_my_policy.json").read_text())
    graph["name"] = name
    (policy,) = [n for n in graph["nodes"] if n["id"] == "policy"]
    policy["config"].update(url=url, action_key="action", **config)
    path = workspace / "graphs" / f"{name}.json"
    path.write_text(json.dumps(graph))
    return path


def run_json(workspace: Path, graph: str, *args: str) -> dict[str, Any]:
    done = run_cli(
        "eval", graph, "--tasks", TASKS, "-n", "3", *args, "--json",
        workspace=workspace, timeout_s=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout)
    assert summary["status"] == "completed"
    assert summary["status_counts"] == {"completed": 9}, summary["status_counts"]
    return summary


def identities(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [EpisodeResult.model_validate(e).identity() for e in summary["episodes"]]


def test_experts_over_the_protocol_equal_the_in_process_graph_at_w1_and_w4(
    workspace: Path, expert_server: str
) -> None:
    path = str(policy_graph(workspace, expert_server, "experts_by_url"))
    here = run_json(workspace, "metaworld_expert", "-w", "1")
    assert here["aggregate_metrics"]["success"]["mean"] == 1.0
    assert here["determinism"]["level"] == "certified"
    for workers in ("1", "4"):
        remote = run_json(workspace, path, "-w", workers)
        assert identities(remote) == identities(here)
        assert remote["aggregate_metrics"] == here["aggregate_metrics"]
        determinism = remote["determinism"]
        assert determinism["level"] == "unverified"
        assert expert_server in determinism["level_detail"]
        assert determinism["batched_functions"]["policy_server.act"]["mode"] == "external"


def test_repeat_check_raises_the_level_to_sampled(workspace: Path, expert_server: str) -> None:
    path = str(policy_graph(workspace, expert_server, "experts_checked", repeat_check=True))
    summary = run_json(workspace, path, "-w", "2")
    assert summary["determinism"]["level"] == "sampled"
    assert "repeat_check" in summary["determinism"]["level_detail"]


def test_frames_of_failed_metaworld_episodes_only(workspace: Path) -> None:
    graph = json.loads((REPO / "src/agentcanvas/graphs/metaworld_expert.json").read_text())
    graph["name"] = "experts_short"
    # 45 steps: the expert reaches some goal variations of reach-v3 in time, not others
    graph["env"]["fields"].update({"max_steps": 45, "image_size": 48})
    path = workspace / "graphs" / "experts_short.json"
    path.write_text(json.dumps(graph))
    done = run_cli(
        "eval", str(path), "--tasks", "reach-v3", "-n", "4", "-w", "2",
        "--frames", "failures", "--json", workspace=workspace, timeout_s=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    outcomes = {e["episode_index"]: e["metrics"]["success"] for e in summary["episodes"]}
    assert set(outcomes.values()) == {0, 1}, outcomes  # both kinds, or the test shows nothing
    run = workspace / "outputs" / "eval_runs" / summary["run_id"] / "episodes"
    for record in summary["episodes"]:
        views = frame_views(run / f"ep{record['index']:04d}" / "assets")
        if record["metrics"]["success"]:
            assert views == {}
        else:
            assert list(views) == ["env"] and views["env"].layout == "video"
            assert len(views["env"].steps) == record["steps"], record["run_index"]
