"""``agentcanvas serve`` and the backend client commands: submit, runs, status, cancel, resume."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from typing import Any

import httpx
import psutil
import uvicorn

from agentcanvas import exit_codes
from agentcanvas.api.security import TOKEN_RULE, is_loopback, token_problem
from agentcanvas.cli_common import (
    FRAMES_HELP,
    add_meta_arguments,
    command,
    parse_max_errors,
    print_json,
)
from agentcanvas.errors import ConfigError, UserInputError
from agentcanvas.eval.config import EvalConfig
from agentcanvas.paths import workspace_dir
from agentcanvas.scheduler.settings import AdmissionSettings

DEFAULT_URL = "http://127.0.0.1:8765"
FOLLOW_POLL_S = 1.0


@command("serve")
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


def _client(args: argparse.Namespace) -> httpx.Client:
    token = os.environ.get("AGENTCANVAS_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=args.url, timeout=30.0, headers=headers)


STOP_ALPHA_DEFAULT = EvalConfig.model_fields["stop_alpha"].default


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    try:
        with _client(args) as client:
            response = client.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        raise UserInputError(
            f"--url {args.url}: no backend answers ({type(exc).__name__}); "
            "start one with `agentcanvas serve`"
        ) from exc
    if response.status_code >= 400:
        detail = response.json().get("detail", response.text) if response.content else ""
        raise UserInputError(f"backend answered {response.status_code}: {detail}")
    return response.json()


@command("submit")
def cmd_submit(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {
        "graph_name": args.graph,
        "episode_count": args.episodes,
        "worker_count": args.workers,
        "seed": args.seed,
        "priority": args.priority,
        "start_index": args.start_index,
    }
    if args.tasks:
        body["tasks"] = [t.strip() for t in args.tasks.split(",")]
    if args.step_budget is not None:
        body["step_budget"] = args.step_budget
    if args.max_errors is not None:
        body["max_errors"] = parse_max_errors(args.max_errors)
    if args.episode_timeout is not None:
        body["episode_timeout_s"] = args.episode_timeout
    if args.save_frames or args.frames:
        body["frames"] = args.frames or "every"
    if args.certify:
        body["certify"] = True
    if args.binary_interval:
        body["binary_interval"] = args.binary_interval
    if args.until_halfwidth is not None:
        body["until_halfwidth"] = args.until_halfwidth
    if args.until_decided_vs is not None:
        body["until_decided_vs"] = args.until_decided_vs
    if args.stop_alpha != STOP_ALPHA_DEFAULT:
        body["stop_alpha"] = args.stop_alpha
    body.update(_meta_body(args))
    started = _call(args, "POST", "/api/eval/v2/start", json=body)
    print_json(started, indent=None)
    if not args.follow:
        return 0
    return _follow(args, started["run_id"])


def _meta_body(args: argparse.Namespace) -> dict[str, Any]:
    """--name/--tag/--note as start-body fields, checked here (exit 1 naming the flag)."""
    from agentcanvas.eval.run_meta import meta_from_flags

    meta = meta_from_flags(args.name, args.tags, args.note)
    return meta.model_dump(exclude_defaults=True)


def _follow(args: argparse.Namespace, run_id: str) -> int:
    last = None
    while True:
        summary = _call(args, "GET", f"/api/eval/v2/status/{run_id}", params={"compact": True})
        line = (
            f"{run_id}: {summary['status']} {summary.get('episodes_done', 0)}/"
            f"{summary.get('episodes_total', 0)}"
        )
        if line != last:
            print(line, file=sys.stderr, flush=True)
            last = line
        if summary["status"] in ("completed", "failed", "cancelled", "aborted"):
            print_json({k: v for k, v in summary.items() if k != "episodes"}, indent=1)
            verdict = (summary.get("health") or {}).get("verdict", "unknown")
            return exit_codes.for_run(summary["status"], verdict)
        time.sleep(FOLLOW_POLL_S)


@command("runs")
def cmd_runs(args: argparse.Namespace) -> int:
    listing = _call(args, "GET", "/api/eval/v2/runs", params={"limit": args.limit})
    if args.json:
        print_json(listing, indent=1)
        return 0
    for run in listing["runs"]:
        sr = run.get("success_rate")
        health = run.get("health") or {}
        print(
            f"{run['run_id']}  {run['status']:<10} {run['graph_name']:<20} "
            f"{run.get('episodes_done', 0)}/{run.get('episodes_total', 0)}  "
            f"SR {'-' if sr is None else f'{sr:.3f}'}  "
            f"health {health.get('verdict', '-')} ({health.get('error_count', '-')} errors)"
        )
    return 0


@command("status")
def cmd_status(args: argparse.Namespace) -> int:
    params = {"compact": not args.full}  # the per-episode records only when asked for
    summary = _call(args, "GET", f"/api/eval/v2/status/{args.run_id}", params=params)
    shown = summary if args.full else {k: v for k, v in summary.items() if k != "episodes"}
    print_json(shown, indent=1)
    return 0


@command("cancel")
def cmd_cancel(args: argparse.Namespace) -> int:
    print_json(_call(args, "POST", f"/api/eval/v2/cancel/{args.run_id}"), indent=None)
    return 0


@command("resume")
def cmd_resume(args: argparse.Namespace) -> int:
    print_json(_call(args, "POST", f"/api/eval/v2/resume/{args.run_id}"), indent=None)
    return _follow(args, args.run_id) if args.follow else 0


def extend_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the backend (API, WebSocket, web page)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument(
        "--token",
        help="required when binding off loopback (or AGENTCANVAS_TOKEN): at least 12 "
        "printable ASCII characters without spaces",
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
    url_help = f"backend URL (default {DEFAULT_URL})"
    p = sub.add_parser(
        "submit",
        help="queue a run on the backend",
        epilog=exit_codes.EPILOG + "\n  (without --follow: 0 once the run is queued)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("graph")
    p.add_argument("-n", "--episodes", type=int, default=10)
    p.add_argument("-w", "--workers", type=int, default=1)
    p.add_argument("--tasks")
    p.add_argument("--start-index", type=int, default=0)
    p.add_argument("--step-budget", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--priority", type=int, default=0)
    p.add_argument("--max-errors", metavar="N|FRACTION", help="error budget (see eval --help)")
    p.add_argument("--episode-timeout", type=float, help="wall-clock limit per episode, s")
    p.add_argument("--follow", action="store_true", help="follow progress until the run ends")
    p.add_argument("--save-frames", action="store_true", help="save frames (= --frames every)")
    p.add_argument("--frames", choices=["every", "failures", "none"], help=FRAMES_HELP)
    p.add_argument(
        "--certify", action="store_true", help="audit every batched row (see eval --help)"
    )
    p.add_argument(
        "--binary-interval",
        choices=("wilson", "clopper-pearson"),
        help="interval of 0/1 metrics (default wilson)",
    )
    p.add_argument("--until-halfwidth", type=float, metavar="H", help="stop rule (eval --help)")
    p.add_argument("--until-decided-vs", metavar="RUN", help="stop rule (see eval --help)")
    p.add_argument("--stop-alpha", type=float, default=STOP_ALPHA_DEFAULT)
    p.add_argument("--url", default=DEFAULT_URL, help=url_help)
    add_meta_arguments(p)
    p = sub.add_parser("runs", help="list runs on the backend")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.add_argument("--url", default=DEFAULT_URL, help=url_help)
    for name in ("status", "cancel", "resume"):
        p = sub.add_parser(name, help=f"{name} a run")
        p.add_argument("run_id")
        p.add_argument("--url", default=DEFAULT_URL, help=url_help)
        if name == "status":
            p.add_argument("--full", action="store_true", help="include per-episode records")
        if name == "resume":
            p.add_argument("--follow", action="store_true")
