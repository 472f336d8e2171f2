"""Node-set servers as real processes on loopback.

- a graph run through proxies is bit-identical to the same graph run in-process (W = 1, 2);
- two tagged servers hold independent episode state;
- a borrowed server survives its borrower (in this process and in a child that exits);
- a killed or hung server becomes a node error naming it, within the call timeout;
- no server is left after the parent is killed with SIGKILL;
- ``agentcanvas serve-nodeset`` / ``agentcanvas servers`` as real subprocesses.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import pytest_asyncio

from agentcanvas.errors import UserInputError
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.episode import (
    EpisodeOptions,
    EpisodeSpec,
    EpisodeWiring,
    run_episode,
    set_episode,
)
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.base import CallContext, LocalNodeSet, NodeSetHandle
from agentcanvas.server.proxy import RemoteNodeSet
from agentcanvas.server.registry import WorkspaceComponentRegistry

pytestmark = pytest.mark.timeout(90)
in_module_loop = pytest.mark.asyncio(loop_scope="module")

GRAPH = "babyai_oracle"
ENV = "env_minigrid"
RUN_SEED = 11
EPISODES_PER_TASK = 2
DEADLINE_S = 20.0
# The console script's entry point (``python -m agentcanvas.cli`` imports cli.py twice).
CLI = [sys.executable, "-c", "from agentcanvas.cli import main; raise SystemExit(main())"]
SHORT_TIMEOUT_S = 0.5


# --- helpers --------------------------------------------------------------------------------


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.02)


def pid_gone(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def server_pid(registry: WorkspaceComponentRegistry, key: str) -> int:
    server = registry.fleet.records[key].server
    assert server is not None and server.pid is not None
    return server.pid


def specs(graph: Graph) -> list[EpisodeSpec]:
    assert graph.env is not None
    pairs = [(t, i) for t in graph.env.tasks for i in range(EPISODES_PER_TASK)]
    return [
        EpisodeSpec(n, task, i, episode_seed(RUN_SEED, task, i), f"{task}/{i}")
        for n, (task, i) in enumerate(pairs)
    ]


def wiring(
    registry: WorkspaceComponentRegistry,
    env: NodeSetHandle | None,
    handle: NodeSetHandle,
    url: str | None = None,
) -> EpisodeWiring:
    return EpisodeWiring(
        registry,
        env,
        env_panel_overrides={ENV: handle},
        server_url_overrides={ENV: url} if url else {},
    )


def assert_same_tree(a: Any, b: Any, where: str = "") -> None:
    """Equal values, with arrays compared by dtype, shape and bytes."""
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), where
        assert (a.dtype, a.shape, a.tobytes()) == (b.dtype, b.shape, b.tobytes()), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_same_tree(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tree(x, y, f"{where}[{i}]")
    else:
        assert a == b and type(a) is type(b), where


def child_env(workspace: Path) -> dict[str, str]:
    return {**os.environ, "AGENTCANVAS_HOME": str(workspace)}


def read_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    """One stdout line of a child, or a failed assertion with its stderr at the deadline."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    if not ready:
        process.kill()
        _, err = process.communicate(timeout=DEADLINE_S)
        pytest.fail(f"no output from the child within {timeout_s} s; stderr:\n{err}")
    return process.stdout.readline()


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """An empty workspace: only the built-in node sets and graphs, for us and our servers."""
    root = tmp_path_factory.mktemp("servers_ws")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTCANVAS_HOME", str(root))
        yield root


def new_registry(workspace: Path) -> WorkspaceComponentRegistry:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    return registry


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(workspace: Path) -> AsyncIterator[dict[int, WorkspaceComponentRegistry]]:
    """Registries whose servers came from ensure_nodesets_for_graph at W = 1 and W = 2."""
    registries = {w: new_registry(workspace) for w in (1, 2)}
    try:
        for w, registry in registries.items():
            keys = await registry.ensure_nodesets_for_graph(registry.load_graph(GRAPH), w)
            assert keys == [f"{ENV}#{k}" for k in range(w)]
        yield registries
    finally:
        for registry in registries.values():
            await registry.shutdown_all()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def reference(workspace: Path) -> AsyncIterator[list[EpisodeResult]]:
    """The episodes run in-process (registry.local_instance), one after another."""
    registry = new_registry(workspace)
    graph = registry.load_graph(GRAPH)
    local = registry.local_instance(ENV)
    try:
        yield [
            await run_episode(graph, s, wiring(registry, local, local), EpisodeOptions())
            for s in specs(graph)
        ]
    finally:
        await registry.shutdown_all()


# --- tests ----------------------------------------------------------------------------------


@in_module_loop
@pytest.mark.parametrize("worker_count", [1, 2])
async def test_episodes_through_proxies_equal_in_process(
    served: dict[int, WorkspaceComponentRegistry],
    reference: list[EpisodeResult],
    worker_count: int,
) -> None:
    registry = served[worker_count]
    graph = registry.load_graph(GRAPH)
    all_specs = specs(graph)

    async def worker(k: int) -> list[EpisodeResult]:
        handle = registry.get_env_panel(f"{ENV}#{k}")
        assert isinstance(handle, RemoteNodeSet)
        url = registry.get_server_url(ENV, k)
        return [
            await run_episode(graph, s, wiring(registry, handle, handle, url), EpisodeOptions())
            for s in all_specs[k::worker_count]
        ]

    chunks = await asyncio.gather(*(worker(k) for k in range(worker_count)))
    proxied = sorted((r for chunk in chunks for r in chunk), key=lambda r: r.index)
    assert [r.status for r in reference] == ["completed"] * len(all_specs)
    assert sum(r.metrics["success"] for r in reference) > 0  # a real run, not all failures
    assert [r.identity() for r in proxied] == [r.identity() for r in reference]
    for k in range(worker_count):  # the episodes really ran on the servers
        last = all_specs[k::worker_count][-1]
        loaded = await registry.get_env_panel(f"{ENV}#{k}").panel_load()
        assert loaded.episode_id == f"{last.task}/{last.episode_index}"


@in_module_loop
async def test_two_tagged_servers_hold_independent_episode_state(
    served: dict[int, WorkspaceComponentRegistry], workspace: Path
) -> None:
    registry = served[2]
    graph = registry.load_graph(GRAPH)
    remotes = [registry.get_env_panel(f"{ENV}#{k}") for k in (0, 1)]
    locals_ = [LocalNodeSet(registry.nodeset(ENV)) for _ in (0, 1)]
    chosen = [specs(graph)[0], specs(graph)[-1]]  # different tasks and seeds
    assert chosen[0].task != chosen[1].task and chosen[0].seed != chosen[1].seed
    for handle, spec in [*zip(remotes, chosen, strict=True), *zip(locals_, chosen, strict=True)]:
        await set_episode(handle, graph, spec, render=False)
    outputs: list[list[dict[str, Any]]] = [[], []]
    for step, action in enumerate([None, 1, 2, 0, 2]):  # interleaved: #0, #1, #0, #1, ...
        for k in (0, 1):
            ctx = CallContext("env", step)
            inputs = {} if action is None else {"action": action}
            remote_out = await remotes[k].call("step", {}, inputs, ctx)
            assert_same_tree(remote_out, await locals_[k].call("step", {}, inputs, ctx), f"#{k}")
            outputs[k].append(remote_out)
    assert outputs[0][-1]["mission"] != outputs[1][-1]["mission"]
    assert outputs[0][-1]["grid"].tobytes() != outputs[1][-1]["grid"].tobytes()
    with pytest.raises(UserInputError, match="unknown level"):  # HTTP 400 -> UserInputError
        await remotes[0].panel_change("task_id", "BabyAI-NoSuchLevel-v0")
    for local in locals_:
        await local.close()


BORROWER = textwrap.dedent(
    """
    import asyncio, sys
    from agentcanvas.server.registry import WorkspaceComponentRegistry

    async def main(url):
        registry = WorkspaceComponentRegistry()
        registry.scan_all()
        await registry.register_remote_nodeset("env_minigrid", url)
        info = await registry.bound("env_minigrid").panel_load()
        await registry.shutdown_all()
        print("borrowed", info.episode_id, flush=True)

    asyncio.run(main(sys.argv[1]))
    """
)


@in_module_loop
async def test_a_borrowed_server_survives_its_borrowers(
    served: dict[int, WorkspaceComponentRegistry], workspace: Path
) -> None:
    owner = served[1]
    key, url = f"{ENV}#0", owner.get_server_url(ENV, 0)
    assert url is not None
    pid = server_pid(owner, key)
    borrower = new_registry(workspace)
    await borrower.register_remote_nodeset(ENV, url)
    handle = borrower.bound(ENV)
    assert isinstance(handle, RemoteNodeSet) and handle.url == url
    assert (await handle.health()).pid == pid
    await borrower.shutdown_all()
    child = subprocess.run(
        [sys.executable, "-c", BORROWER, url],
        env=child_env(workspace),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("borrowed ")
    assert owner.server_alive(key) and not pid_gone(pid)
    owned = owner.get_env_panel(key)
    assert isinstance(owned, RemoteNodeSet)
    assert (await owned.health()).pid == pid
    graph = owner.load_graph(GRAPH)
    await set_episode(owned, graph, specs(graph)[0], render=False)
    assert "metrics" in await owned.call("step", {}, {}, CallContext("env", 0))


@in_module_loop
async def test_killed_and_hung_servers_become_node_errors_naming_them(workspace: Path) -> None:
    registry = new_registry(workspace)
    graph = registry.load_graph(GRAPH)
    spec = specs(graph)[0]
    key = f"{ENV}#0"
    try:
        await registry.ensure_nodesets_for_graph(graph, worker_count=1)
        handle, url = registry.get_env_panel(key), registry.get_server_url(ENV, 0)
        await set_episode(handle, graph, spec, render=False)
        os.kill(server_pid(registry, key), signal.SIGKILL)
        wait_until(lambda: not registry.server_alive(key), DEADLINE_S, "the server to die")
        # env=None: the episode was set before the kill; the loop's first step meets the corpse.
        killed = await run_episode(
            graph, spec, wiring(registry, None, handle, url), EpisodeOptions()
        )
        assert killed.status == "error"
        assert f"{key} at {url} is unreachable" in killed.node_errors["env"]

        handle = await registry.restart_server(key)
        url = registry.get_server_url(ENV, 0)
        assert url is not None
        short = RemoteNodeSet(key, url, handle.manifest, timeout_s=SHORT_TIMEOUT_S)
        await set_episode(short, graph, spec, render=False)
        pid = server_pid(registry, key)
        os.kill(pid, signal.SIGSTOP)
        try:
            hung = await run_episode(
                graph, spec, wiring(registry, None, short, url), EpisodeOptions()
            )
        finally:
            os.kill(pid, signal.SIGCONT)
        assert hung.status == "timeout"  # a call deadline is wall clock, not a score
        assert f"{key} at {url} did not answer /call/step within 0.5 s" in hung.node_errors["env"]
        assert (await short.health()).pid == pid  # resumed, it answers again
        await short.close()
    finally:
        await registry.shutdown_all()


PARENT = textwrap.dedent(
    """
    import asyncio, json
    from agentcanvas.server.registry import WorkspaceComponentRegistry

    async def main():
        registry = WorkspaceComponentRegistry()
        registry.scan_all()
        graph = registry.load_graph("babyai_oracle")
        keys = await registry.ensure_nodesets_for_graph(graph, worker_count=2)
        pids = [registry.fleet.records[k].server.pid for k in keys]
        print(json.dumps(pids), flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


def test_no_server_outlives_a_parent_killed_with_sigkill(workspace: Path) -> None:
    pids: list[int] = []
    family: set[int] = set()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        env=child_env(workspace),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pids = json.loads(read_line(parent, DEADLINE_S))
        assert len(pids) == 2
        assert all(not pid_gone(pid) for pid in pids)
        # Spawned servers are children, forked ones grandchildren (their template's children).
        family = {p.pid for p in psutil.Process(parent.pid).children(recursive=True)}
        assert set(pids) <= family
    finally:
        parent.kill()
        parent.communicate(timeout=DEADLINE_S)
    try:
        wait_until(
            lambda: all(pid_gone(p) for p in family),
            DEADLINE_S,
            f"servers {pids} and their family {family} to exit",
        )
    finally:
        for pid in family:  # on failure, leave no orphan behind for the next test
            if not pid_gone(pid):
                os.kill(pid, signal.SIGKILL)


def agentcanvas(*args: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        env=child_env(workspace),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


def test_serve_nodeset_records_itself_and_servers_lists_it(workspace: Path) -> None:
    records = workspace / "outputs" / "servers"
    record = records / "core_3.json"
    server = subprocess.Popen(
        [*CLI, "serve-nodeset", "core", "--tag", "3"],
        env=child_env(workspace),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(server, DEADLINE_S)
        assert line.startswith("serving core on http://127.0.0.1:")
        url = line.split()[-1]
        wait_until(record.exists, DEADLINE_S, f"{record}")
        listed = json.loads(agentcanvas("servers", "--json", workspace=workspace).stdout)
        assert [
            (s["nodeset"], s["tag"], s["url"], s["pid"], s["status"]) for s in listed["servers"]
        ] == [("core", 3, url, server.pid, "up")]
        again = agentcanvas("serve-nodeset", "core", "--tag", "3", workspace=workspace)
        assert again.returncode == 1 and "already served" in again.stderr
        assert "core" in agentcanvas("servers", workspace=workspace).stdout
    finally:
        server.terminate()
        _, err = server.communicate(timeout=DEADLINE_S)
    assert server.returncode == 0, err
    assert not record.exists()  # removed on SIGTERM
    assert json.loads(agentcanvas("servers", "--json", workspace=workspace).stdout) == {
        "servers": []
    }


def test_servers_prunes_records_of_dead_processes(workspace: Path) -> None:
    records = workspace / "outputs" / "servers"
    records.mkdir(parents=True, exist_ok=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    stale = records / "planner.json"
    stale.write_text(
        json.dumps(
            {
                "version": 1,
                "pid": int(dead.stdout),
                "url": "http://127.0.0.1:9",
                "nodeset": "planner",
                "tag": None,
                "started_at": "2020-01-01T00:00:00+00:00",
            }
        )
    )
    garbled = records / "core.json"
    garbled.write_text("{not json")
    listed = agentcanvas("servers", "--json", workspace=workspace)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"servers": []}
    assert not stale.exists() and not garbled.exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no_such_set", "unknown node set 'no_such_set'"),
        ("../etc", "not an allowed nodeset name"),
    ],
)
def test_serve_nodeset_refuses_bad_names(workspace: Path, name: str, message: str) -> None:
    result = agentcanvas("serve-nodeset", name, workspace=workspace)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
