"""Pre-forked node-set servers: one loaded template process per node set forks each server.

    python -m agentcanvas.server.forkserver --nodeset NAME     (started by `ForkTemplate`)

A fresh auto_host interpreter spends most of its start importing FastAPI, uvicorn, msgspec and
its node set. The template does that once — imports done, node set loaded, no
thread and no event loop started — and then forks one server per request, so a server starts
in milliseconds and shares the template's memory pages until it writes to them.

Process hygiene is as strict as for spawned servers (`server.procs`):

- the template is a `procs.spawn` child of the launcher: parent-death signal, ready pipe,
  TERM → deadline → KILL → reap;
- every forked server sets its own parent-death signal (its parent is the template), so the
  launcher's death kills the template, whose death kills its servers; the template ignores
  SIGCHLD, so the kernel reaps its servers at once (no zombies);
- the launcher watches and stops a forked server through a pidfd (`ForkedServer`): signals
  can never reach a recycled pid; TERM → deadline → KILL → wait until it is gone.

A request is one line on the template's control socket (an abstract unix socket):
``{"tag": K, "log": PATH | null}``. The forked server answers on that same connection with
auto_host's ready line (port, pid, call endpoint), through `procs.child_report_ready`.
Node sets that declare ``forkable: false`` (torch models) are spawned, never forked.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import secrets
import select
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from agentcanvas.errors import AgentCanvasError, ServerDiedError, ServerError
from agentcanvas.server import procs

__all__ = ["ForkTemplate", "ForkedServer"]

_REQUEST_TIMEOUT_S = 5.0
_KILL_WAIT_S = 5.0
_TERM_TIMEOUT_S = 5.0  # a forked server's grace period after SIGTERM
_POLL_S = 0.01


# --- launcher side --------------------------------------------------------------------------


class ForkedServer:
    """A server forked by a template; watched and stopped through a pidfd."""

    def __init__(self, url: str, pid: int, pidfd: int, call_endpoint: str | None = None) -> None:
        self.url, self._pidfd = url, pidfd
        self.pid: int | None = pid
        self.call_endpoint = call_endpoint  # from the ready report: no /health before a call

    def is_alive(self) -> bool:
        if self._pidfd < 0:
            return False
        readable, _, _ = select.select([self._pidfd], [], [], 0)
        return not readable  # a pidfd turns readable when its process exits

    async def stop(self, *, kill: bool = False) -> None:
        """SIGTERM, wait, SIGKILL, wait until gone (the template reaps it); ``kill``: no
        grace period."""
        term_timeout_s = 0.0 if kill else _TERM_TIMEOUT_S
        if self._pidfd < 0:
            return
        try:
            steps = ((signal.SIGTERM, term_timeout_s), (signal.SIGKILL, _KILL_WAIT_S))
            for signum, wait_s in steps:
                if await self._signal_and_wait(signum, wait_s):
                    return
        finally:
            os.close(self._pidfd)
            self._pidfd = -1

    async def _signal_and_wait(self, signum: signal.Signals, wait_s: float) -> bool:
        if not self.is_alive():
            return True
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self._pidfd, signum)
        deadline = asyncio.get_running_loop().time() + wait_s
        while self.is_alive():
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(_POLL_S)
        return True


class ForkTemplate:
    """The template process of one node set (a `procs.spawn` child) and its control socket."""

    def __init__(self, child: procs.ChildProcess, control: str) -> None:
        self.child, self.control = child, control

    @classmethod
    async def start(
        cls, nodeset: str, env: dict[str, str], log: Path | None, ready_timeout_s: float
    ) -> ForkTemplate:
        argv = [sys.executable, "-m", "agentcanvas.server.forkserver", "--nodeset", nodeset]
        child = procs.spawn(argv, env=env, stderr_path=log, stdout_path=log)
        try:
            info = await child.wait_ready(ready_timeout_s)
        except BaseException:
            await child.aclose()
            raise
        return cls(child, str(info["control"]))

    async def fork(self, tag: int | None, log: Path | None, timeout_s: float) -> ForkedServer:
        """Ask for one server; its ready report comes back on the same connection."""
        if not self.child.is_alive():
            raise ServerDiedError(f"the template of pid {self.child.pid} is gone")
        reader, writer = await asyncio.open_unix_connection("\0" + self.control)
        try:
            request = {"tag": tag, "log": str(log) if log else None}
            writer.write(json.dumps(request).encode() + b"\n")
            async with asyncio.timeout(timeout_s):
                line = await reader.readline()
        except TimeoutError:
            raise ServerError(
                f"a server forked by template {self.child.pid} was not ready after {timeout_s:g} s"
            ) from None
        finally:
            writer.close()
        if not line:
            raise ServerDiedError(
                f"a server forked by template {self.child.pid} exited before ready (see {log})"
            )
        info: dict[str, Any] = json.loads(line)
        pid = int(info["pid"])
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError as exc:
            raise ServerDiedError(f"forked server pid {pid} exited right after ready") from exc
        endpoint = procs.reported_call_endpoint(info)
        return ForkedServer(f"http://127.0.0.1:{info['port']}", pid, pidfd, endpoint)

    async def stop(self) -> None:
        await self.child.aclose()


# --- template side --------------------------------------------------------------------------


def _template(nodeset: str) -> None:
    """Load everything a server needs, then fork servers on request until killed."""
    from agentcanvas.catalogue import NodeSetCatalogue
    from agentcanvas.server import auto_host  # noqa: F401  (FastAPI, uvicorn, msgspec: loaded)

    loaded = NodeSetCatalogue().load_one(nodeset)  # its own node set only, as auto_host
    if loaded.preload is not None:
        loaded.preload()
    _preload_server_imports()
    gc.freeze()  # the collector never writes to the template's objects: their pages stay shared
    control = f"agentcanvas-fork-{os.getpid()}-{secrets.token_hex(6)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + control)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the servers at once
    procs.child_report_ready({"pid": os.getpid(), "control": control})
    while True:
        conn, _ = listener.accept()
        try:
            conn.settimeout(_REQUEST_TIMEOUT_S)
            request = json.loads(conn.makefile("rb").readline())
        except (OSError, ValueError):
            conn.close()
            continue
        template_pid = os.getpid()  # read before the fork: the child checks it is still there
        if os.fork() == 0:
            listener.close()
            os._exit(_forked_server(conn, request, loaded, template_pid))
        conn.close()


def _preload_server_imports() -> None:
    """Import what uvicorn and FastAPI import lazily when a server starts (once, here)."""
    import uvicorn
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/warm")
    async def warm() -> dict[str, Any]:  # a typed route: FastAPI's model machinery loads
        return {}

    uvicorn.Config(app, lifespan="off", log_level="warning").load()


def _forked_server(
    conn: socket.socket, request: dict[str, Any], loaded: Any, template_pid: int
) -> int:
    """In the forked child: become an auto_host server reporting ready on ``conn``."""
    from agentcanvas.server import auto_host

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # The template's pid, not getppid(): a template that died between our fork and the prctl
    # would make getppid() the reaper's, and the check after the prctl would pass.
    os.environ[procs.PARENT_PID_ENV] = str(template_pid)
    procs.set_parent_death_signal()  # the parent is the template
    log = request.get("log")
    if log:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    conn.settimeout(None)
    os.environ[procs.READY_FD_ENV] = str(conn.detach())
    tag = request.get("tag")
    try:
        asyncio.run(
            auto_host.serve(loaded.name, tag if isinstance(tag, int) else None, loaded=loaded)
        )
    except AgentCanvasError as exc:
        print(f"forked server {loaded.name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentcanvas.server.forkserver")
    parser.add_argument("--nodeset", required=True)
    args = parser.parse_args(argv)
    if os.environ.get(procs.PARENT_PID_ENV):
        procs.set_parent_death_signal()
    from agentcanvas import envsettings
    from agentcanvas.paths import check_name
    from agentcanvas.server.runtime import fix_numeric_threads

    try:
        check_name("nodeset", args.nodeset)
        envsettings.check_all()  # as auto_host does: a bad setting fails before anything loads
        fix_numeric_threads()
        _template(args.nodeset)
    except AgentCanvasError as exc:
        print(f"forkserver {args.nodeset}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
