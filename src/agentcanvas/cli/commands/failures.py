"""``agentcanvas failures RUN``: why a run's episodes failed, grouped by cause, largest first
(:mod:`agentcanvas.eval.triage`, worded by :mod:`agentcanvas.api.failure_report`).

Read from the run's folder in the workspace (also while it runs); ``--json`` prints what
``GET /api/eval/v2/runs/{run_id}/failures`` answers. Exits 0 whatever the run's failures.
"""

from __future__ import annotations

import argparse

from agentcanvas import exit_codes
from agentcanvas.api.failure_report import failure_report
from agentcanvas.cli.command import Command
from agentcanvas.cli.common import RUN_HELP, print_json, run_id_of
from agentcanvas.cli.options import add_json
from agentcanvas.cli.status_text import failures_text
from agentcanvas.export import read_run, workspace_runs

__all__ = ["FAILURES"]


def cmd_failures(args: argparse.Namespace) -> int:
    run_id = run_id_of(args.run)
    _, records = read_run(workspace_runs(None), run_id)
    report = failure_report(run_id, records)
    if args.json:
        print_json(report.model_dump(mode="json"), indent=1)
    else:
        print(failures_text(report.model_dump(mode="json"), verbose=args.verbose))
    return exit_codes.OK


def _failures_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    add_json(p, "the groups (the REST route's answer)")
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="show each group's example traceback in full (as recorded: at most 40 lines)",
    )


FAILURES = Command(
    "failures",
    "why a run's episodes failed, grouped by cause",
    cmd_failures,
    _failures_arguments,
    examples=(
        "failures 20261201_050254",
        'failures "flaky cli" --verbose',
        "failures 20261201_050254 --json",
    ),
    description="A run's episodes that did not succeed, one line per cause (the error with "
    "numbers and ids left out, the node to blame, a timeout, the step budget, the env's "
    "verdict...), largest group first, with their tasks, a few episode indices and an "
    "example message; --verbose adds the example's traceback. Then `agentcanvas retry RUN "
    "--errors` runs the errored ones again.",
)
