"""``agentcanvas leaderboard RUN…``: N runs ranked, from their folders.

The ranking is :func:`agentcanvas.eval.comparison.leaderboard`'s (the backend's
``GET /api/eval/v2/leaderboard`` answers the same), each run checked pairable by
:func:`agentcanvas.api.runs.comparable`; runs are named by id or name.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from agentcanvas.api.runs import comparable
from agentcanvas.cli.command import Command
from agentcanvas.cli.common import RUN_HELP, print_json, run_id_of, with_records
from agentcanvas.cli.options import add_json
from agentcanvas.errors import UserInputError
from agentcanvas.eval.comparison import LEADERBOARD_MAX_RUNS as MAX_RUNS
from agentcanvas.eval.comparison import leaderboard
from agentcanvas.eval.run_meta import read_meta
from agentcanvas.export import workspace_runs

__all__ = ["LEADERBOARD"]


def cmd_leaderboard(args: argparse.Namespace) -> int:
    ids = list(dict.fromkeys(run_id_of(ref) for ref in args.runs))  # a repeat counts once
    if len(ids) > MAX_RUNS:
        raise UserInputError(f"RUN: give at most {MAX_RUNS} runs, got {len(ids)}")
    board = leaderboard([comparable(with_records(run_id)) for run_id in ids])
    runs = workspace_runs(None)
    for row in board["runs"]:
        row["name"] = read_meta(runs / row["run_id"]).name
    if args.json:
        print_json(board, indent=1)
        return 0
    print(leaderboard_table(board))
    for line in leaderboard_notes(board):
        print(line)
    return 0


def _rate(rate: Mapping[str, Any]) -> str:
    if rate.get("rate") is None:
        return "-"
    return f"{rate['rate']:.3f} [{rate['lo']:.3f}, {rate['hi']:.3f}] of {rate['n']}"


def _as_failures(rate: Mapping[str, Any]) -> str:
    value = rate.get("errors_as_failures")
    return "-" if value is None else f"{value:.3f}"


def leaderboard_table(board: Mapping[str, Any]) -> str:
    """Rank, run, status, errors, overall success (over the common tasks) with its Wilson
    interval and with errors as failures, then success per task: plain text columns."""
    header = ["rank", "run", "name", "graph", "status", "errors", "success [95%] of n"]
    header += ["errors as failures", *board["tasks"]]
    rows = [header]
    for row in board["runs"]:
        overall = row["overall"]
        per_task = [
            _rate(row["per_task"][t]) if t in row["per_task"] else "-" for t in board["tasks"]
        ]
        rows.append(
            [
                str(row["rank"]),
                str(row["run_id"]),
                row.get("name") or "-",
                str(row.get("graph_name") or "-"),
                str(row.get("status") or "-"),
                str(row["errors"]),
                _rate(overall),
                _as_failures(overall),
                *per_task,
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def leaderboard_notes(board: Mapping[str, Any]) -> list[str]:
    """How the table is ranked and computed, and whether the runs share their tasks."""
    notes = [f"ranking: {board['rank_rule']}", f"intervals: {board['methods']['rate']}"]
    if not board["same_task_set"]:
        common = ", ".join(board["common_tasks"]) or "none"
        notes.append(f"the runs do not have the same tasks; overall is over: {common}")
    return notes


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", metavar="RUN", nargs="+", help=f"{RUN_HELP} (1 to {MAX_RUNS})")
    add_json(p, "the leaderboard")


LEADERBOARD = Command(
    "leaderboard",
    "rank runs by success rate, errors counted as failures first",
    cmd_leaderboard,
    _arguments,
    examples=(
        "leaderboard 20261201_050254 20261202_093000 20261203_101500",
        'leaderboard baseline "lr 3e-4" "lr 1e-3" --json',
    ),
)
