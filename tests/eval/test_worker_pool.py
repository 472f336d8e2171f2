"""EnvWorkerPool: contiguous chunks, pinned leases, one slot per tagged server, N = 1 alike."""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from agentcanvas.errors import StateError
from agentcanvas.eval.worker_pool import EnvWorkerPool, partition_contiguous
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.server.registry import WorkspaceComponentRegistry

WAIT_S = 5.0

TENV = textwrap.dedent(
    '''
    """tenv: the smallest replicated env (a panel and one node)."""

    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec


    class TPanel(Panel):
        spec = PanelSpec(fields=[FieldSpec(name="task_id", kind="str", default="ok"),
                                 FieldSpec(name="seed", kind="int", default=0)],
                         actions=["play"])

        def on_action(self, name):
            return dict(self.values)

        def on_load(self):
            return LoadInfo(episode_id=str(self.values["seed"]))


    NODESET = NodeSet(name="tenv", parallelism="replicated", panel_class=TPanel)


    @NODESET.node("step", outputs=[PortSpec(name="done", type="bool")], done_port="done")
    def step(inputs, config, state, ctx):
        return {"done": True}
    '''
)


# -- contiguous chunks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n_items", "n_chunks", "sizes"),
    [
        (10, 4, [3, 3, 2, 2]),
        (8, 2, [4, 4]),
        (7, 3, [3, 2, 2]),
        (3, 5, [1, 1, 1, 0, 0]),
        (5, 1, [5]),
        (0, 3, [0, 0, 0]),
    ],
)
def test_partition_is_contiguous_like_numpy_array_split(
    n_items: int, n_chunks: int, sizes: list[int]
) -> None:
    indices = list(range(100, 100 + n_items))
    chunks = partition_contiguous(indices, n_chunks)
    assert [len(c) for c in chunks] == sizes
    assert [x for chunk in chunks for x in chunk] == indices  # contiguous, in order, complete
    assert chunks == [list(c) for c in np.array_split(np.asarray(indices), n_chunks)]
    assert all(type(x) is int for chunk in chunks for x in chunk)  # JSON-safe, not np.int64


def test_partition_keeps_the_remaining_indices_of_a_resumed_run_contiguous() -> None:
    remaining = [2, 3, 5, 8, 9, 11, 12]
    assert partition_contiguous(remaining, 3) == [[2, 3, 5], [8, 9], [11, 12]]


# -- leases (a pool over no servers: an env-less graph) ---------------------------------------


async def test_acquire_specific_pins_a_slot_and_a_second_acquirer_waits(tmp_path: Path) -> None:
    registry = WorkspaceComponentRegistry(workspace=tmp_path)
    async with EnvWorkerPool(registry, 2, None, []) as pool:
        assert [h.worker_id for h in pool.handles] == [0, 1]
        first_in = asyncio.Event()
        release = asyncio.Event()
        order: list[str] = []

        async def holder() -> None:
            async with pool.acquire_specific(0) as handle:
                assert handle.worker_id == 0
                order.append("holder in")
                first_in.set()
                await release.wait()
                order.append("holder out")

        async def contender() -> None:
            async with pool.acquire_specific(0) as handle:
                assert handle is pool.handles[0]
                order.append("contender in")

        async with asyncio.TaskGroup() as group:
            group.create_task(holder())
            await asyncio.wait_for(first_in.wait(), WAIT_S)
            waiting = group.create_task(contender())
            # Slot 1 is free meanwhile: another worker's lease is never blocked.
            async with asyncio.timeout(WAIT_S), pool.acquire_specific(1) as other:
                assert other.worker_id == 1
            for _ in range(20):
                await asyncio.sleep(0)
            assert not waiting.done() and order == ["holder in"]
            release.set()
        assert order == ["holder in", "holder out", "contender in"]


async def test_acquire_specific_refuses_a_slot_that_does_not_exist(tmp_path: Path) -> None:
    registry = WorkspaceComponentRegistry(workspace=tmp_path)
    async with EnvWorkerPool(registry, 1, None, []) as pool:
        assert len(pool.handles) == 1  # worker_count = 1: the same pool with one slot
        for slot in (1, -1):
            with pytest.raises(StateError, match="no worker slot"):
                async with pool.acquire_specific(slot):
                    pass
    assert pool.handles == []


# -- wiring to tagged servers -----------------------------------------------------------------


def env_graph() -> Graph:
    return parse_graph(
        {
            "version": 1,
            "name": "tiny",
            "env": {"nodeset": "tenv", "tasks": ["ok"]},
            "nodes": [{"id": "env", "type": "tenv.step"}],
        }
    )


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "graph_nodes" / "tenv"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(TENV, encoding="utf-8")
    monkeypatch.setenv("AGENTCANVAS_HOME", str(tmp_path))
    yield tmp_path


async def test_each_slot_routes_to_its_own_tagged_server(workspace: Path) -> None:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    graph = env_graph()
    with pytest.raises(StateError, match="not running"):
        async with EnvWorkerPool(registry, 1, "tenv", ["tenv"]):
            pass
    try:
        keys = await registry.ensure_nodesets_for_graph(graph, worker_count=2)
        assert keys == ["tenv#0", "tenv#1"]
        async with EnvWorkerPool(registry, 2, "tenv", ["tenv"]) as pool:
            urls = []
            for slot, handle in enumerate(pool.handles):
                url = registry.get_server_url("tenv", slot)
                assert handle.server_keys() == [f"tenv#{slot}"]
                assert handle.server_url_overrides == {"tenv": url}
                assert handle.env is handle.env_panel_overrides["tenv"]
                assert handle.env is registry.get_env_panel(f"tenv#{slot}")
                assert (await handle.env.panel_load()).episode_id == "0"
                urls.append(url)
            assert len(set(urls)) == 2
            assert all(pool.servers_alive(h) for h in pool.handles)

            # A dead server is noticed per slot; restart relaunches it and re-wires the slot.
            dead = pool.handles[0]
            server = registry.fleet.records["tenv#0"].server
            assert server is not None and server.pid is not None
            os.kill(server.pid, signal.SIGKILL)
            async with asyncio.timeout(WAIT_S):
                while pool.servers_alive(dead):
                    await asyncio.sleep(0.005)
            assert pool.servers_alive(pool.handles[1])
            assert await pool.dead_servers(dead) == ["tenv#0"]
            assert await pool.dead_servers(pool.handles[1]) == []  # answers /health
            await pool.restart(dead)
            assert pool.servers_alive(dead) and dead.restarts == 1
            assert dead.server_url_overrides["tenv"] == registry.get_server_url("tenv", 0)
            assert dead.server_url_overrides["tenv"] != urls[0]
            assert (await dead.env.panel_load()).episode_id == "0"  # type: ignore[union-attr]
            assert pool.handles[1].server_url_overrides["tenv"] == urls[1]
    finally:
        await registry.shutdown_all()


async def test_one_worker_uses_the_same_tagged_path(workspace: Path) -> None:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    try:
        assert await registry.ensure_nodesets_for_graph(env_graph(), worker_count=1) == ["tenv#0"]
        assert "tenv" not in registry.fleet.records  # no untagged special case
        async with EnvWorkerPool(registry, 1, "tenv", ["tenv"]) as pool:
            (handle,) = pool.handles
            assert handle.server_url_overrides == {"tenv": registry.get_server_url("tenv", 0)}
            assert partition_contiguous(list(range(5)), 1) == [[0, 1, 2, 3, 4]]
    finally:
        await registry.shutdown_all()
