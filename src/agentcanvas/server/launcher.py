"""ServerLauncher: the one seam that decides where node-set servers run.

Today: local ``auto_host`` child processes on loopback. Later another engine (Ray actors)
can place them elsewhere behind the same Protocol, and URL routing stays as it is.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from agentcanvas import envsettings
from agentcanvas.server.forkserver import ForkTemplate
from agentcanvas.server.procs import ChildProcess, reported_call_endpoint, spawn
from agentcanvas.server.runtime import child_thread_env

__all__ = [
    "READY_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "LaunchedServer",
    "LocalProcessLauncher",
    "ProcessServer",
    "ServerLauncher",
]

READY_TIMEOUT_S = envsettings.SERVER_READY_TIMEOUT_S.default
STOP_TIMEOUT_S = 5.0


class LaunchedServer(Protocol):
    """A running server: where it listens (``call_endpoint``: its call socket, from its
    ready report; None when unknown) and how to stop it."""

    url: str
    pid: int | None
    call_endpoint: str | None

    def is_alive(self) -> bool: ...

    async def stop(self, *, kill: bool = False) -> None:
        """SIGTERM with a grace period, then SIGKILL; ``kill``: SIGKILL at once (a server
        that no longer answers, e.g. a stopped process, cannot use a grace period)."""
        ...


class ServerLauncher(Protocol):
    """Starts a node-set server, tagged or not; `close` releases what the launcher keeps
    besides the servers (the fleet stops those first)."""

    async def launch(self, nodeset: str, tag: int | None) -> LaunchedServer: ...

    async def close(self) -> None: ...


@dataclass
class ProcessServer:
    """An auto_host child process."""

    url: str
    pid: int | None
    child: ChildProcess
    call_endpoint: str | None = None

    def is_alive(self) -> bool:
        return self.child.is_alive()

    async def stop(self, *, kill: bool = False) -> None:
        await self.child.aclose(0.0 if kill else STOP_TIMEOUT_S)


class LocalProcessLauncher:
    """Starts auto_host servers as children of this process: forked from a loaded template
    per node set (`server.forkserver`) when the node set is forkable, else spawned as
    ``python -m agentcanvas.server.auto_host``.

    Spawn from the event loop's (long-lived) thread: the child's parent-death signal is tied
    to the spawning thread. Logs go to ``log_dir`` when given. ``forkable(nodeset)`` says
    whether a node set may be forked (its manifest's ``forkable``: pass the catalogue's
    ``is_forkable``; without it every server is spawned); env ``AGENTCANVAS_FORK_SERVERS=0``
    spawns every server. `close` stops the templates.
    """

    def __init__(
        self,
        log_dir: Path | None = None,
        env: dict[str, str] | None = None,
        forkable: Callable[[str], bool] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.env = env or {}
        self.forkable = forkable
        self._templates: dict[str, ForkTemplate] = {}
        self._template_locks: dict[str, asyncio.Lock] = {}

    async def launch(self, nodeset: str, tag: int | None) -> LaunchedServer:
        label = nodeset if tag is None else f"{nodeset}#{tag}"
        log = self.log_dir / f"server_{label.replace('#', '_')}.log" if self.log_dir else None
        if self._forks(nodeset):
            template = await self._template(nodeset)
            return await template.fork(tag, log, envsettings.SERVER_READY_TIMEOUT_S.get())
        argv = [sys.executable, "-m", "agentcanvas.server.auto_host", "--nodeset", nodeset]
        if tag is not None:
            argv += ["--tag", str(tag)]
        child = spawn(argv, env=self._child_env(), stderr_path=log, stdout_path=log)
        try:
            info = await child.wait_ready(envsettings.SERVER_READY_TIMEOUT_S.get())
        except BaseException:
            await child.aclose(STOP_TIMEOUT_S)
            raise
        return ProcessServer(
            url=f"http://127.0.0.1:{info['port']}",
            pid=child.pid,
            child=child,
            call_endpoint=reported_call_endpoint(info),
        )

    def _forks(self, nodeset: str) -> bool:
        if envsettings.FORK_SERVERS.get() == "0" or self.forkable is None:
            return False
        return sys.platform.startswith("linux") and self.forkable(nodeset)

    def _child_env(self) -> dict[str, str]:
        return {**os.environ, **child_thread_env(), **self.env}

    async def _template(self, nodeset: str) -> ForkTemplate:
        """The node set's template, started (or restarted, if it died) on first need."""
        async with self._template_locks.setdefault(nodeset, asyncio.Lock()):
            template = self._templates.get(nodeset)
            if template is None or not template.child.is_alive():
                if template is not None:
                    await template.stop()
                log = self.log_dir / f"template_{nodeset}.log" if self.log_dir else None
                template = await ForkTemplate.start(
                    nodeset, self._child_env(), log, envsettings.SERVER_READY_TIMEOUT_S.get()
                )
                self._templates[nodeset] = template
            return template

    async def close(self) -> None:
        """Stop the templates (their forked servers are stopped by their owners)."""
        templates, self._templates = list(self._templates.values()), {}
        for template in templates:
            await template.stop()
