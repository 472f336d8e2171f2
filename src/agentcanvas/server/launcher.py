"""ServerLauncher: the one seam that decides where node-set servers run.

Today: local ``auto_host`` child processes on loopback. Later another engine (Ray actors)
can place them elsewhere behind the same Protocol, and URL routing stays as it is.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agentcanvas.server.procs import ChildProcess, spawn
from agentcanvas.server.runtime import child_thread_env

READY_TIMEOUT_S = float(os.environ.get("AGENTCANVAS_SERVER_READY_TIMEOUT_S", "120"))
STOP_TIMEOUT_S = 5.0


class LaunchedServer(Protocol):
    """A running server: where it listens and how to stop it."""

    url: str
    pid: int | None

    def is_alive(self) -> bool: ...

    async def stop(self) -> None: ...


class ServerLauncher(Protocol):
    """Starts a node-set server, tagged or not."""

    async def launch(self, nodeset: str, tag: int | None) -> LaunchedServer: ...


@dataclass
class ProcessServer:
    """An auto_host child process."""

    url: str
    pid: int | None
    child: ChildProcess

    def is_alive(self) -> bool:
        return self.child.is_alive()

    async def stop(self) -> None:
        await self.child.aclose(STOP_TIMEOUT_S)


class LocalProcessLauncher:
    """Spawns ``python -m agentcanvas.server.auto_host`` children of this process.

    Spawn from the event loop's (long-lived) thread: the child's parent-death signal is tied
    to the spawning thread. Logs go to ``log_dir`` when given.
    """

    def __init__(self, log_dir: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.env = env or {}

    async def launch(self, nodeset: str, tag: int | None) -> LaunchedServer:
        argv = [sys.executable, "-m", "agentcanvas.server.auto_host", "--nodeset", nodeset]
        label = nodeset
        if tag is not None:
            argv += ["--tag", str(tag)]
            label = f"{nodeset}#{tag}"
        env = {**os.environ, **child_thread_env(), **self.env}
        stderr = self.log_dir / f"server_{label.replace('#', '_')}.log" if self.log_dir else None
        child = spawn(argv, env=env, stderr_path=stderr, stdout_path=stderr)
        try:
            info = await child.wait_ready(READY_TIMEOUT_S)
        except BaseException:
            await child.aclose(STOP_TIMEOUT_S)
            raise
        return ProcessServer(url=f"http://127.0.0.1:{info['port']}", pid=child.pid, child=child)
