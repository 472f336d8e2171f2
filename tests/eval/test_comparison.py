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


def test_the_reported_case_oracle_against_a_noisy_policy() -> None:
    """60 pairs, 26 flips all one way: the estimate is inside Newcombe's interval, not on its
    edge as the exact conditional interval had it ([−43.3, −31.9] pp)."""
    result = paired_difference(PairedCounts(both=34, a_only=26, b_only=0, neither=0))
    assert result["delta"] == pytest.approx(-26 / 60)
    assert (result["delta_lo"], result["delta_hi"]) == (
        pytest.approx(-0.559, abs=5e-4), pytest.approx(-0.301, abs=5e-4),
    )  # fmt: skip
    assert result["delta_lo"] < result["delta"] < result["delta_hi"]
    assert result["p_value"] < 1e-6


def test_an_interval_also_when_every_pair_agrees() -> None:
    result = paired_difference(PairedCounts(both=60))
    assert result["delta"] == 0.0
    assert (result["delta_lo"], result["delta_hi"]) == (
        pytest.approx(-0.0602, abs=5e-4), pytest.approx(0.0602, abs=5e-4),
    )  # fmt: skip
    mixed = paired_difference(PairedCounts(both=4, neither=2))
    assert mixed["delta_lo"] < 0 < mixed["delta_hi"] and mixed["p_value"] == 1.0


def test_swapping_the_runs_negates_the_difference_and_its_interval() -> None:
    for counts in [(3, 5, 1, 9), (0, 0, 4, 2), (10, 2, 7, 1)]:
        forward = paired_difference(PairedCounts(*counts))
        both, a_only, b_only, neither = counts
        backward = paired_difference(PairedCounts(both, b_only, a_only, neither))
        assert backward["delta"] == -forward["delta"]
        assert (backward["delta_lo"], backward["delta_hi"]) == (
            -forward["delta_hi"], -forward["delta_lo"],
        )  # fmt: skip


def test_the_reported_case_three_flips_one_way_is_not_significant_either_way() -> None:
    result = paired_difference(PairedCounts(both=2, a_only=0, b_only=3, neither=5))
    assert result["p_value"] == 0.25
    assert result["delta"] == pytest.approx(0.3)
    assert result["delta_lo"] < 0 < result["delta_hi"]  # the interval agrees with the test


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


def test_per_task_p_values_are_holm_adjusted_and_the_overall_is_also_stratified() -> None:
    # t1: B better on 8 of 10 pairs; t2: equal (5 of 10 each, same pairs); t3: 1 flip.
    a = [_episode("t1", i, 0) for i in range(10)] + [_episode("t2", i, i % 2) for i in range(10)]
    a += [_episode("t3", i, 1) for i in range(2)]
    b = [_episode("t1", i, int(i < 8)) for i in range(10)]
    b += [_episode("t2", i, i % 2) for i in range(10)] + [
        _episode("t3", 0, 1),
        _episode("t3", 1, 0),
    ]
    result = compare_runs(_summary("A", a), _summary("B", b))
    per_task = result["per_task"]
    raw = [per_task[t]["p_value"] for t in ("t1", "t2", "t3")]
    from statsmodels.stats.multitest import multipletests

    expected = multipletests(raw, method="holm")[1]
    assert [per_task[t]["p_holm"] for t in ("t1", "t2", "t3")] == pytest.approx(list(expected))
    strat = result["overall_stratified"]
    assert strat["tasks"] == 3
    assert strat["delta"] == pytest.approx((0.8 + 0.0 - 0.5) / 3)
    assert strat["delta_lo"] < strat["delta"] < strat["delta_hi"]
    assert result["overall"]["delta"] == pytest.approx((8 - 1) / 22)  # pooled: pair-weighted
    assert "Holm" in result["methods"]["per_task"] and "MOVER" in result["methods"]["stratified"]


def test_errored_pairs_are_counted_and_scored_as_failures_apart() -> None:
    """17 of 50 of B's episodes errored; A is the oracle. The scored pairs alone agree
    (±0 pp, no discordant pair), but the comparison says 17 pairs were not scored and,
    with errors as failures, that B is 34 pp worse."""
    a = [_episode("t", i, 1) for i in range(50)]
    b = [_episode("t", i, 1) for i in range(33)]
    b += [_episode("t", i, None, status="error") for i in range(33, 50)]
    result = compare_runs(_summary("A", a), _summary("B", b))
    assert result["overall"]["n"] == 33 and result["overall"]["delta"] == 0.0
    assert result["errors"] == {"a": 0, "b": 17, "pairs": 17}
    assert result["per_task"]["t"]["errors"] == {"a": 0, "b": 17, "pairs": 17}
    as_failures = result["overall_errors_as_failures"]
    assert as_failures["n"] == 50 and as_failures["delta"] == pytest.approx(-17 / 50)
    assert as_failures["delta_hi"] < 0


def test_runs_with_no_paired_episode_are_refused() -> None:
    from agentcanvas.errors import UserInputError

    a = _summary("A", [_episode("t1", i, 1) for i in range(3)])
    b = _summary("B", [_episode("t2", i, 1) for i in range(3)])
    with pytest.raises(UserInputError, match="no paired episode"):
        compare_runs(a, b)


def test_the_leaderboard_never_ranks_a_run_with_errors_level_with_a_clean_one() -> None:
    clean = _summary("clean", [_episode("t", i, 1) for i in range(50)])
    errors = [_episode("t", i, 1) for i in range(33)]
    errors += [_episode("t", i, None, status="error") for i in range(33, 50)]
    board = leaderboard([_summary("with_errors", errors), clean])
    assert [r["run_id"] for r in board["runs"]] == ["clean", "with_errors"]
    row = board["runs"][1]
    assert row["overall"]["rate"] == 1.0  # over scored episodes: the same as the clean run
    assert (row["errors"], row["clean"], row["overall"]["n_planned"]) == (17, False, 50)
    assert row["overall"]["errors_as_failures"] == pytest.approx(33 / 50)
    assert (row["overall"]["worst"], row["overall"]["best"]) == (pytest.approx(33 / 50), 1.0)
    assert "errors as failures" in board["rank_rule"].replace("_", " ")


def test_the_sequential_verdict_says_decided_or_how_many_more_pairs() -> None:
    from agentcanvas.eval.comparison import PairedCounts, sequential_verdict
    from agentcanvas.eval.paired_sequential import paired_sequential_test

    decided = sequential_verdict(PairedCounts(both=10, a_only=0, b_only=9, neither=1))
    test = paired_sequential_test(9, 0, 0.05)
    assert decided["decided"] and decided["decision"] == "B better"
    assert decided["evidence"] == test.evidence and decided["more_pairs"] is None

    equal = sequential_verdict(PairedCounts(both=5, a_only=2, b_only=2, neither=5))
    assert not equal["decided"] and equal["more_pairs"] is None
    assert "agree" in equal["note"]

    # The same rates with more pairs behind them: fewer more pairs needed, never negative.
    early = sequential_verdict(PairedCounts(both=40, a_only=3, b_only=10, neither=47))
    later = sequential_verdict(PairedCounts(both=80, a_only=6, b_only=20, neither=94))
    assert not early["decided"] and early["more_pairs"] > 0
    assert later["decided"] or 0 <= later["more_pairs"] < early["more_pairs"]


# -- guards: no pairs, different seeds, different graphs ----------------------------------------
def _seeded(run_id: str, seed: int, tasks: tuple[str, ...] = ("t1",)) -> dict[str, Any]:
    episodes = [_episode(t, i, i % 2) for t in tasks for i in range(4)]
    return {**_summary(run_id, episodes), "config": {"seed": seed}}


GRAPH: dict[str, Any] = {
    "name": "g",
    "env": {"nodeset": "env_minigrid", "fields": {"split": "GoTo"}, "tasks": ["t1"]},
    "nodes": [
        {"id": "env", "type": "env_minigrid.step", "config": {}, "scope": "graph"},
        {"id": "nav", "type": "planner.navigate", "config": {"depth": 3}, "scope": "agent"},
    ],
    "edges": [
        {"source": "env.grid", "target": "nav.grid", "next_iteration": False, "initial": None},
        {"source": "nav.action", "target": "env.action", "next_iteration": True, "initial": None},
    ],
}


def test_runs_with_no_paired_episode_are_refused_naming_both() -> None:
    from agentcanvas.errors import UserInputError

    with pytest.raises(UserInputError, match="runs A and B have no paired episode"):
        compare_runs(_seeded("A", 0, ("t1",)), _seeded("B", 0, ("t2",)))


def test_different_seeds_are_a_caveat_in_plain_words() -> None:
    result = compare_runs(_seeded("A", 0), _seeded("B", 7))

    assert result["seeds_differ"] is True
    (caveat,) = result["caveats"]
    assert "different seeds (A: 0, B: 7)" in caveat and "not by scene" in caveat
    same = compare_runs(_seeded("A", 3), _seeded("B", 3))
    assert same["seeds_differ"] is False and same["caveats"] == []


def test_what_differs_in_the_frozen_graph_node_by_node() -> None:
    edited: dict[str, Any] = {
        **GRAPH,
        "env": {**GRAPH["env"], "fields": {"split": "GoToLocal"}},
        "nodes": [
            GRAPH["nodes"][0],
            {**GRAPH["nodes"][1], "config": {"depth": 5, "greedy": True}},
            {"id": "out", "type": "core.graphOut", "config": {}, "scope": "graph"},
        ],
        "edges": [
            {**GRAPH["edges"][1], "initial": 0},
            {"source": "env.metrics", "target": "out.metrics", "next_iteration": False},
        ],
    }

    result = compare_runs(_seeded("A", 0), _seeded("B", 0), (GRAPH, edited))

    diff = result["graph_differences"]
    assert diff["same"] is False and diff["omitted"] == 0
    assert diff["nodes_added"] == [{"node": "out", "type": "core.graphOut"}]
    assert diff["nodes_removed"] == []
    assert diff["nodes_changed"] == [
        {"node": "nav", "field": "config.depth", "a": 3, "b": 5},
        {"node": "nav", "field": "config.greedy", "a": None, "b": True},
    ]
    assert diff["edges_added"] == ["env.metrics → out.metrics"]
    assert diff["edges_removed"] == ["env.grid → nav.grid"]
    assert diff["edges_changed"] == [
        {"edge": "nav.action → env.action", "field": "initial", "a": None, "b": 0}
    ]
    assert diff["graph_changed"] == [{"field": "env.fields.split", "a": "GoTo", "b": "GoToLocal"}]
    assert result["caveats"] == []


def test_the_same_graph_twice_differs_in_nothing() -> None:
    diff = compare_runs(_seeded("A", 0), _seeded("B", 0), (GRAPH, dict(GRAPH)))["graph_differences"]
    assert diff["same"] is True
    assert all(diff[k] == [] for k in diff if k not in ("same", "omitted"))


def test_an_unreadable_graph_is_said_and_nothing_is_diffed() -> None:
    result = compare_runs(_seeded("A", 0), _seeded("B", 0), (GRAPH, None))

    assert result["graph_differences"] is None
    (caveat,) = result["caveats"]
    assert "frozen graph of run B (B) could not be read" in caveat
    assert compare_runs(_seeded("A", 0), _seeded("B", 0))["graph_differences"] is None
