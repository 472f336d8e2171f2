"""The leaderboard and the paired compare of real runs, through a real ``agentcanvas serve``.

Three real ``agentcanvas eval babyai_oracle`` runs over the same episodes with different step
budgets (a tight budget fails some episodes) are ranked by ``GET /leaderboard?runs=``; the
numbers are checked against the runs' own records. Bad ``runs`` values are 422s naming
``query.runs``; an unknown run is a 404.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval.intervals import newcombe_paired
from agentcanvas.eval.metrics import wilson_interval
from support.backend import Backend
from support.cli import run_cli

API = "/api/eval/v2"
BUDGETS = (None, 6, 4)  # the graph's own budget, then tighter ones


def _eval(workspace: Path, step_budget: int | None) -> dict[str, Any]:
    budget = [] if step_budget is None else ["--step-budget", str(step_budget)]
    done = run_cli(
        "eval", "babyai_oracle", "-n", "2", "-w", "2", *budget, "--json",
        workspace=workspace, timeout_s=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    workspace = tmp_path_factory.mktemp("leaderboard")
    return workspace, [_eval(workspace, budget) for budget in BUDGETS]


@pytest.fixture(scope="module")
def backend(summaries: tuple[Path, list[dict[str, Any]]]) -> Iterator[Backend]:
    with Backend(summaries[0]) as server:
        yield server


def _success(runs: list[dict[str, Any]], run_id: str, task: str | None = None) -> list[int]:
    summary = next(s for s in runs if s["run_id"] == run_id)
    return [
        int(e["metrics"]["success"])
        for e in summary["episodes"]
        if e["status"] == "completed" and (task is None or e["task"] == task)
    ]


def test_the_leaderboard_ranks_real_runs_by_their_records(
    summaries: tuple[Path, list[dict[str, Any]]], backend: Backend
) -> None:
    runs = summaries[1]
    ids = [s["run_id"] for s in runs]
    response = backend.http.get(f"{API}/leaderboard", params={"runs": ",".join(ids)})
    assert response.status_code == 200, response.text
    board = response.json()
    assert sorted(r["run_id"] for r in board["runs"]) == sorted(ids)
    rates = [r["overall"]["rate"] for r in board["runs"]]
    assert rates == sorted(rates, reverse=True) and rates[0] > rates[-1]
    assert board["same_task_set"] is True and len(board["tasks"]) == 2
    for row in board["runs"]:
        flags = _success(runs, row["run_id"])
        assert (row["overall"]["k"], row["overall"]["n"]) == (sum(flags), len(flags))
        for task in board["tasks"]:
            per = _success(runs, row["run_id"], task)
            cell = row["per_task"][task]
            assert (cell["lo"], cell["hi"]) == pytest.approx(wilson_interval(sum(per), len(per)))
    assert "Wilson" in board["methods"]["rate"]


def test_compare_of_two_of_them_gives_the_overall_paired_difference(
    summaries: tuple[Path, list[dict[str, Any]]], backend: Backend
) -> None:
    best, _, tight = summaries[1]
    response = backend.http.get(
        f"{API}/compare", params={"a": best["run_id"], "b": tight["run_id"]}
    )
    assert response.status_code == 200, response.text
    result = response.json()
    overall = result["overall"]
    a, b = _success(summaries[1], best["run_id"]), _success(summaries[1], tight["run_id"])
    assert overall["n"] == len(a) == len(b)
    assert overall["delta"] == pytest.approx((sum(b) - sum(a)) / len(a))
    assert overall["delta"] < 0  # the tight budget fails episodes the graph's budget solves
    # Newcombe's interval (method 10) on the runs' own 2x2 table of paired outcomes.
    pairs = list(zip(a, b, strict=True))
    table = [
        sum(1 for x, y in pairs if (x, y) == cell) for cell in ((1, 1), (1, 0), (0, 1), (0, 0))
    ]
    assert (overall["delta_lo"], overall["delta_hi"]) == pytest.approx(newcombe_paired(*table))
    assert overall["delta_lo"] < overall["delta"] < overall["delta_hi"]
    assert overall["p_value"] == result["mcnemar"]["p_value"]


def test_a_repeated_run_counts_once(
    summaries: tuple[Path, list[dict[str, Any]]], backend: Backend
) -> None:
    first, second = (s["run_id"] for s in summaries[1][:2])
    once = backend.http.get(f"{API}/leaderboard", params={"runs": f"{first},{second}"})
    twice = backend.http.get(f"{API}/leaderboard", params={"runs": f"{first},{second},{first}"})
    assert once.status_code == twice.status_code == 200, twice.text
    assert twice.json() == once.json()


@pytest.mark.parametrize(
    "runs",
    [
        "20261201_050254",  # one run: the schema asks for 2 to 20
        ",".join(["20261201_050254"] * 21),
        "20261201_050254,../etc",
        "20261201_050254, 20261201_050255",
    ],
)
def test_a_malformed_runs_list_is_a_422_naming_the_field(backend: Backend, runs: str) -> None:
    response = backend.http.get(f"{API}/leaderboard", params={"runs": runs})
    assert response.status_code == 422
    assert response.json()["problems"][0]["field"] == "runs"


def test_an_unknown_run_is_a_404(
    summaries: tuple[Path, list[dict[str, Any]]], backend: Backend
) -> None:
    known = summaries[1][0]["run_id"]
    response = backend.http.get(f"{API}/leaderboard", params={"runs": f"{known},19990101_000000"})
    assert response.status_code == 404
    assert "19990101_000000" in response.json()["detail"]
