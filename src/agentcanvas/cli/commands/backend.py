"""The backend's client commands: ``submit``, ``runs``, ``status``, ``cancel``, ``resume``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import httpx

from agentcanvas import exit_codes
from agentcanvas.cli.command import Command
from agentcanvas.cli.common import print_json
from agentcanvas.cli.options import add_json, add_meta, add_url, meta_of, url_of
from agentcanvas.cli.run_options import add_run_options, build_config, given_options
from agentcanvas.errors import UserInputError

__all__ = ["CANCEL", "RESUME", "RUNS", "STATUS", "SUBMIT"]

FOLLOW_POLL_S = 1.0


def _client(args: argparse.Namespace) -> httpx.Client:
    token = os.environ.get("AGENTCANVAS_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url_of(args), timeout=30.0, headers=headers)


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    try:
        with _client(args) as client:
            response = client.request(method, path, **kwargs)
    except httpx.TransportError as exc:
        raise UserInputError(
            f"--url {url_of(args)}: no backend answers ({type(exc).__name__}); "
            "start one with `agentcanvas serve`"
        ) from exc
    if response.status_code >= 400:
        detail = response.json().get("detail", response.text) if response.content else ""
        raise UserInputError(f"backend answered {response.status_code}: {detail}")
    return response.json()


def start_body(args: argparse.Namespace) -> dict[str, Any]:
    """The body of ``POST /api/eval/v2/start``: the run options given (checked here by
    EvalConfig, so a bad one exits 1 naming its flag before any request), the priority and
    the run's meta. Options not given are left to the backend's defaults (EvalConfig's)."""
    meta = _meta_body(args)
    config = build_config(args, args.graph)
    given = set(given_options(args))
    body: dict[str, Any] = {"graph_name": args.graph}
    body.update(config.model_dump(mode="json", include=given))
    body["priority"] = args.priority
    body.update(meta)
    return body


def cmd_submit(args: argparse.Namespace) -> int:
    started = _call(args, "POST", "/api/eval/v2/start", json=start_body(args))
    print_json(started, indent=None)
    if not args.follow:
        return 0
    return _follow(args, started["run_id"])


def _meta_body(args: argparse.Namespace) -> dict[str, Any]:
    """--name/--tag/--note as start-body fields, checked here (exit 1 naming the flag)."""
    return meta_of(args).model_dump(exclude_defaults=True)


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


def cmd_status(args: argparse.Namespace) -> int:
    params = {"compact": not args.full}  # the per-episode records only when asked for
    summary = _call(args, "GET", f"/api/eval/v2/status/{args.run_id}", params=params)
    shown = summary if args.full else {k: v for k, v in summary.items() if k != "episodes"}
    print_json(shown, indent=1)
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    print_json(_call(args, "POST", f"/api/eval/v2/cancel/{args.run_id}"), indent=None)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    print_json(_call(args, "POST", f"/api/eval/v2/resume/{args.run_id}"), indent=None)
    return _follow(args, args.run_id) if args.follow else 0


def _submit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", metavar="GRAPH", help="graph name (as the backend knows it)")
    p.add_argument(
        "--priority",
        type=int,
        default=0,
        help="queue priority, -100 to 100: higher runs first, FIFO within one (default: 0)",
    )
    p.add_argument("--follow", action="store_true", help="follow the run's progress until it ends")
    add_url(p)
    add_meta(p)
    add_run_options(p)


def _runs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=50)
    add_json(p, "the listing")
    add_url(p)


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN")
    add_url(p)


def _status_arguments(p: argparse.ArgumentParser) -> None:
    _run_arguments(p)
    p.add_argument("--full", action="store_true", help="include per-episode records")


def _resume_arguments(p: argparse.ArgumentParser) -> None:
    _run_arguments(p)
    p.add_argument("--follow", action="store_true")


SUBMIT = Command(
    "submit",
    "queue a run on the backend",
    cmd_submit,
    _submit_arguments,
    exit_codes="submit --follow",
)
RUNS = Command("runs", "list runs on the backend", cmd_runs, _runs_arguments)
STATUS = Command("status", "show a run's status", cmd_status, _status_arguments)
CANCEL = Command("cancel", "cancel a queued or running run", cmd_cancel, _run_arguments)
RESUME = Command(
    "resume",
    "run a stopped run's missing episodes",
    cmd_resume,
    _resume_arguments,
    exit_codes="resume --follow",
)
