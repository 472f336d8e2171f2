"""Commands that read run folders: ``agentcanvas export RUN`` (a run's episodes as a CSV or
parquet file, one row each) and ``agentcanvas plan RUN`` (the paired episodes a comparison
against it needs, :mod:`agentcanvas.eval.planning`).

Runs are read from the workspace's run folders (``AGENTCANVAS_HOME``, else the current
directory), also while they run; no backend is needed. A run is named by its id or its name
(:mod:`agentcanvas.eval.run_lookup`). See :mod:`agentcanvas.export`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentcanvas.cli.command import Command
from agentcanvas.cli.common import RUN_HELP, print_json, run_id_of, with_records
from agentcanvas.cli.options import add_json
from agentcanvas.eval.planning import plan_comparison
from agentcanvas.export import FORMATS, export_run

__all__ = ["EXPORT", "PLAN"]


def cmd_export(args: argparse.Namespace) -> int:
    run_id = run_id_of(args.run)
    if args.output == "-":
        output = None
    elif args.output:
        output = Path(args.output)
    else:
        output = Path(f"{run_id}_episodes.{args.format}")
    written, count = export_run(run_id, args.format, output)
    if written is not None:
        print(f"wrote {count} episode row(s) of run {run_id} to {written}", file=sys.stderr)
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    baseline = with_records(args.run)
    other = with_records(args.vs, "--vs") if args.vs else None
    plan = plan_comparison(
        baseline, args.delta, power=args.power, alpha=args.alpha, workers=args.workers, other=other
    )
    if args.json:
        print_json(plan, indent=1)
        return 0
    print(plan_text(plan))
    return 0


def plan_text(plan: dict[str, Any]) -> str:
    """The plan as lines: per task and pooled, the fixed-n and anytime-valid episode counts."""
    lines = [
        f"plan: detect {plan['delta']:+.3f} in success against run {plan['run']} "
        f"(power {plan['power']:g}, alpha {plan['alpha']:g}, two-sided)"
    ]
    for name, row in [*plan["per_task"].items(), ("all tasks pooled", plan["overall"])]:
        if row["n"] is None:
            lines.append(f"  {name}: {row['problem']}")
            continue
        seq = row["sequential_n"]
        seq_text = f"{seq}" if seq is not None else "more than the simulated cap"
        lines.append(
            f"  {name}: baseline {row['p_a']:.3f} -> {row['p_b']:.3f}: {row['n']} paired "
            f"episodes (fixed n); {seq_text} with --until-decided-vs "
            f"(discordance {row['discordance']:.3f})"
        )
    eta = plan["eta_s"]
    lines.append(
        f"  all tasks, each at its own n: {plan['episodes_per_task_all_tasks']} episodes"
        + (f", about {eta} s at {plan['workers']} worker(s)" if eta is not None else "")
    )
    for key, method in plan["methods"].items():
        lines.append(f"  {key}: {method}")
    return "\n".join(lines)


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--format", choices=FORMATS, default="csv", help="csv or parquet (default: csv)")
    p.add_argument(
        "--output",
        "-o",
        metavar="PATH",
        help="file to write (default RUN_episodes.FORMAT in the current directory; "
        "'-' writes CSV to stdout)",
    )


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=f"the baseline: {RUN_HELP}")
    p.add_argument(
        "--delta", type=float, required=True, help="difference in success rate to detect"
    )
    p.add_argument("--power", type=float, default=0.8, help="power (default: 0.8)")
    p.add_argument("--alpha", type=float, default=0.05, help="two-sided alpha (default: 0.05)")
    p.add_argument("-w", "--workers", type=int, default=1, help="workers for the ETA (default: 1)")
    p.add_argument(
        "--vs",
        metavar="RUN2",
        help="a run of the other policy (id or name): its observed discordance",
    )
    add_json(p, "the plan")


EXPORT = Command(
    "export",
    "write a run's episodes (one row each) as CSV or parquet",
    cmd_export,
    _export_arguments,
    examples=(
        "export 20261201_050254",
        "export 20261201_050254 --format parquet --output runs/ep.parquet",
        "export 20261201_050254 -o - | head",
        'export "flaky cli" --format parquet',
    ),
)
PLAN = Command(
    "plan",
    "paired episodes needed to detect a difference against a baseline run",
    cmd_plan,
    _plan_arguments,
    examples=("plan 20261201_050254 --delta 0.05", "plan BASELINE --delta 0.1 --vs OTHER -w 4"),
)
