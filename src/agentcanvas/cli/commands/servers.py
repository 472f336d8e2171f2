"""``agentcanvas serve-nodeset NAME`` and ``agentcanvas servers``: node-set servers by hand.

``serve-nodeset`` runs one auto_host server in the foreground (Ctrl-C or SIGTERM stops it).
``serve-policy NODESET.NODE`` serves one of our model node sets over the openpi WebSocket
policy-server protocol (``agentcanvas.policy_protocol``), so that client scripts written for
openpi's ``serve_policy`` use our batch-invariant server.
While it runs it records itself in ``<workspace>/outputs/servers/<name>[_<tag>].json``
(pid, url, nodeset, tag, started_at); the file goes when the server stops. ``servers`` lists
those records: ``up`` when the process is alive and answers ``/health``, ``unresponsive``
when it is alive but does not answer; a record whose process is gone is pruned.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import msgspec
import psutil
from pydantic import ValidationError

from agentcanvas.api.security import TOKEN_RULE, is_loopback, token_problem
from agentcanvas.cli.command import Command
from agentcanvas.cli.common import print_json, workspace_registry
from agentcanvas.cli.options import add_json
from agentcanvas.errors import RunError, UserInputError
from agentcanvas.fileio import read_json
from agentcanvas.nodes import CallContext
from agentcanvas.nodes.base import NodeSetHandle
from agentcanvas.paths import check_name, workspace_dir
from agentcanvas.policy_protocol import connection_id, serve_policy
from agentcanvas.server import protocol
from agentcanvas.server.registry import WorkspaceComponentRegistry
from agentcanvas.server.server_record import ServerRecordFile, record_path

HEALTH_TIMEOUT_S = 2.0
# A record's started_at is the process's create time; a larger gap means the pid was reused.
_CREATE_TIME_SLACK_S = 1.0

ServerStatus = Literal["up", "unresponsive"]


@dataclass(frozen=True)
class RecordedServer:
    """One recorded server that is still running."""

    nodeset: str
    tag: int | None
    url: str
    pid: int
    started_at: str
    status: ServerStatus
    record: str


def servers_dir(workspace: Path | None = None) -> Path:
    """``<workspace>/outputs/servers``: where by-hand servers record themselves."""
    return (workspace if workspace is not None else workspace_dir()) / "outputs" / "servers"


def probe(path: Path) -> RecordedServer | None:
    """The server recorded in ``path``, or None (and the file pruned) when it is stale."""
    try:
        record = ServerRecordFile.model_validate(read_json(path))
    except (RunError, ValidationError):
        _prune(path)  # garbled: records are written atomically, so nobody is mid-write
        return None
    if not _process_matches(record):
        _prune(path)
        return None
    status: ServerStatus = "up" if _answers_health(record) else "unresponsive"
    return RecordedServer(
        nodeset=record.nodeset,
        tag=record.tag,
        url=record.url,
        pid=record.pid,
        started_at=record.started_at.isoformat(),
        status=status,
        record=str(path),
    )


def recorded_servers(folder: Path) -> list[RecordedServer]:
    """Every running recorded server under ``folder``, pruning stale records on the way."""
    if not folder.is_dir():
        return []
    found = (probe(path) for path in sorted(folder.glob("*.json")))
    return [server for server in found if server is not None]


def _process_matches(record: ServerRecordFile) -> bool:
    try:
        process = psutil.Process(record.pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        created_s = process.create_time()
    except psutil.NoSuchProcess:
        return False
    return bool(abs(created_s - record.started_at.timestamp()) <= _CREATE_TIME_SLACK_S)


def _answers_health(record: ServerRecordFile) -> bool:
    try:
        response = httpx.get(f"{record.url}{protocol.HEALTH}", timeout=HEALTH_TIMEOUT_S)
        health = msgspec.json.decode(response.content, type=protocol.HealthReply)
    except (httpx.HTTPError, msgspec.DecodeError):  # a reply that does not fit included
        return False
    return health.pid == record.pid


def _prune(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def cmd_serve_nodeset(args: argparse.Namespace) -> int:
    name = check_name("nodeset", args.name, field="NAME")
    if args.tag is not None and args.tag < 0:
        raise UserInputError(f"--tag must be >= 0, got {args.tag}")
    workspace_registry().manifest(name)  # an unknown node set: UnknownNodeSetError naming the known
    folder = servers_dir()
    running = probe(record_path(folder, name, args.tag))
    if running is not None:
        label = name if args.tag is None else f"{name}#{args.tag}"
        raise UserInputError(
            f"{label} is already served at {running.url} (pid {running.pid}, "
            f"{running.status}); stop it first or pick another --tag"
        )
    argv = ["--nodeset", name, "--record-dir", str(folder)]
    if args.tag is not None:
        argv += ["--tag", str(args.tag)]
    from agentcanvas.server import auto_host  # the server's web stack: only to serve

    return auto_host.main(argv)


def cmd_servers(args: argparse.Namespace) -> int:
    servers = recorded_servers(servers_dir())
    if args.json:
        print_json({"servers": [asdict(s) for s in servers]})
        return 0
    if not servers:
        print("no node-set servers recorded (start one with `agentcanvas serve-nodeset NAME`)")
        return 0
    print(f"{'nodeset':<20} {'tag':>4} {'pid':>8}  {'url':<28} {'status':<13} started")
    for s in servers:
        tag = "-" if s.tag is None else str(s.tag)
        started = datetime.fromisoformat(s.started_at).astimezone().strftime("%Y-%m-%d %H:%M:%S")
        print(f"{s.nodeset:<20} {tag:>4} {s.pid:>8}  {s.url:<28} {s.status:<13} {started}")
    return 0


@dataclass(frozen=True)
class PolicyTarget:
    """What ``serve-policy`` serves: one node, its inputs' request keys, its config."""

    nodeset: str
    node: str
    inputs: dict[str, str]  # port -> request key
    config: dict[str, Any]


def _policy_target(args: argparse.Namespace, registry: WorkspaceComponentRegistry) -> PolicyTarget:
    nodeset, _, node = str(args.target).partition(".")
    manifest = registry.manifest(check_name("nodeset", nodeset, field="NODESET"))
    if manifest.parallelism == "replicated":
        raise UserInputError(
            f"NODESET: {nodeset} is replicated (an environment); serve-policy serves a model "
            "node set (shared or local)"
        )
    names = [n.name for n in manifest.nodes]
    if not node:
        if len(names) != 1:
            raise UserInputError(f"name the node: NODESET.NODE, one of {names}")
        node = names[0]
    spec = manifest.node_type(node)
    if spec is None:
        raise UserInputError(f"NODE: {nodeset} has no node {node!r} (it has {names})")
    inputs = {p.name: p.name for p in spec.inputs}
    for pair in args.input or []:
        port, sep, key = str(pair).partition("=")
        if not sep or port not in inputs or not key:
            raise UserInputError(
                f"--input {pair!r}: write PORT=KEY with PORT one of {sorted(inputs)}"
            )
        inputs[port] = key
    try:
        config = json.loads(args.config) if args.config else {}
    except ValueError as exc:
        raise UserInputError(f"--config is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise UserInputError("--config must be a JSON object")
    try:
        config = registry.nodeset(nodeset).validate_config(node, config)
    except UserInputError as exc:
        raise UserInputError(f"--config: {exc}") from exc
    return PolicyTarget(nodeset, node, inputs, config)


def _api_key(args: argparse.Namespace) -> str | None:
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not key:
        raise UserInputError(f"--api-key-env: {args.api_key_env} is not set")
    if key is not None and (problem := token_problem(key)) is not None:
        raise UserInputError(f"--api-key-env: refused, {problem}; a key must be {TOKEN_RULE}")
    if not is_loopback(args.host) and not key:
        raise UserInputError(
            f"--host {args.host}: serving off loopback needs --api-key-env (a key clients send "
            "as 'Authorization: Api-Key <key>')"
        )
    return key


def cmd_serve_policy(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UserInputError(f"--port must be 0..65535, got {args.port}")
    registry = workspace_registry()
    target = _policy_target(args, registry)
    asyncio.run(_serve_policy(registry, target, args.host, args.port, _api_key(args)))
    return 0


Infer = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def _inference(handle: NodeSetHandle, target: PolicyTarget) -> Infer:
    """One request of a connection as one call of ``target``'s node: the connection is the
    episode, its requests the steps (see :func:`_serve_policy`)."""
    steps: dict[str, int] = {}

    async def infer(request: dict[str, Any]) -> dict[str, Any]:
        inputs = {port: request[key] for port, key in target.inputs.items() if key in request}
        client = connection_id()
        step = steps.get(client, 0)
        steps[client] = step + 1
        task = request.get("task", request.get("prompt", ""))
        ctx = CallContext(
            node_id="serve-policy",
            step=step,
            episode_key=client,
            episode_seed=int(request.get("episode_seed", 0) or 0),
            task=task if isinstance(task, str) else "",
            client=client,
        )
        outputs: dict[str, Any] = await handle.call(target.node, target.config, inputs, ctx)
        return outputs

    return infer


async def _serve_policy(
    registry: WorkspaceComponentRegistry,
    target: PolicyTarget,
    host: str,
    port: int,
    api_key: str | None,
) -> None:
    """Start the node set (its shared server, or in process), serve it until SIGINT/SIGTERM.

    A request's entries named in ``target.inputs`` are the node's inputs (the others are
    ignored); the reply is the node's outputs. Each connection is one client (a batch of
    concurrent connections is one shared batch, batch-invariant); its requests are the steps
    of one episode: ``step`` counts them, ``task`` is the request's ``task`` (or ``prompt``)
    when it is a string, the episode seed its ``episode_seed`` (default 0)."""
    manifest = registry.manifest(target.nodeset)
    handle: NodeSetHandle
    if manifest.parallelism == "shared":
        await registry.load_shared(target.nodeset)
        bound = registry.bound(target.nodeset)
        assert bound is not None
        handle = bound
    else:
        handle = registry.local_instance(target.nodeset)
    infer = _inference(handle, target)
    metadata = {
        "server": "agentcanvas serve-policy",
        "nodeset": target.nodeset,
        "node": target.node,
        "inputs": target.inputs,
        "determinism": await handle.determinism(),
    }
    server = await serve_policy(infer, metadata, host, port, api_key)
    bound_port = next(iter(server.sockets)).getsockname()[1]
    print(
        f"serving {target.nodeset}.{target.node} at ws://{host}:{bound_port} "
        f"(openpi policy-server protocol; Ctrl-C stops it)",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        server.close()
        await server.wait_closed()
        await registry.shutdown_all()


def _serve_nodeset_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="node-set name (see `agentcanvas nodesets`)")
    p.add_argument(
        "--tag",
        type=int,
        default=None,
        help="replica tag K: serves NAME#K (default: none, one untagged server)",
    )


def _serve_policy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("target", metavar="NODESET.NODE", help="e.g. policy_mlp.act")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: 127.0.0.1)")
    p.add_argument(
        "--port", type=int, default=8000, help="port (default: 8000, as openpi; 0: any free port)"
    )
    p.add_argument(
        "--input",
        action="append",
        metavar="PORT=KEY",
        help="read input PORT from request key KEY (repeatable; default: the port's name)",
    )
    p.add_argument("--config", help="the node's config, as JSON (default: {})")
    p.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the API key clients must send (needed off loopback)",
    )


SERVE_NODESET = Command(
    "serve-nodeset",
    "serve one node set over HTTP in the foreground",
    cmd_serve_nodeset,
    _serve_nodeset_arguments,
    examples=("serve-nodeset env_minigrid", "serve-nodeset env_minigrid --tag 1"),
)
SERVE_POLICY = Command(
    "serve-policy",
    "serve a model node set over the openpi WebSocket policy-server protocol",
    cmd_serve_policy,
    _serve_policy_arguments,
    examples=(
        "serve-policy policy_mlp.act",
        "serve-policy policy_mlp.act --input obs=observation/state --port 8001",
    ),
)
SERVERS = Command(
    "servers",
    "list the node-set servers started with serve-nodeset",
    cmd_servers,
    lambda p: add_json(p, "the list"),
    examples=("servers", "servers --json"),
)
