"""The backend's client commands: ``submit``, ``runs``, ``status``, ``cancel``, ``resume``.

Each talks to ``--url`` (default ``$AGENTCANVAS_URL``, else http://127.0.0.1:8765).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import uuid
from typing import Any

import httpx

from agentcanvas import exit_codes
from agentcanvas.cli.backend_client import RETRY_WAITS_S, Backend
from agentcanvas.cli.command import Command
from agentcanvas.cli.common import print_json
from agentcanvas.cli.options import add_json, add_meta, add_url, meta_of, url_of
from agentcanvas.cli.run_options import add_run_options, build_config, given_options
from agentcanvas.cli.status_text import failures_text, status_text
from agentcanvas.errors import ConfigError, UserInputError
from agentcanvas.eval.run_state import TERMINAL_RUN_STATUSES

__all__ = ["CANCEL", "RESUME", "RUNS", "STATUS", "SUBMIT"]

FOLLOW_POLL_S = 1.0
START = "/api/eval/v2/start"
RUN_HELP = "the run's id, or its name when one run has it (quote a name with spaces)"


def backend(args: argparse.Namespace) -> Backend:
    return Backend(url_of(args))


def start_body(args: argparse.Namespace) -> dict[str, Any]:
    """The body of ``POST /api/eval/v2/start``: the run options given (checked here by
    EvalConfig, so a bad one exits 1 naming its flag before any request), the priority and
    the run's meta. Options not given are left to the backend's defaults (EvalConfig's)."""
    meta = meta_of(args).model_dump(exclude_defaults=True)
    config = build_config(args, args.graph)
    given = set(given_options(args))
    body: dict[str, Any] = {"graph_name": args.graph}
    body.update(config.model_dump(mode="json", include=given))
    body["priority"] = args.priority
    body.update(meta)
    return body


IDEMPOTENCY_KEY = re.compile(r"^[!-~]{1,255}$")  # visible ASCII, no spaces


def idempotency_key(text: str) -> str:
    """``--idempotency-key``: 1 to 255 visible ASCII characters (no spaces)."""
    if not IDEMPOTENCY_KEY.match(text):
        raise ConfigError(
            f"--idempotency-key {text!r}: give 1 to 255 visible ASCII characters, no spaces"
        )
    return text


def cmd_submit(args: argparse.Namespace) -> int:
    body = start_body(args)  # refused here, naming the flag, before any request
    started = post_start(args, body)
    print_json(started, indent=None)
    if not args.follow:
        return exit_codes.OK
    return follow(backend(args), started["run_id"])


def post_start(
    args: argparse.Namespace, body: dict[str, Any], route: str = START
) -> dict[str, Any]:
    """``POST`` of ``body`` to a route that starts a run (``/api/eval/v2/start`` or
    ``/retry/{id}``) at ``--url``, sent again when it gets no answer, with
    ``--idempotency-key`` (else a fresh UUID): the backend's answer."""
    key = args.idempotency_key or str(uuid.uuid4())
    try:
        started = backend(args).call(
            "POST", route, json=body, headers={"Idempotency-Key": key}, retry_waits_s=RETRY_WAITS_S
        )
    except UserInputError as exc:
        if not isinstance(exc.__cause__, httpx.TransportError):
            raise
        raise UserInputError(
            f"{exc}. If a backend did queue the run, submitting again with "
            f"--idempotency-key {key} answers that run instead of queueing a second one"
        ) from exc
    answer: dict[str, Any] = started
    return answer


def follow(client: Backend, run_id: str) -> int:
    """Print the run's progress on stderr until it ends, then its summary (JSON, stdout,
    without the records); the exit code of its status and health."""
    last = None
    while True:
        summary = client.call("GET", f"/api/eval/v2/status/{run_id}", params={"compact": True})
        line = (
            f"{run_id}: {summary['status']} {summary.get('episodes_done', 0)}/"
            f"{summary.get('episodes_total', 0)}"
        )
        if line != last:
            print(line, file=sys.stderr, flush=True)
            last = line
        if summary["status"] in TERMINAL_RUN_STATUSES:
            print(status_text(summary), file=sys.stderr)
            print_json({k: v for k, v in summary.items() if k != "episodes"}, indent=1)
            verdict = (summary.get("health") or {}).get("verdict", "unknown")
            return exit_codes.for_run(summary["status"], verdict)
        time.sleep(FOLLOW_POLL_S)


def cmd_runs(args: argparse.Namespace) -> int:
    listing = backend(args).call("GET", "/api/eval/v2/runs", params={"limit": args.limit})
    if args.json:
        print_json(listing, indent=1)
        return exit_codes.OK
    for run in listing["runs"]:
        print(run_line(run))
    return exit_codes.OK


def run_line(run: dict[str, Any]) -> str:
    """One run of the listing: id, status, graph, progress, success, health, name, tags."""
    sr = run.get("success_rate")
    health = run.get("health") or {}
    line = (
        f"{run['run_id']}  {run['status']:<10} {run.get('graph_name') or '-':<20} "
        f"{run.get('episodes_done', 0)}/{run.get('episodes_total', 0)}  "
        f"SR {'-' if sr is None else f'{sr:.3f}'}  "
        f"health {health.get('verdict', '-')} ({health.get('error_count', '-')} errors)"
    )
    if run.get("name"):
        line += f"  {json.dumps(run['name'], ensure_ascii=False)}"
    if run.get("tags"):
        line += "  tags " + ",".join(run["tags"])
    return line


def cmd_status(args: argparse.Namespace) -> int:
    client = backend(args)
    run_id, name = client.find_run(args.run)
    params = {"compact": not args.full}  # the per-episode records only when asked for
    summary = client.call("GET", f"/api/eval/v2/status/{run_id}", params=params)
    if not args.json:
        print(status_text(summary, name))
        report = failures_of(client, run_id, summary)
        if report is not None:
            print(failures_text(report))
        return exit_codes.OK
    shown = summary if args.full else {k: v for k, v in summary.items() if k != "episodes"}
    print_json(shown, indent=1)
    return exit_codes.OK


def failures_of(client: Backend, run_id: str, summary: dict[str, Any]) -> dict[str, Any] | None:
    """The run's failures by cause (``GET …/failures``) when its summary shows an error or a
    success rate below 1; None otherwise, or from a backend without the route."""
    errors = (summary.get("health") or {}).get("error_count") or 0
    success = ((summary.get("aggregate_metrics") or {}).get("success") or {}).get("mean")
    if not errors and (success is None or success >= 1):
        return None
    try:
        report: dict[str, Any] = client.call("GET", f"/api/eval/v2/runs/{run_id}/failures")
    except UserInputError:  # an older backend: the status alone
        return None
    return report


def cmd_cancel(args: argparse.Namespace) -> int:
    client = backend(args)
    run_id, _ = client.find_run(args.run)
    print_json(client.call("POST", f"/api/eval/v2/cancel/{run_id}"), indent=None)
    return exit_codes.OK


def cmd_resume(args: argparse.Namespace) -> int:
    client = backend(args)
    run_id, _ = client.find_run(args.run)
    print_json(client.call("POST", f"/api/eval/v2/resume/{run_id}"), indent=None)
    return follow(client, run_id) if args.follow else exit_codes.OK


def _follow_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--follow",
        action="store_true",
        help="follow the run's progress until it ends; exit with its code (table below)",
    )


def add_idempotency_key(p: argparse.ArgumentParser) -> None:
    """``--idempotency-key``: what makes a start safe to send again."""
    p.add_argument(
        "--idempotency-key",
        type=idempotency_key,
        metavar="KEY",
        help="sent as the Idempotency-Key header, the same on every retry of this submit: "
        "a backend that already queued a run with KEY answers with that run (default: a "
        "fresh UUID per invocation)",
    )


def _submit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", metavar="GRAPH", help="graph name (as the backend knows it)")
    p.add_argument(
        "--priority",
        type=int,
        default=0,
        help="queue priority, -100 to 100: higher runs first, FIFO within one (default: 0)",
    )
    _follow_flag(p)
    add_idempotency_key(p)
    add_url(p)
    add_meta(p)
    add_run_options(p)


def _runs_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--limit", type=int, default=50, help="at most this many runs, newest first (default: 50)"
    )
    add_json(p, "the listing")
    add_url(p)


def _run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    add_url(p)


def _status_arguments(p: argparse.ArgumentParser) -> None:
    _run_arguments(p)
    add_json(p, "the run's summary")
    p.add_argument(
        "--full", action="store_true", help="with --json: include the per-episode records"
    )


def _resume_arguments(p: argparse.ArgumentParser) -> None:
    _run_arguments(p)
    _follow_flag(p)


SUBMIT = Command(
    "submit",
    "queue a run on the backend",
    cmd_submit,
    _submit_arguments,
    examples=(
        "submit babyai_oracle -n 20 -w 4 --follow",
        'submit my_graph -n 100 --name "lr 3e-4" --tag sweep --priority 10',
        "submit my_graph --per-step-timeout 2 --max-errors 0.1 --url http://gpu-box:8765",
        "submit my_graph -n 50 --idempotency-key nightly-2026-01-01   # safe to run twice",
    ),
    exit_codes="submit --follow",
    description="Queue a run on the backend (it starts when admitted). Prints "
    '{"run_id", "status", "via_subprocess"}; without --follow, exits 0 once queued. A '
    "start that gets no answer (no connection, a timeout, a dropped connection) is sent again, "
    "up to 3 more times, with the same Idempotency-Key.",
)
RUNS = Command(
    "runs",
    "list the backend's runs, newest first",
    cmd_runs,
    _runs_arguments,
    examples=("runs", "runs --limit 10 --json"),
)
STATUS = Command(
    "status",
    "show a run's status, health, progress and success rate",
    cmd_status,
    _status_arguments,
    examples=(
        "status 20261201_050254",
        'status "flaky cli"',
        "status 20261201_050254 --json --full",
    ),
)
CANCEL = Command(
    "cancel",
    "cancel a queued or running run",
    cmd_cancel,
    _run_arguments,
    examples=("cancel 20261201_050254", 'cancel "lr 3e-4"'),
)
RESUME = Command(
    "resume",
    "run only the missing episodes of a stopped run, into its folder",
    cmd_resume,
    _resume_arguments,
    examples=("resume 20261201_050254 --follow", 'resume "flaky cli"'),
    exit_codes="resume --follow",
)
