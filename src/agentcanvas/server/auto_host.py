"""auto_host: serve one node set over HTTP on 127.0.0.1 with an ephemeral port.

    python -m agentcanvas.server.auto_host --nodeset NAME [--tag K] [--record-dir DIR]

The port reaches the parent through the ready pipe (no race: the socket is bound and
listening before the line is written). The HTTP routes are `host_http`'s (``/health``,
``/manifest``, ``/call/{node}``, ``/panel/*``, ``/evict``, ``/attach`` + ``/detach``,
``/stats``, ``/determinism``, ``/batch_audit``; the batch-invariance checks run before the
server reports ready). The hot path — node calls, the episode's panel round trip and
evictions — is served on the call socket (`server.rpc_server`) by the same operations
(`hosted.HostedNodeSet`); a replicated node set's on the connection's thread
(`hosted.DirectCalls`).

A server imports its own node set and no other (`NodeSetCatalogue.load_one`): it does not
pay for the workspace's other node sets, nor depend on them (one user's broken node set).

SIGTERM and SIGINT stop the server gracefully, then the node set is closed. With
``--record-dir`` (``agentcanvas serve-nodeset``) the server records itself in
``DIR/<nodeset>[_<tag>].json`` while it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from agentcanvas import envsettings
from agentcanvas.catalogue import NodeSetCatalogue
from agentcanvas.errors import AgentCanvasError
from agentcanvas.nodes.base import LocalNodeSet, NodeSet
from agentcanvas.paths import check_name
from agentcanvas.server import procs
from agentcanvas.server.batch_audit import audit_settings_from_env, build_auditor
from agentcanvas.server.batched_inference import BatchedInferenceServer
from agentcanvas.server.batching import policy_from_env
from agentcanvas.server.host_http import create_app
from agentcanvas.server.hosted import DirectCalls, HostedNodeSet
from agentcanvas.server.rpc_server import RpcServer
from agentcanvas.server.runtime import fix_numeric_threads
from agentcanvas.server.server_record import (
    ServerRecordFile,
    record_path,
    remove_record,
    write_record,
)

__all__ = [
    "HOST",
    "ServerRecordFile",
    "main",
    "record_path",
    "remove_record",
    "serve",
    "write_record",
]

HOST = "127.0.0.1"
_STOP_GRACE_S = 5.0  # uvicorn's own shutdown, after an error or a cancellation; then cancelled
log = logging.getLogger("agentcanvas.server")


def _bind() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
    sock.bind((HOST, 0))
    sock.listen(128)
    return sock


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture: `serve` handles SIGINT/SIGTERM in the loop.

    uvicorn re-raises a captured SIGTERM once it has shut down, which kills the process
    before `serve` can close the node set and remove its record file.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    nodeset: str,
    tag: int | None,
    record_dir: Path | None = None,
    loaded: NodeSet | None = None,
    *,
    inline: bool = False,
) -> None:
    """Load the node set (unless ``loaded``: a forked server got it from its template), bind,
    report the port to the parent, serve until terminated.

    Calls that are not a replicated node set's go through the server's event loop, which
    every worker calling a shared server shares: only a built-in's synchronous nodes run on
    it (the catalogue says which; ``inline`` for a ``loaded`` node set, default no), anyone
    else's on threads, so that one caller's slow call never holds up another's."""
    if loaded is None:
        catalogue = NodeSetCatalogue()
        loaded = catalogue.load_one(nodeset)  # its own node set only: never the others
        inline = catalogue.trusted_inline(nodeset)
    instance = LocalNodeSet(loaded, inline=inline)
    try:
        await _serve(_hosted(instance, tag), record_dir)
    finally:
        await instance.close()


def _hosted(instance: LocalNodeSet, tag: int | None) -> HostedNodeSet:
    """The instance with its batcher (start-up batch-invariance checks included)."""
    policy = policy_from_env()
    auditor = build_auditor(instance, policy.max_batch, audit_settings_from_env())
    return HostedNodeSet(instance, BatchedInferenceServer(policy, auditor=auditor), tag)


async def _serve(hosted: HostedNodeSet, record_dir: Path | None) -> None:
    """Serve HTTP and the call socket until a signal stops uvicorn (or either fails); both
    tasks are this function's, ended before it returns."""
    instance, nodeset = hosted.instance, hosted.instance.name
    replicated = instance.manifest.parallelism == "replicated"
    direct = DirectCalls(instance).handlers() if replicated else None
    calls = RpcServer(hosted.handlers(), HOST, direct)
    sock = _bind()
    url = f"http://{HOST}:{sock.getsockname()[1]}"
    server = _Server(_uvicorn_config(hosted, calls.endpoint))
    written: list[Path] = []  # this server's record file, once written
    with _stopped_by_signals(server, written):
        try:
            async with asyncio.TaskGroup() as tasks:
                serving = tasks.create_task(server.serve(sockets=[sock]), name="http")
                answering = tasks.create_task(calls.serve(), name="calls")
                try:
                    await _until_started(server, serving)
                    if record_dir is not None:
                        written.append(write_record(record_dir, nodeset, hosted.tag, url))
                    _announce(nodeset, url, sock.getsockname()[1], calls.endpoint)
                    await asyncio.wait([serving])  # until a signal; a failure: the group
                    # raises it (not `await serving`: our cancellation would cancel uvicorn)
                finally:  # an error or a cancellation: uvicorn still runs; stop it gracefully
                    server.should_exit = True  # (its listener and connections closed) in time
                    answering.cancel()  # the call socket serves until cancelled
                    await asyncio.wait([serving], timeout=_STOP_GRACE_S)
        except BaseExceptionGroup as group:
            raise _unwrapped(group) from None
        finally:
            for path in written:
                remove_record(path)


@contextlib.contextmanager
def _stopped_by_signals(server: uvicorn.Server, written: list[Path]) -> Iterator[None]:
    """SIGTERM and SIGINT stop ``server`` gracefully while in the block; an orphan (its
    parent died: the kernel's parent-death SIGTERM) exits at once instead, removing the
    record files in ``written``: nobody is left to answer, and a graceful stop (a model's
    close) would only outlive the parent."""
    loop = asyncio.get_running_loop()

    def on_signal(signum: int) -> None:
        if _orphaned():
            for path in written:
                remove_record(path)
            os._exit(0)
        server.handle_exit(signum, None)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        yield
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def _unwrapped(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one failure a task group reports, as itself (``main`` names an AgentCanvasError
    and exits 2), or the group when several tasks failed differently."""
    failures = list(dict.fromkeys(group.exceptions))  # the same exception seen twice: once
    return failures[0] if len(failures) == 1 else group


def _uvicorn_config(hosted: HostedNodeSet, call_endpoint: str) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(hosted, call_endpoint),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=300,
        proxy_headers=False,
        server_header=False,
        date_header=False,
    )


def _orphaned() -> bool:
    """Whether the parent that started us (``PARENT_PID_ENV``) is gone."""
    expected = os.environ.get(procs.PARENT_PID_ENV)
    return expected is not None and expected.isdigit() and os.getppid() != int(expected)


def _announce(nodeset: str, url: str, port: int, call_endpoint: str) -> None:
    """Report the port to the parent through the ready pipe, or print where we listen."""
    if os.environ.get(procs.READY_FD_ENV):
        procs.child_report_ready(
            {"port": port, "pid": os.getpid(), "nodeset": nodeset, "call": call_endpoint}
        )
    else:
        print(f"serving {nodeset} on {url}", flush=True)  # calls: see /health


async def _until_started(server: uvicorn.Server, serving: asyncio.Future[None]) -> None:
    while not server.started:
        if serving.done():
            serving.result()
            raise AgentCanvasError("uvicorn stopped before starting")
        await asyncio.sleep(0.005)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentcanvas.server.auto_host")
    parser.add_argument("--nodeset", required=True)
    parser.add_argument("--tag", type=int, default=None)
    parser.add_argument(
        "--record-dir",
        type=Path,
        default=None,
        help="record this server in DIR/<nodeset>[_<tag>].json while it runs",
    )
    args = parser.parse_args(argv)
    if os.environ.get(procs.PARENT_PID_ENV):
        procs.set_parent_death_signal()
    try:
        check_name("nodeset", args.nodeset)
        envsettings.check_all()  # a bad setting fails here, before the node set loads
        fix_numeric_threads()
        asyncio.run(serve(args.nodeset, args.tag, args.record_dir))
    except AgentCanvasError as exc:
        print(f"auto_host {args.nodeset}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
