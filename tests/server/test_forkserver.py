"""Pre-forked servers are as isolated and as well kept as spawned ones.

A workspace under ``tmp_path`` holds ``fenv`` (replicated, forkable: its servers are forked
from one template) and ``senv`` (the same, declaring ``forkable=False``: spawned). Each node
``bump`` counts calls in its server's own state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from agentcanvas.nodes.base import CallContext
from agentcanvas.server.forkserver import ForkedServer
from agentcanvas.server.launcher import ProcessServer
from agentcanvas.server.procs import descendants_alive
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.polling import poll_until
from support.registry import scanned
from support.workspace import home_workspace

pytestmark = pytest.mark.timeout(120)

DEADLINE_S = 30.0
SOURCE = """
from agentcanvas.nodes.base import NodeSet
from agentcanvas.nodes.manifest import PortSpec

NODESET = NodeSet(name="{name}", parallelism="replicated", forkable={forkable},
                  state_factory=lambda: {{"count": 0}})


@NODESET.node("bump", outputs=[PortSpec(name="count", type="int"),
                               PortSpec(name="pid", type="int")])
def bump(inputs, config, state, ctx):
    import os
    state["count"] += 1
    return {{"count": state["count"], "pid": os.getpid()}}
"""
CTX = CallContext("bump", 0)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from home_workspace(
        tmp_path_factory,
        "forkserver_ws",
        {
            "fenv": textwrap.dedent(SOURCE.format(name="fenv", forkable=True)),
            "senv": textwrap.dedent(SOURCE.format(name="senv", forkable=False)),
        },
    )


async def bump(reg: WorkspaceComponentRegistry, key: str) -> dict[str, int]:
    outputs = await reg.get_env_panel(key).call("bump", {}, {}, CTX)
    return {"count": int(outputs["count"]), "pid": int(outputs["pid"])}


@pytest.mark.asyncio
async def test_forked_servers_have_their_own_state_and_restart_from_the_template(
    workspace: Path,
) -> None:
    reg = scanned(workspace)
    before = set(descendants_alive(os.getpid()))  # e.g. a session-wide Ray cluster's
    try:
        await reg.fleet.start_many([("fenv", 0), ("fenv", 1), ("senv", 0)])
        servers = {k: r.server for k, r in reg.fleet.records.items()}
        assert isinstance(servers["fenv#0"], ForkedServer)
        assert isinstance(servers["fenv#1"], ForkedServer)
        assert isinstance(servers["senv#0"], ProcessServer)  # forkable=False: spawned
        pids = {k: s.pid for k, s in servers.items() if s is not None}
        template = psutil.Process(pids["fenv#0"]).ppid()
        assert template != os.getpid()
        assert psutil.Process(pids["fenv#1"]).ppid() == template
        assert psutil.Process(pids["senv#0"]).ppid() == os.getpid()

        for _ in range(3):
            await bump(reg, "fenv#0")
        assert await bump(reg, "fenv#1") == {"count": 1, "pid": pids["fenv#1"]}
        assert await bump(reg, "fenv#0") == {"count": 4, "pid": pids["fenv#0"]}

        os.kill(pids["fenv#0"], signal.SIGKILL)
        poll_until(lambda: not reg.server_alive("fenv#0"), "fenv#0 to be gone", DEADLINE_S)
        await reg.restart_server("fenv#0")
        restarted = reg.fleet.records["fenv#0"].server
        assert isinstance(restarted, ForkedServer) and restarted.pid != pids["fenv#0"]
        assert restarted.pid is not None and psutil.Process(restarted.pid).ppid() == template
        assert (await bump(reg, "fenv#0"))["count"] == 1  # fresh state
        assert (await bump(reg, "fenv#1"))["count"] == 2  # untouched
    finally:
        await reg.shutdown_all()
    # servers, template: stopped and reaped
    assert [pid for pid in descendants_alive(os.getpid()) if pid not in before] == []


async def _health_refused(timeout_s: float = 0.0) -> Any:
    raise AssertionError("the proxy asked /health before its first call")


@pytest.mark.asyncio
async def test_owned_servers_proxies_know_their_call_socket_from_the_ready_report(
    workspace: Path,
) -> None:
    """No /health round trip (nor an HTTP client) before an owned server's first call, for
    a forked, a spawned and a restarted server: the ready report named the call socket."""
    reg = scanned(workspace)
    try:
        await reg.fleet.start_many([("fenv", 0), ("senv", 0)])
        await reg.restart_server("fenv#0")
        for key in ("fenv#0", "senv#0"):
            record = reg.fleet.records[key]
            assert record.server is not None and record.server.call_endpoint is not None
            handle = record.handle
            handle.health = _health_refused  # type: ignore[method-assign]
            assert (await bump(reg, key))["count"] == 1
            async with httpx.AsyncClient() as http:  # what the server itself advertises
                advertised = (await http.get(f"{record.url}/health")).json()["call"]
            assert record.server.call_endpoint == advertised
    finally:
        await reg.shutdown_all()


PARENT = textwrap.dedent(
    """
    import asyncio, json, os
    from agentcanvas.server.registry import WorkspaceComponentRegistry

    async def main():
        reg = WorkspaceComponentRegistry()
        reg.scan_all()
        await reg.fleet.start_many([("fenv", 0), ("fenv", 1)])
        pids = [r.server.pid for r in reg.fleet.records.values()]
        print(json.dumps(pids), flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def test_forked_servers_and_their_template_die_with_the_parent(workspace: Path) -> None:
    env = {**os.environ, "AGENTCANVAS_HOME": str(workspace)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        pids = json.loads(parent.stdout.readline())
        family = [*pids, psutil.Process(pids[0]).ppid()]  # the servers and their template
        assert all(psutil.pid_exists(p) for p in family)
        parent.kill()
        parent.wait(DEADLINE_S)

        def all_gone() -> bool:
            alive = [p for p in family if psutil.pid_exists(p)]
            return all(psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in alive)

        poll_until(all_gone, "the template and its servers to exit", DEADLINE_S)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(DEADLINE_S)
