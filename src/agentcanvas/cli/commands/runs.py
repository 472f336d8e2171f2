"""Commands that read finished run folders: ``agentcanvas export RUN`` (a run's episodes as
a CSV or parquet file, one row each) and ``agentcanvas plan RUN`` (the paired episodes a
comparison against it needs, :mod:`agentcanvas.eval.planning`).

Runs are read from the workspace's run folders (``AGENTCANVAS_HOME``, else the current
directory), also while they run; no backend is needed. See :mod:`agentcanvas.export`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentcanvas.cli.command import Command
from agentcanvas.cli.common import print_json
from agentcanvas.cli.options import add_json
from agentcanvas.eval.comparison import compare_runs
from agentcanvas.eval.planning import plan_comparison
from agentcanvas.export import FORMATS, _workspace_runs, export_run, read_run


def cmd_export(args: argparse.Namespace) -> int:
    if args.output == "-":
        output = None
    elif args.output:
        output = Path(args.output)
    else:
        output = Path(f"{args.run_id}_episodes.{args.format}")
    written, count = export_run(args.run_id, args.format, output)
    if written is not None:
        print(f"wrote {count} episode row(s) of run {args.run_id} to {written}", file=sys.stderr)
    return 0


def _with_records(run_id: str) -> dict[str, Any]:
    summary, records = read_run(_workspace_runs(None), run_id)
    return {**summary, "episodes": records}


def cmd_plan(args: argparse.Namespace) -> int:
    baseline = _with_records(args.run_id)
    other = _with_records(args.vs) if args.vs else None
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


def cmd_compare(args: argparse.Namespace) -> int:
    result = compare_runs(_with_records(args.a), _with_records(args.b))
    if args.json:
        print_json(result, indent=1)
    else:
        print(compare_text(result))
    return 0


def compare_text(result: dict[str, Any]) -> str:
    """Two runs paired: the overall difference with its interval, McNemar, and whether the
    anytime-valid test has decided (or about how many more pairs would)."""
    overall, test = result["overall"], result["mcnemar"]
    lines = [
        f"compare {result['a']} (A) with {result['b']} (B): {result['paired']} paired episodes"
    ]
    if overall["n"]:
        lines.append(
            f"  B - A: {overall['delta'] * 100:+.1f} pp [{overall['delta_lo'] * 100:+.1f}, "
            f"{overall['delta_hi'] * 100:+.1f}] over {overall['n']} scored pairs "
            f"(Newcombe 1998, method 10); McNemar p = {test['p_value']:.3g} "
            f"({test['b_only']} pairs only B succeeded, {test['a_only']} only A)"
        )
    errors = result["errors"]
    if errors["pairs"]:
        wrong = result["overall_errors_as_failures"]
        lines.append(
            f"  {errors['pairs']} pairs have an errored episode (A {errors['a']}, B "
            f"{errors['b']}); with errors as failures: {wrong['delta'] * 100:+.1f} pp"
        )
    seq = result["sequential"]
    if seq["decided"]:
        lines.append(
            f"  decided: {seq['decision']} (e-value {seq['evidence']:.3g} >= "
            f"{seq['threshold']:.3g} = 1/alpha)"
        )
    else:
        more = seq["more_pairs"]
        lines.append(
            "  not decided yet"
            + (f": about {more} more paired episodes would likely decide it" if more else "")
            + (f" ({seq['note']})" if seq["note"] else "")
        )
    lines.append(f"  decision method: {seq['method']}, alpha {seq['alpha']:g}")
    if result["seeds_differ"]:
        lines.append("  warning: the runs used different seeds; their episodes are not paired")
    return "\n".join(lines)


def _export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN", help="run id (a folder of outputs/eval_runs)")
    p.add_argument("--format", choices=FORMATS, default="csv", help="csv or parquet (default: csv)")
    p.add_argument(
        "--output",
        "-o",
        metavar="PATH",
        help="file to write (default RUN_episodes.FORMAT in the current directory; "
        "'-' writes CSV to stdout)",
    )


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", metavar="RUN", help="the baseline run id")
    p.add_argument(
        "--delta", type=float, required=True, help="difference in success rate to detect"
    )
    p.add_argument("--power", type=float, default=0.8, help="power (default: 0.8)")
    p.add_argument("--alpha", type=float, default=0.05, help="two-sided alpha (default: 0.05)")
    p.add_argument("-w", "--workers", type=int, default=1, help="workers for the ETA (default: 1)")
    p.add_argument(
        "--vs", metavar="RUN2", help="a run of the other policy: its observed discordance"
    )
    add_json(p, "the plan")


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="RUN_A", help="the baseline run id")
    p.add_argument("b", metavar="RUN_B", help="the run compared with it")
    add_json(p, "the comparison")


EXPORT = Command(
    "export",
    "write a run's episodes (one row each) as CSV or parquet",
    cmd_export,
    _export_arguments,
    examples=(
        "export 20261201_050254",
        "export 20261201_050254 --format parquet --output runs/ep.parquet",
        "export 20261201_050254 -o - | head",
    ),
)
PLAN = Command(
    "plan",
    "paired episodes needed to detect a difference against a baseline run",
    cmd_plan,
    _plan_arguments,
    examples=("plan 20261201_050254 --delta 0.05", "plan BASELINE --delta 0.1 --vs OTHER -w 4"),
)
COMPARE = Command(
    "compare",
    "pair two runs' episodes: difference, test, decision",
    cmd_compare,
    _compare_arguments,
    examples=("compare 20261201_050254 20261202_093000", "compare A B --json"),
)
