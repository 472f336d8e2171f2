"""Paired comparison and leaderboard maths (eval/comparison.py), on made-up records."""

from __future__ import annotations

from typing import Any

import pytest

from agentcanvas.eval.comparison import (
    PairedCounts,
    compare_runs,
    leaderboard,
    paired_difference,
)
from agentcanvas.eval.metrics import wilson_interval


def _episode(task: str, i: int, success: int | None, status: str = "completed") -> dict[str, Any]:
    metrics = {} if success is None else {"success": success}
    return {"index": i, "task": task, "episode_index": i, "status": status, "metrics": metrics}


def _summary(run_id: str, episodes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"run_id": run_id, "graph_name": "g", "status": "completed", "config": {},
            "episodes": episodes}  # fmt: skip


@pytest.mark.parametrize("n_extra", [0, 7, 40])
def test_the_interval_excludes_zero_exactly_when_mcnemar_rejects(n_extra: int) -> None:
    for a_only in range(0, 16):
        for b_only in range(0, 16):
            if a_only + b_only == 0:
                continue
            result = paired_difference(PairedCounts(n_extra, a_only, b_only, 3))
            excludes = result["delta_lo"] > 0 or result["delta_hi"] < 0
            assert excludes == (result["p_value"] < 0.05), (a_only, b_only, result)
            assert result["delta_lo"] <= result["delta"] <= result["delta_hi"]


def test_the_reported_case_three_flips_one_way_is_not_significant_either_way() -> None:
    result = paired_difference(PairedCounts(both=2, a_only=0, b_only=3, neither=5))
    assert result["p_value"] == 0.25
    assert result["delta"] == pytest.approx(0.3)
    assert result["delta_lo"] < 0 < result["delta_hi"]  # the interval agrees with the test


def test_no_discordant_pairs_has_no_interval() -> None:
    result = paired_difference(PairedCounts(both=4, neither=2))
    assert result["delta"] == 0 and result["delta_lo"] is None and result["delta_hi"] is None


def test_compare_pools_every_task_into_the_overall_line() -> None:
    a = [_episode("t1", i, 1) for i in range(4)] + [_episode("t2", i, i % 2) for i in range(4)]
    b = [_episode("t1", i, 0 if i == 0 else 1) for i in range(4)] + [
        _episode("t2", i, 1) for i in range(3)
    ] + [_episode("t2", 3, None, status="error")]  # fmt: skip
    result = compare_runs(_summary("A", a), _summary("B", b))
    overall = result["overall"]
    assert overall["n"] == 7 and result["paired"] == 8  # the error pair has no verdict
    assert (overall["a_only"], overall["b_only"]) == (1, 2)  # t1 #0 worse; t2 #0, #2 better
    assert overall["delta"] == pytest.approx(1 / 7)
    assert set(result["per_task"]) == {"t1", "t2"}
    assert result["per_task"]["t1"]["delta"] == pytest.approx(-0.25)
    assert "McNemar" in result["methods"]["test"] and "pp" in result["methods"]["units"]


def test_leaderboard_ranks_on_the_common_tasks_with_wilson_intervals() -> None:
    good = _summary("good", [_episode("t1", i, 1) for i in range(5)])
    mixed = _summary("mixed", [_episode("t1", i, i % 2) for i in range(5)])
    extra = [_episode("t1", i, 0) for i in range(5)] + [_episode("t2", i, 1) for i in range(5)]
    wider = _summary("wider", extra)
    board = leaderboard([mixed, wider, good])
    assert [r["run_id"] for r in board["runs"]] == ["good", "mixed", "wider"]
    assert [r["rank"] for r in board["runs"]] == [1, 2, 3]
    assert board["common_tasks"] == ["t1"] and board["tasks"] == ["t1", "t2"]
    assert board["same_task_set"] is False
    wider_row = board["runs"][2]
    assert wider_row["overall"]["rate"] == 0.0  # t2's successes are not in the overall rate
    assert wider_row["per_task"]["t2"]["rate"] == 1.0
    lo, hi = wilson_interval(2, 5)
    mixed_t1 = board["runs"][1]["per_task"]["t1"]
    assert (mixed_t1["k"], mixed_t1["n"], mixed_t1["lo"], mixed_t1["hi"]) == (2, 5, lo, hi)
