"""``agentcanvas serve-nodeset NAME`` and ``agentcanvas servers``: node-set servers by hand.

``serve-nodeset`` runs one auto_host server in the foreground (Ctrl-C or SIGTERM stops it).
While it runs it records itself in ``<workspace>/outputs/servers/<name>[_<tag>].json``
(pid, url, nodeset, tag, started_at); the file goes when the server stops. ``servers`` lists
those records: ``up`` when the process is alive and answers ``/health``, ``unresponsive``
when it is alive but does not answer; a record whose process is gone is pruned.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import msgspec
import psutil
from pydantic import ValidationError

from agentcanvas.cli_common import command, print_json, workspace_registry
from agentcanvas.errors import RunError, UserInputError
from agentcanvas.fileio import read_json
from agentcanvas.paths import check_name, workspace_dir
from agentcanvas.server import auto_host, protocol
from agentcanvas.server.auto_host import ServerRecordFile, record_path

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


@command("serve-nodeset")
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
    return auto_host.main(argv)


@command("servers")
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


def extend_parser(sub: Any) -> None:
    """Registers the server sub-commands."""
    p = sub.add_parser("serve-nodeset", help="serve one node set over HTTP in the foreground")
    p.add_argument("name", metavar="NAME", help="node-set name (see `agentcanvas nodesets`)")
    p.add_argument("--tag", type=int, default=None, help="replica tag K (serves NAME#K)")
    p = sub.add_parser("servers", help="list the node-set servers started with serve-nodeset")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
