"""A node-set server whose parent dies exits at once, however slowly its node set closes.

The kernel's parent-death signal is a SIGTERM; a graceful stop (uvicorn's shutdown, then the
node set's ``close``, which for a model may take seconds) would let the server outlive its
parent. An orphaned server has nobody to answer: it exits without the graceful stop. The
control: the same server stopped by its living parent does close gracefully.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from support.polling import poll_until
from support.workspace import write_files

pytestmark = pytest.mark.timeout(120)
CLOSE_S = 4.0  # how long the node set's close takes
SLOW_CLOSE = f"""
import time
from agentcanvas.nodes import NodeSet, PortSpec


class State:
    def close(self):
        time.sleep({CLOSE_S})


NODESET = NodeSet(name="slow_close", parallelism="shared", state_factory=State, forkable=False)


@NODESET.node("echo", inputs=[PortSpec(name="x")], outputs=[PortSpec(name="x")])
def echo(inputs, config, state, ctx):
    return {{"x": inputs["x"]}}
"""
PARENT = """
import asyncio, sys
from agentcanvas.server.launcher import LocalProcessLauncher

async def main():
    server = await LocalProcessLauncher().launch("slow_close", None)
    print(server.pid, flush=True)
    if sys.argv[1] == "stop":
        await server.stop()
        print("stopped", flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


def _parent(workspace: Path, mode: str) -> tuple[subprocess.Popen[str], int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, mode],
        cwd=workspace,
        env={**os.environ, "AGENTCANVAS_HOME": str(workspace)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_an_orphaned_server_exits_without_its_slow_close(tmp_path: Path) -> None:
    workspace = write_files(tmp_path, {"graph_nodes/slow_close/__init__.py": SLOW_CLOSE})
    parent, server = _parent(workspace, "orphan")
    try:
        killed_at = time.monotonic()
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        poll_until(lambda: _gone(server), "the orphaned server to exit", 30.0)
        gone_s = time.monotonic() - killed_at
    finally:
        if not _gone(server):
            os.kill(server, signal.SIGKILL)
    assert gone_s < CLOSE_S / 2, f"the orphan lived {gone_s:.2f} s after its parent"


def test_a_server_its_parent_stops_closes_gracefully(tmp_path: Path) -> None:
    workspace = write_files(tmp_path, {"graph_nodes/slow_close/__init__.py": SLOW_CLOSE})
    parent, server = _parent(workspace, "stop")
    try:
        started = time.monotonic()
        assert parent.stdout is not None
        assert parent.stdout.readline().strip() == "stopped"
        took_s = time.monotonic() - started
        assert _gone(server)
    finally:
        parent.kill()
        parent.wait(30)
    assert took_s >= CLOSE_S * 0.9, f"the close was cut short ({took_s:.2f} s)"
