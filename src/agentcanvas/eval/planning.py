"""How many episodes a paired comparison needs: ``agentcanvas plan`` and ``GET …/plan``.

From a baseline run (its success rate per task, errors counted as failures) and a difference
to detect, the paired episodes a fixed-n two-sided McNemar test needs at the chosen power
(Connor 1987, "Sample size for testing differences in proportions for the paired-sample
design", Biometrics 43:207, via ``sequential.paired_sample_size``), and the pairs by which the
anytime-valid test of ``--until-decided-vs`` decides with that power (seeded simulation,
``sequential.paired_sequential_expected_n``). The discordance (the share of pairs on which
the two policies disagree) is observed against another run when one is given; else the
outcomes are assumed independent within a pair, which is conservative when two policies
tend to succeed on the same episodes. The ETA scales the baseline's measured episode rate
linearly to the chosen worker count (an assumption: say so, measure with bench/scaling.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from agentcanvas.errors import UserInputError
from agentcanvas.eval.comparison import compare_runs
from agentcanvas.eval.sample_size import paired_sample_size, paired_sequential_expected_n
from agentcanvas.eval.sequential import SEQUENTIAL_METHOD_NAMES

__all__ = ["plan_comparison"]

SIMULATION_REPS: Final = 400
MAX_SIMULATED_PAIRS: Final = 20_000


def _rate(episodes: list[Mapping[str, Any]]) -> float | None:
    """Success with errors as failures (cancelled episodes never ran)."""
    ran = [e for e in episodes if e.get("status") != "cancelled"]
    if not ran:
        return None
    wins = sum(
        1
        for e in ran
        if e.get("status") == "completed"
        and float((e.get("metrics") or {}).get("success", 0)) >= 0.5
    )
    return wins / len(ran)


def _episode_rate(summary: Mapping[str, Any]) -> float | None:
    """Episodes per second of the baseline as it ran, per worker."""
    timings = summary.get("timings") or {}
    start, end = timings.get("started_at"), timings.get("finished_at")
    done = summary.get("episodes_done") or 0
    workers = (summary.get("config") or {}).get("worker_count") or 1
    if not isinstance(start, int | float) or not isinstance(end, int | float) or end <= start:
        return None
    return float(done) / (end - start) / workers


def _one(
    p_a: float | None,
    delta: float,
    power: float,
    alpha: float,
    discordance: float | None,
) -> dict[str, Any]:
    if p_a is None:
        return {"p_a": None, "n": None, "problem": "no episode ran"}
    if delta == 0:
        return {"p_a": p_a, "n": None, "problem": "a difference of 0 cannot be detected"}
    p_b = p_a + delta
    if not 0 < p_a < 1 or not 0 < p_b < 1:
        return {
            "p_a": p_a,
            "n": None,
            "problem": f"a difference of {delta:+.3f} from a rate of {p_a:.3f} leaves (0, 1): "
            "a rate of 0 or 1 has no room to differ that way",
        }
    if discordance is not None and discordance <= abs(delta):
        # observed too small for this difference: the least discordance it can have
        discordance = min(1.0, abs(delta) + 1e-9)
    try:
        plan = paired_sample_size(p_a, delta, power, alpha, discordance)
    except ValueError as exc:  # a discordance the rates cannot have
        return {"p_a": p_a, "n": None, "problem": str(exc)}
    cap = min(4 * plan.n, MAX_SIMULATED_PAIRS)
    sequential = paired_sequential_expected_n(
        p_a, delta, power, alpha, plan.discordance, cap=cap, reps=SIMULATION_REPS, seed=0
    )
    return {
        "p_a": p_a,
        "p_b": p_b,
        "discordance": plan.discordance,
        "assumption": plan.assumption,
        "n": plan.n,
        "sequential_n": sequential.n_at_power,
        "sequential_mean_n": sequential.mean_n,
        "problem": None,
    }


def plan_comparison(
    baseline: Mapping[str, Any],
    delta: float,
    *,
    power: float = 0.8,
    alpha: float = 0.05,
    workers: int = 1,
    other: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Paired episodes per task (and pooled) to detect ``delta`` against ``baseline``."""
    if not -1 < delta < 1:
        raise UserInputError(f"delta: {delta!r} must be a difference in (-1, 1)")
    if not 0 < power < 1:
        raise UserInputError(f"power: {power!r} must be in (0, 1)")
    if not 0 < alpha < 0.5:
        raise UserInputError(f"alpha: {alpha!r} must be in (0, 0.5)")
    if workers < 1:
        raise UserInputError(f"workers: {workers!r} must be >= 1")
    episodes = list(baseline.get("episodes") or [])
    tasks = sorted({str(e.get("task")) for e in episodes})
    if not tasks:
        raise UserInputError(f"run: {baseline.get('run_id')} has no recorded episode to plan from")
    observed: dict[str, float] = {}
    if other is not None:
        compared = compare_runs(baseline, other)
        for task, row in compared["per_task"].items():
            n = row.get("n") or 0
            if n:
                observed[task] = (row.get("a_only", 0) + row.get("b_only", 0)) / n
        pooled = compared["overall_errors_as_failures"]
        if pooled.get("n"):
            observed["*"] = (pooled.get("a_only", 0) + pooled.get("b_only", 0)) / pooled["n"]
    per_task = {
        task: _one(
            _rate([e for e in episodes if e.get("task") == task]),
            delta,
            power,
            alpha,
            observed.get(task),
        )
        for task in tasks
    }
    overall = _one(_rate(episodes), delta, power, alpha, observed.get("*"))
    rate = _episode_rate(baseline)
    total = sum(row["n"] for row in per_task.values() if row["n"] is not None)
    eta = None if rate is None or not total else math.ceil(total / (rate * workers))
    return {
        "run": baseline.get("run_id"),
        "vs": None if other is None else other.get("run_id"),
        "delta": delta,
        "power": power,
        "alpha": alpha,
        "workers": workers,
        "per_task": per_task,
        "overall": overall,
        "episodes_per_task_all_tasks": total,
        "eta_s": eta,
        "episode_rate_per_worker": rate,
        "methods": {
            "n": SEQUENTIAL_METHOD_NAMES["connor"],
            "sequential_n": SEQUENTIAL_METHOD_NAMES["paired-sequential-simulation"],
            "discordance": "observed against run "
            + str(other.get("run_id"))
            + " (errors as failures)"
            if other is not None
            else "assumed: outcomes independent within a pair (no --vs run given)",
            "eta": "the baseline's measured episodes per second per worker, scaled linearly "
            "to the worker count (an assumption; bench/scaling.py measures it)",
        },
    }
