"""A node-set server imports its own node set and no other (`NodeSetCatalogue.load_one`).

The workspace holds ``tmods`` (a node that reports which node-set modules its server process
has imported), a sound ``tother``, and ``broken``, whose ``__init__.py`` exits at import (a
script-like module calling ``sys.exit``): none of them is any business of another node set's
server. Checked for both ways a server starts: spawned (``auto_host``) and forked from a
template (``forkserver``), and for a real run of the built-in ``cartpole_mlp`` (a forked
env, a spawned torch policy) in that workspace.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from agentcanvas.nodes.base import CallContext
from agentcanvas.server.launcher import LocalProcessLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest
from support.cli import run_cli
from support.workspace import home_workspace

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(300)]

TMODS = '''
"""tmods: which node-set modules this server process has imported."""
import sys

from agentcanvas.nodes import NodeSet, PortSpec

NODESET = NodeSet(name="tmods", parallelism="replicated")
PACKAGES = ("agentcanvas.nodesets.", "agentcanvas_user_nodes_")


@NODESET.node("modules", outputs=[PortSpec(name="names", type="list")])
def modules(inputs, config, state, ctx):
    return {"names": sorted(m for m in sys.modules if m.startswith(PACKAGES))}
'''
TOTHER = """
from agentcanvas.nodes import NodeSet

NODESET = NodeSet(name="tother")
"""
BROKEN = """
raise SystemExit("broken: a node set that exits at import")
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    nodesets = {"tmods": TMODS, "tother": TOTHER, "broken": BROKEN}
    yield from home_workspace(tmp_path_factory, "isolation_ws", nodesets)


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["spawned", "forked"])
async def launcher(request: pytest.FixtureRequest) -> AsyncIterator[LocalProcessLauncher]:
    forked = request.param == "forked"
    launcher = LocalProcessLauncher(forkable=(lambda name: True) if forked else None)
    try:
        yield launcher
    finally:
        await launcher.close()


async def test_a_servers_process_holds_its_own_node_set_and_no_other(
    workspace: Path, launcher: LocalProcessLauncher
) -> None:
    server = await launcher.launch("tmods", 0)
    remote = RemoteNodeSet("tmods", server.url, (await fetch_manifest(server.url)).declared())
    try:
        names = (await remote.call("modules", {}, {}, CallContext("m", 0)))["names"]
    finally:
        await remote.close()
        await server.stop()
    assert names == ["agentcanvas_user_nodes_workspace.tmods"]


async def test_a_workspace_node_set_that_exits_at_import_leaves_builtin_servers_alone(
    workspace: Path, launcher: LocalProcessLauncher
) -> None:
    server = await launcher.launch("env_minigrid", 0)
    remote = RemoteNodeSet(
        "env_minigrid", server.url, (await fetch_manifest(server.url)).declared()
    )
    try:
        info = await remote.panel_episode([])  # its default task
        assert info.step_budget is not None and info.step_budget > 0
    finally:
        await remote.close()
        await server.stop()


async def test_a_real_run_of_a_builtin_graph_completes_beside_a_broken_node_set(
    workspace: Path,
) -> None:
    """The CLI's own scan records ``broken`` as a load error; the run's servers (env_gym
    forked, policy_mlp spawned) never import it."""
    done = run_cli(
        "eval", "cartpole_mlp", "-n", "2", "-w", "2", "--json", workspace=workspace, timeout_s=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["status"] == "completed" and summary["status_counts"] == {"completed": 2}
