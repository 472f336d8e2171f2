"""``agentcanvas compare RUN_A RUN_B``: two runs' episodes paired, from their folders.

The pairing, the difference's interval, McNemar and the anytime-valid decision are
:func:`agentcanvas.eval.comparison.compare_runs`'s; runs are named by id or name.
"""

from __future__ import annotations

import argparse
from typing import Any

from agentcanvas.cli.command import Command
from agentcanvas.cli.common import RUN_HELP, print_json, with_records
from agentcanvas.cli.options import add_json
from agentcanvas.eval.comparison import compare_runs

__all__ = ["COMPARE"]


def cmd_compare(args: argparse.Namespace) -> int:
    result = compare_runs(with_records(args.a, "RUN_A"), with_records(args.b, "RUN_B"))
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


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="RUN_A", help=f"the baseline: {RUN_HELP}")
    p.add_argument("b", metavar="RUN_B", help=f"the run compared with it: {RUN_HELP}")
    add_json(p, "the comparison")


COMPARE = Command(
    "compare",
    "pair two runs' episodes: difference, test, decision",
    cmd_compare,
    _compare_arguments,
    examples=(
        "compare 20261201_050254 20261202_093000",
        'compare baseline "lr 3e-4" --json',
    ),
)
