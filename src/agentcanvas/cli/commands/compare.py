"""``agentcanvas compare RUN_A RUN_B``: two runs' episodes paired, from their folders, and
its CI gate ``--fail-on-regression``.

The pairing, the difference's interval, McNemar and the anytime-valid decision are
:func:`agentcanvas.eval.comparison.compare_runs`'s, given the two run folders as the compare
route and page give them (:func:`agentcanvas.api.runs.compare_runs`), so the answer has the
same ``caveats`` and ``graph_differences``; runs are named by id or name.

The gate's rule (:func:`regression`): B regresses from A when the exact two-sided McNemar
test on the paired episodes, errored episodes counted as failures (the comparison's
``overall_errors_as_failures``; with no errored episode, the same as the test on the scored
pairs), has p < alpha and B succeeded less often than A on those pairs. Then ``compare``
exits with ``exit_codes.REGRESSION``.
"""

from __future__ import annotations

import argparse
from typing import Any

from agentcanvas import exit_codes, jsontext
from agentcanvas.api.runs import compare_runs
from agentcanvas.cli.command import Command
from agentcanvas.cli.common import RUN_HELP, print_json, run_id_of
from agentcanvas.cli.options import add_json
from agentcanvas.eval.store import RunDir
from agentcanvas.export import read_run, workspace_runs

__all__ = ["COMPARE"]


REGRESSION_TEST = (
    "exact two-sided McNemar test on the paired episodes, errored episodes counted as "
    "failures: a regression when p < alpha and B's success rate is below A's"
)


def regression(result: dict[str, Any], alpha: float) -> dict[str, Any]:
    """The gate's verdict on a comparison (:data:`REGRESSION_TEST`)."""
    pairs = result["overall_errors_as_failures"]
    p_value = pairs.get("p_value")
    worse = bool(pairs["n"]) and pairs["b_only"] < pairs["a_only"]
    return {
        "regression": worse and p_value is not None and p_value < alpha,
        "b_worse": worse,
        "p_value": p_value,
        "alpha": alpha,
        "pairs": pairs["n"],
        "a_only": pairs.get("a_only", 0),
        "b_only": pairs.get("b_only", 0),
        "test": REGRESSION_TEST,
    }


def _side(ref: str, field: str) -> tuple[dict[str, Any], RunDir]:
    """The summary (with its records) and the folder of the run ``ref`` names."""
    runs = workspace_runs(None)
    run_id = run_id_of(ref, field)
    summary, records = read_run(runs, run_id)
    return {**summary, "episodes": records}, RunDir(runs / run_id)


def cmd_compare(args: argparse.Namespace) -> int:
    (a, folder_a), (b, folder_b) = _side(args.a, "RUN_A"), _side(args.b, "RUN_B")
    result = compare_runs(a, b, folder_a, folder_b)  # the compare route's answer
    gate = regression(result, args.alpha) if args.fail_on_regression else None
    if args.json:
        print_json({**result, "gate": gate} if gate else result, indent=1)
    else:
        print(compare_text(result) + ("\n" + gate_text(gate) if gate else ""))
    return exit_codes.REGRESSION if gate and gate["regression"] else exit_codes.OK


def gate_text(gate: dict[str, Any]) -> str:
    """The gate's verdict in one line, with its evidence."""
    verdict = "REGRESSION" if gate["regression"] else "no regression"
    p_value = "-" if gate["p_value"] is None else f"{gate['p_value']:.3g}"
    return (
        f"  gate: {verdict}: McNemar p = {p_value} (alpha {gate['alpha']:g}) on "
        f"{gate['pairs']} pairs, errors as failures ({gate['b_only']} only B succeeded, "
        f"{gate['a_only']} only A)"
    )


def _alpha(text: str) -> float:
    value = float(text)
    if not 0.0 < value < 1.0:
        raise ValueError(text)
    return value


_alpha.__name__ = "alpha (0 < alpha < 1)"


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
    lines += graph_lines(result.get("graph_differences"))
    lines += [f"  caveat: {caveat}" for caveat in result.get("caveats", [])]
    return "\n".join(lines)


def _ab(change: dict[str, Any]) -> str:
    return f"{jsontext.dumps(change.get('a'))} -> {jsontext.dumps(change.get('b'))}"


def graph_lines(diff: dict[str, Any] | None) -> list[str]:
    """What differs between the runs' frozen graphs, one line each: node or edge, field,
    A's value -> B's (none when the graphs are the same or one could not be read)."""
    if not diff or diff.get("same"):
        return []
    changes = [
        *(f"node {n['node']}: added ({n['type']})" for n in diff["nodes_added"]),
        *(f"node {n['node']}: removed ({n['type']})" for n in diff["nodes_removed"]),
        *(f"node {c['node']}, {c['field']}: {_ab(c)}" for c in diff["nodes_changed"]),
        *(f"edge {e}: added" for e in diff["edges_added"]),
        *(f"edge {e}: removed" for e in diff["edges_removed"]),
        *(f"edge {c['edge']}, {c['field']}: {_ab(c)}" for c in diff["edges_changed"]),
        *(f"graph {c['field']}: {_ab(c)}" for c in diff["graph_changed"]),
    ]
    omitted = diff.get("omitted") or 0
    tail = [f"    … {omitted} more change(s) (--json lists them)"] if omitted else []
    return ["  the graphs differ (A -> B):", *(f"    {c}" for c in changes), *tail]


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="RUN_A", help=f"the baseline: {RUN_HELP}")
    p.add_argument("b", metavar="RUN_B", help=f"the run compared with it: {RUN_HELP}")
    add_json(p, "the comparison (with --fail-on-regression: and the gate's verdict)")
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        help=f"exit {exit_codes.REGRESSION} when B regresses from A: the {REGRESSION_TEST}",
    )
    p.add_argument(
        "--alpha",
        type=_alpha,
        default=0.05,
        help="the gate's significance level (default: 0.05)",
    )


COMPARE = Command(
    "compare",
    "pair two runs' episodes: difference, test, decision",
    cmd_compare,
    _compare_arguments,
    examples=(
        "compare 20261201_050254 20261202_093000",
        'compare baseline "lr 3e-4" --json',
        "compare BASELINE CANDIDATE --fail-on-regression --alpha 0.01   # in CI",
    ),
    exit_codes="compare",
)
