"""A run's registry (`run_setup.run_registry`) forks the servers of forkable node sets from a
template, spawns the others, and every one of them logs into the run folder's ``servers/``.

``fenv`` (forkable) and ``senv`` (``forkable=False``) are replicated node sets in a workspace
under tmp_path; their node ``say`` writes a line to the server's stderr and returns its pid.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agentcanvas.eval.run_setup import run_registry, scanned_catalogue
from agentcanvas.eval.store import RunDir
from agentcanvas.nodes.base import CallContext
from agentcanvas.server.forkserver import ForkedServer
from agentcanvas.server.launcher import ProcessServer
from agentcanvas.server.procs import descendants_alive
from support.workspace import home_workspace

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio]

SOURCE = """
import os, sys
from agentcanvas.nodes.base import NodeSet
from agentcanvas.nodes.manifest import PortSpec

NODESET = NodeSet(name="{name}", parallelism="replicated", forkable={forkable})


@NODESET.node("say", outputs=[PortSpec(name="pid", type="int")])
def say(inputs, config, state, ctx):
    print(f"said by {{os.getpid()}}", file=sys.stderr, flush=True)
    return {{"pid": os.getpid()}}
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from home_workspace(
        tmp_path_factory,
        "run_setup_ws",
        {
            "fenv": textwrap.dedent(SOURCE.format(name="fenv", forkable=True)),
            "senv": textwrap.dedent(SOURCE.format(name="senv", forkable=False)),
        },
    )


async def test_a_runs_forkable_servers_are_forked_and_log_into_its_folder(
    workspace: Path, tmp_path: Path
) -> None:
    run_dir = RunDir(tmp_path / "20260101_000000")
    registry = run_registry(scanned_catalogue(workspace), run_dir)
    before = set(descendants_alive(os.getpid()))
    try:
        await registry.fleet.start_many([("fenv", 0), ("fenv", 1), ("senv", 0)])
        servers = {key: record.server for key, record in registry.fleet.records.items()}
        assert isinstance(servers["fenv#0"], ForkedServer)
        assert isinstance(servers["fenv#1"], ForkedServer)
        assert isinstance(servers["senv#0"], ProcessServer)
        pids = {}
        for key in servers:
            outputs = await registry.get_env_panel(key).call("say", {}, {}, CallContext("say", 0))
            pids[key] = int(outputs["pid"])
        template = psutil.Process(pids["fenv#0"]).ppid()
        assert template != os.getpid() and psutil.Process(pids["fenv#1"]).ppid() == template
    finally:
        await registry.shutdown_all()
    logs = run_dir.root / "servers"
    assert {p.name for p in logs.iterdir()} == {
        "template_fenv.log",
        "server_fenv_0.log",
        "server_fenv_1.log",
        "server_senv_0.log",
    }
    for key, name in (("fenv#0", "fenv_0"), ("fenv#1", "fenv_1"), ("senv#0", "senv_0")):
        assert f"said by {pids[key]}" in (logs / f"server_{name}.log").read_text()
    assert [pid for pid in descendants_alive(os.getpid()) if pid not in before] == []
