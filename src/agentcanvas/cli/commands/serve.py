"""``agentcanvas serve``: the backend (API, WebSocket, web page) in the foreground."""

from __future__ import annotations

import argparse
import os
import socket
import sys

import psutil

from agentcanvas.api.security import TOKEN_RULE, is_loopback, token_problem
from agentcanvas.cli.command import Command
from agentcanvas.errors import ConfigError
from agentcanvas.paths import workspace_dir
from agentcanvas.scheduler.settings import AdmissionSettings

__all__ = ["SERVE", "allowed_hosts", "listening_socket"]


def cmd_serve(args: argparse.Namespace) -> int:
    from agentcanvas.api.app import create_app

    token = args.token if args.token is not None else (os.environ.get("AGENTCANVAS_TOKEN") or None)
    source = "--token" if args.token is not None else "AGENTCANVAS_TOKEN"
    if token is not None and (problem := token_problem(token)) is not None:
        raise ConfigError(f"{source}: refused, {problem}; a token must be {TOKEN_RULE}")
    if not is_loopback(args.host) and not token:
        raise ConfigError(
            f"--host {args.host}: binding off loopback needs --token (or AGENTCANVAS_TOKEN)"
        )
    admission = AdmissionSettings.resolve(args.cpu_oversubscription, args.vram_capacity_mb)
    sock = listening_socket(args.host, args.port)
    port = sock.getsockname()[1]
    url = f"http://{args.host}:{port}"
    hosts = allowed_hosts(args.host, args.allow_host or [])
    app = create_app(workspace_dir(), url, token=token, allowed_hosts=hosts, admission=admission)
    print(
        f"agentcanvas backend on {url} (workspace {workspace_dir()})", file=sys.stderr, flush=True
    )
    import uvicorn  # the web stack: only when serving

    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=10)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def listening_socket(host: str, port: int) -> socket.socket:
    """The backend's bound TCP socket; a ConfigError naming --port when it cannot bind.

    Its protocol is named IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted connections only
    for a socket whose protocol says TCP, and without it every small response on a
    keep-alive connection waits for the client's delayed ACK. Set on the listener as well
    (accepted sockets inherit it on Linux)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--port {port}: cannot bind {host}:{port} ({exc.strerror})") from exc
    return sock


def allowed_hosts(host: str, extra: list[str]) -> set[str]:
    """Names a request's Host header may carry (the DNS rebinding guard; loopback is implied).

    The bound address and the ``--allow-host`` names; for a wildcard bind also this machine's
    host name and every address of its interfaces, since clients reach it by any of them.
    """
    allowed = {host, *extra}
    if host in ("0.0.0.0", "::"):
        allowed |= {socket.gethostname(), socket.getfqdn()}
        for addresses in psutil.net_if_addrs().values():
            for address in addresses:
                if address.family == socket.AF_INET:
                    allowed.add(address.address)
                elif address.family == socket.AF_INET6:
                    allowed.add(f"[{address.address.split('%')[0]}]")
    return allowed


def _serve_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="bind address (default: 127.0.0.1; off loopback needs --token)",
    )
    p.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0: any free port)")
    p.add_argument(
        "--token",
        help="required when binding off loopback: at least 12 printable ASCII characters "
        "without spaces (default: $AGENTCANVAS_TOKEN, else none)",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        metavar="NAME",
        help="a host name clients use to reach the backend (repeatable)",
    )
    p.add_argument(
        "--cpu-oversubscription",
        metavar="X",
        help="CPU slots per core for admitting runs; a run holds 1 + worker_count slots "
        "(default 2.0, or AGENTCANVAS_CPU_OVERSUBSCRIPTION)",
    )
    p.add_argument(
        "--vram-capacity-mb",
        metavar="MB",
        help="GPU memory all runs together may hold, against their declared/calibrated "
        "figures; the only VRAM limit where VRAM cannot be measured "
        "(or AGENTCANVAS_VRAM_CAPACITY_MB)",
    )


SERVE = Command(
    "serve",
    "run the backend: REST API, WebSocket /ws and the web page",
    cmd_serve,
    _serve_arguments,
    examples=("serve", 'serve --host 0.0.0.0 --token "$TOKEN" --allow-host gpu-box'),
)
