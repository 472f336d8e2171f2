"""Tests for agentcanvas.eval.metrics: kinds and intervals, errors beside every rate,
determinism, status filtering, grouping."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from agentcanvas.eval.metrics import (
    EpisodeLike,
    MetricAggregate,
    MetricRules,
    aggregate_by_task,
    aggregate_metrics,
    declared_kinds,
    mcnemar,
    status_counts,
    wilson_interval,
)
from agentcanvas.fileio import atomic_write_json, read_json
from agentcanvas.nodes.manifest import MetricSpec, NodeSetManifest

Value = float | int | bool | None


@dataclass(frozen=True)
class Ep:
    """An honest EpisodeLike: the four fields the aggregates read."""

    index: int
    task: str
    status: str = "completed"
    metrics: Mapping[str, Value] = field(default_factory=dict)


def _as_episode_like(ep: Ep) -> EpisodeLike:
    return ep  # checked by mypy: Ep satisfies the Protocol


def _fingerprint(obj: object) -> str:
    """A bit-exact rendering: floats as hex, so nan == nan and 0.1 != 0.1 + 1e-17."""
    if isinstance(obj, MetricAggregate):
        return _fingerprint(obj.model_dump())
    if isinstance(obj, dict):
        return "{" + ",".join(f"{k!r}:{_fingerprint(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, float):
        return obj.hex()
    return repr(obj)


def _run(n: int = 60) -> list[Ep]:
    """A small synthetic run: three tasks, a few failures, mixed metric kinds."""
    gen = random.Random(7)
    tasks = ["open_door", "go_to_goal", "pick_key"]
    episodes = []
    for i in range(n):
        status = "completed" if i % 10 else ("error" if i % 20 else "timeout")
        success = gen.random() < 0.6
        metrics: dict[str, Value] = {
            "success": success,
            "spl": gen.random() * success,
            "steps": gen.randint(5, 80),
        }
        episodes.append(Ep(i, tasks[i % 3], status, metrics))
    return episodes


# Wilson reference values. Closed forms at the edges: hi(0, n) = z²/(n+z²),
# lo(n, n) = n/(n+z²); k=5 of 10 from the textbook formula. The four (k, n) cases below are
# the worked examples of Newcombe (1998), "Two-sided confidence intervals for the single
# proportion", Stat. Med. 17:857-872, Table I, method 3 (score interval), to 4 decimals.
Z2 = 1.959963984540054**2


@pytest.mark.parametrize(
    ("k", "n", "lo", "hi", "abs_tol"),
    [
        (0, 10, 0.0, Z2 / (10 + Z2), 1e-15),
        (10, 10, 10 / (10 + Z2), 1.0, 1e-15),
        (5, 10, 0.2365931, 0.7634069, 5e-8),
        (81, 263, 0.2553, 0.3662, 5e-5),
        (15, 148, 0.0624, 0.1605, 5e-5),
        (0, 20, 0.0, 0.1611, 5e-5),
        (1, 29, 0.0061, 0.1718, 5e-5),
    ],
)
def test_wilson_interval_matches_reference_values(
    k: int, n: int, lo: float, hi: float, abs_tol: float
) -> None:
    got_lo, got_hi = wilson_interval(k, n)
    assert got_lo == pytest.approx(lo, abs=abs_tol)
    assert got_hi == pytest.approx(hi, abs=abs_tol)


def test_wilson_interval_edges_are_exact_and_bad_input_is_refused() -> None:
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == 1.0
    for k, n in [(0, 0), (-1, 5), (6, 5)]:
        with pytest.raises(ValueError, match="wilson"):
            wilson_interval(k, n)


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (0, 0, 1.0),
        (10, 0, 2 / 2**10),  # 2 * 0.5**10 = 0.001953125
        (0, 10, 2 / 2**10),
        (5, 5, 1.0),
        (3, 7, 2 * (1 + 10 + 45 + 120) / 2**10),  # 0.34375
        (1, 0, 1.0),
    ],
)
def test_mcnemar_exact_p_values(b: int, c: int, p: float) -> None:
    assert mcnemar(b, c) == p


def test_mcnemar_agrees_with_direct_summation_and_the_normal_approximation() -> None:
    for b, c in [(50, 60), (17, 4), (0, 25)]:
        n = b + c
        direct = 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
        assert mcnemar(b, c) == min(1.0, direct)
    # Large counts: chi-square with continuity correction, p = erfc(sqrt(chi2 / 2)).
    chi2 = (abs(5000 - 5200) - 1) ** 2 / 10200
    assert mcnemar(5000, 5200) == pytest.approx(math.erfc(math.sqrt(chi2 / 2)), rel=1e-2)
    assert mcnemar(2000, 2000) == 1.0


def test_mcnemar_refuses_negative_counts() -> None:
    with pytest.raises(ValueError, match="mcnemar"):
        mcnemar(-1, 3)


def test_binary_metrics_get_a_wilson_interval() -> None:
    flags = [True, False, True, True, 1, 0, 1.0, True, False, True]
    episodes = [Ep(i, "t", metrics={"success": flag}) for i, flag in enumerate(flags)]
    agg = aggregate_metrics(episodes)["success"]
    lo, hi = wilson_interval(7, 10)
    assert (agg.mean, agg.n, agg.lo, agg.hi, agg.method, agg.n_missing) == (
        0.7, 10, lo, hi, "wilson", 0,
    )  # fmt: skip
    assert (agg.kind, agg.kind_source, agg.range) == ("binary", "inferred", (0.0, 1.0))
    assert "Wilson" in agg.method_name


def test_clopper_pearson_on_request() -> None:
    from scipy.stats import beta

    episodes = [Ep(i, "t", metrics={"success": i < 7}) for i in range(10)]
    agg = aggregate_metrics(episodes, MetricRules(binary_interval="clopper-pearson"))["success"]
    assert agg.method == "clopper-pearson"
    assert agg.lo == pytest.approx(float(beta.ppf(0.025, 7, 4)), abs=1e-12)
    assert agg.hi == pytest.approx(float(beta.ppf(0.975, 8, 3)), abs=1e-12)


def test_continuous_metrics_get_a_t_interval() -> None:
    from scipy import stats

    episodes = [Ep(i, "t", metrics={"ret": float(i) - 0.5}) for i in range(100)]
    first, second = aggregate_metrics(episodes), aggregate_metrics(episodes)
    agg = first["ret"]
    assert _fingerprint(first) == _fingerprint(second)
    assert (agg.method, agg.kind, agg.kind_source) == ("t", "continuous", "inferred")
    assert (agg.mean, agg.n, agg.n_missing) == (49.0, 100, 0)
    values = np.arange(100.0) - 0.5
    lo, hi = stats.t.interval(0.95, 99, loc=values.mean(), scale=stats.sem(values))
    assert (agg.lo, agg.hi) == (pytest.approx(lo, abs=1e-9), pytest.approx(hi, abs=1e-9))
    # No bounds for an unbounded kind: errors cannot be placed at the bottom of a range.
    assert agg.errors_as_failures is None and agg.worst is None


def test_a_declared_kind_decides_the_interval() -> None:
    """SPL that happens to be all 1.0 is a bounded metric, not a 0/1 one, once declared."""
    episodes = [Ep(i, "t", metrics={"spl": 1.0}) for i in range(10)]
    assert aggregate_metrics(episodes)["spl"].method == "wilson"  # inferred: looks binary
    rules = MetricRules(kinds={"spl": MetricSpec(kind="bounded", lo=0.0, hi=1.0)})
    agg = aggregate_metrics(episodes, rules)["spl"]
    assert (agg.kind, agg.kind_source, agg.method, agg.range) == (
        "bounded", "declared", "betting", (0.0, 1.0),
    )  # fmt: skip
    assert 0.0 < agg.lo < 1.0 and agg.hi == 1.0
    assert "Waudby-Smith" in agg.method_name


def test_values_outside_a_declared_range_get_a_t_interval_and_a_note() -> None:
    episodes = [Ep(i, "t", metrics={"spl": 0.5 + i}) for i in range(5)]
    rules = MetricRules(kinds={"spl": MetricSpec(kind="bounded", lo=0.0, hi=1.0)})
    agg = aggregate_metrics(episodes, rules)["spl"]
    assert agg.method == "t" and agg.note is not None and "outside" in agg.note


def test_metric_spec_refuses_a_bounded_kind_without_a_range() -> None:
    with pytest.raises(ValidationError, match="range"):
        MetricSpec(kind="bounded")
    with pytest.raises(ValidationError, match="only a bounded"):
        MetricSpec(kind="binary", lo=0.0, hi=1.0)


def test_declared_kinds_node_sets_in_order_then_the_graph() -> None:
    first = NodeSetManifest(name="a", metrics={"x": MetricSpec(kind="count")})
    second = NodeSetManifest(name="b", metrics={"x": MetricSpec(kind="continuous")})
    graph = {"y": MetricSpec(kind="binary")}
    kinds = declared_kinds([first, second], graph)
    assert kinds == {"x": MetricSpec(kind="count"), "y": MetricSpec(kind="binary")}
    overridden = declared_kinds([first], {"x": MetricSpec(kind="bounded", lo=0, hi=5)})
    assert overridden["x"].kind == "bounded"


def test_errors_are_counted_beside_every_rate() -> None:
    """17 of 50 planned episodes errored: the rate over scored ones stays 1, but n_planned,
    n_errors, the rate with errors as failures and the worst/best cases say what it covers."""
    episodes = [
        Ep(i, "t", "completed" if i >= 17 else "error", {"success": True} if i >= 17 else {})
        for i in range(50)
    ]
    agg = aggregate_metrics(episodes, MetricRules(planned_by_task={"t": 50}))["success"]
    assert (agg.mean, agg.n, agg.n_planned, agg.n_errors) == (1.0, 33, 50, 17)
    assert agg.errors_as_failures == pytest.approx(33 / 50)
    assert (agg.worst, agg.best) == (pytest.approx(33 / 50), 1.0)


def test_unrun_episodes_widen_the_bounds_but_are_not_errors() -> None:
    episodes = [Ep(i, "t", metrics={"success": i % 2 == 0}) for i in range(6)]
    agg = aggregate_metrics(episodes, MetricRules(planned_by_task={"t": 10}))["success"]
    assert (agg.n, agg.n_planned, agg.n_errors) == (6, 10, 0)
    assert agg.errors_as_failures == 0.5
    assert (agg.worst, agg.best) == (pytest.approx(0.3), pytest.approx(0.7))


def test_a_task_whose_every_episode_errored_is_listed() -> None:
    episodes = [Ep(i, "ok", metrics={"success": True}) for i in range(5)]
    episodes += [Ep(5 + i, "broken", "exception") for i in range(5)]
    planned = MetricRules(planned_by_task={"ok": 5, "broken": 5, "never_ran": 5})
    by_task = aggregate_by_task(episodes, planned)
    assert list(by_task) == ["broken", "never_ran", "ok"]
    broken = by_task["broken"]["success"]
    assert (broken.n, broken.n_planned, broken.n_errors, broken.kind) == (0, 5, 5, "binary")
    assert math.isnan(broken.mean) and broken.method == "none"
    assert (broken.errors_as_failures, broken.worst, broken.best) == (0.0, 0.0, 1.0)
    assert by_task["never_ran"]["success"].n_errors == 0
    assert aggregate_by_task(episodes)["broken"]["success"].n_errors == 5  # without a plan too


def test_bootstrap_is_identical_in_a_fresh_process_with_another_hash_seed() -> None:
    code = (
        "from agentcanvas.eval.metrics import aggregate_metrics\n"
        "from types import SimpleNamespace as N\n"
        "eps = [N(index=i, task='t', status='completed', metrics={'x': (i * 37 % 11) / 3})"
        " for i in range(50)]\n"
        "a = aggregate_metrics(eps)['x']\n"
        "print(a.lo.hex(), a.hi.hex(), a.mean.hex())\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for seed in ("1", "2")
    }
    episodes = [Ep(i, "t", metrics={"x": (i * 37 % 11) / 3}) for i in range(50)]
    here = aggregate_metrics(episodes)["x"]
    assert outputs == {f"{here.lo.hex()} {here.hi.hex()} {here.mean.hex()}\n"}


def test_shuffled_input_gives_bit_identical_output() -> None:
    episodes = _run()
    expected = (
        _fingerprint(aggregate_metrics(episodes)),
        _fingerprint({t: _fingerprint(a) for t, a in aggregate_by_task(episodes).items()}),
        status_counts(episodes),
    )
    gen = random.Random(0)
    for _ in range(10):
        shuffled = episodes[:]
        gen.shuffle(shuffled)
        got = (
            _fingerprint(aggregate_metrics(shuffled)),
            _fingerprint({t: _fingerprint(a) for t, a in aggregate_by_task(shuffled).items()}),
            status_counts(shuffled),
        )
        assert got == expected
    assert list(status_counts(episodes)) == ["completed", "error", "timeout"]


def test_only_completed_episodes_enter_the_aggregates() -> None:
    episodes = [
        Ep(0, "t", "completed", {"success": True}),
        Ep(1, "t", "completed", {"success": False}),
        Ep(2, "t", "error", {"success": False}),
        Ep(3, "t", "timeout", {"success": False}),
        Ep(4, "t", "error", {"success": False}),
    ]
    agg = aggregate_metrics(episodes)["success"]
    assert (agg.mean, agg.n, agg.n_missing) == (0.5, 2, 0)
    assert status_counts(episodes) == {"completed": 2, "error": 2, "timeout": 1}
    assert aggregate_metrics([Ep(0, "t", "error", {"success": True})]) == {}


def test_none_nan_and_absent_values_are_counted_missing() -> None:
    episodes = [
        Ep(0, "t", metrics={"spl": 0.5, "success": True}),
        Ep(1, "t", metrics={"spl": None, "success": True}),
        Ep(2, "t", metrics={"spl": math.nan, "success": False}),
        Ep(3, "t", metrics={"success": True}),
        Ep(4, "t", metrics={"spl": 0.25, "success": None}),
        Ep(5, "t", metrics={"spl": math.inf}),
    ]
    aggs = aggregate_metrics(episodes)
    assert list(aggs) == ["spl", "success"]
    assert (aggs["spl"].n, aggs["spl"].n_missing, aggs["spl"].mean) == (2, 4, 0.375)
    assert aggs["spl"].method == "t"
    assert (aggs["success"].n, aggs["success"].n_missing, aggs["success"].method) == (
        4,
        2,
        "wilson",
    )


def test_degenerate_groups_have_no_interval() -> None:
    aggs = aggregate_metrics(
        [Ep(0, "t", metrics={"all_missing": None, "one_value": 3.5}), Ep(1, "t", "error")]
    )
    none = aggs["all_missing"]
    assert (none.n, none.n_missing, none.method) == (0, 1, "none")
    assert math.isnan(none.mean) and math.isnan(none.lo) and math.isnan(none.hi)
    one = aggs["one_value"]
    assert (one.mean, one.n, one.method) == (3.5, 1, "none")
    assert math.isnan(one.lo) and math.isnan(one.hi)
    assert aggregate_metrics([]) == {} and aggregate_by_task([]) == {}


def test_numpy_scalars_are_numbers() -> None:
    episodes = [
        Ep(0, "t", metrics={"success": np.bool_(True), "steps": np.int64(4)}),  # type: ignore[dict-item]
        Ep(1, "t", metrics={"success": np.bool_(False), "steps": np.float32(6.0)}),  # type: ignore[dict-item]
    ]
    aggs = aggregate_metrics(episodes)
    assert (aggs["success"].method, aggs["success"].mean) == ("wilson", 0.5)
    assert (aggs["steps"].method, aggs["steps"].mean, aggs["steps"].n) == ("t", 5.0, 2)
    assert aggs["steps"].kind == "count"


def test_aggregate_by_task_groups_and_sorts_tasks() -> None:
    episodes = [
        Ep(0, "zeta", metrics={"success": True}),
        Ep(1, "alpha", metrics={"success": False}),
        Ep(2, "zeta", metrics={"success": False}),
        Ep(3, "alpha", metrics={"success": False, "spl": 0.0}),
        Ep(4, "mid", "error", metrics={"success": True}),
    ]
    by_task = aggregate_by_task(episodes)
    assert list(by_task) == ["alpha", "mid", "zeta"]  # "mid" errored: listed, not scored
    assert list(by_task["alpha"]) == ["spl", "success"]
    assert by_task["alpha"]["success"].mean == 0.0
    assert by_task["alpha"]["spl"].n == 1
    assert by_task["zeta"]["success"].mean == 0.5
    assert (by_task["zeta"]["spl"].n, by_task["zeta"]["spl"].n_missing) == (0, 2)
    assert (by_task["mid"]["success"].n, by_task["mid"]["success"].n_errors) == (0, 1)
    assert by_task["zeta"]["success"] == aggregate_metrics(episodes[0:3:2])["success"]


def test_duplicate_episodes_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate episode"):
        aggregate_metrics([Ep(1, "t"), Ep(1, "t")])
    assert aggregate_metrics([Ep(1, "a"), Ep(1, "b")]) == {}  # same index, other task: fine


def test_metric_aggregate_is_frozen_and_survives_a_disk_round_trip(tmp_path: Path) -> None:
    aggs = aggregate_metrics([Ep(0, "t", metrics={"spl": None, "success": True})])
    with pytest.raises(ValidationError):
        aggs["success"].n = 3
    path = tmp_path / "summary.json"
    atomic_write_json(path, {k: v.model_dump(mode="json") for k, v in aggs.items()})
    assert "NaN" not in path.read_text()
    loaded = {k: MetricAggregate.model_validate(v) for k, v in read_json(path).items()}
    assert _fingerprint(loaded["spl"]) == _fingerprint(aggs["spl"])
    assert loaded["success"] == aggs["success"]
    schema = MetricAggregate.model_json_schema()
    assert schema["properties"]["n"]["description"] == "Number of values that entered the mean."


def test_the_record_type_satisfies_the_protocol() -> None:
    assert _as_episode_like(Ep(0, "t")).index == 0


def test_wilson_says_where_its_coverage_falls_short() -> None:
    """Near 0 or 1 at small n Wilson under-covers for some true rates (bench/coverage.py):
    the aggregate says so and names the exact alternative; in the middle it says nothing."""
    edge = aggregate_metrics([Ep(i, "t", metrics={"success": i == 0}) for i in range(20)])
    assert edge["success"].note is not None and "clopper-pearson" in edge["success"].note
    middle = aggregate_metrics([Ep(i, "t", metrics={"success": i % 2 == 0}) for i in range(20)])
    assert middle["success"].note is None
    large = aggregate_metrics([Ep(i, "t", metrics={"success": i == 0}) for i in range(500)])
    assert large["success"].note is None
