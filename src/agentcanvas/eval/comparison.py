"""Runs compared on the same episodes: a paired view of two runs and a leaderboard of N.

Episodes are paired by ``(task, episode_index)`` (same seed, same initial state). A pair is
*scored* when both episodes completed with a ``success`` value; a pair where either side
errored (``error``, ``exception``, ``timeout``, ``no_verdict``) is not scored, but it is never
dropped silently: the comparison counts it (``errors``) and gives the difference again with
errors counted as failures. Every number names where it comes from (``METHODS``):

- a success rate's interval is the 95 % Wilson score interval;
- the paired test is the exact two-sided McNemar test on the discordant pairs;
- a difference (B − A, in percentage points of success rate) is the mean of the paired
  differences; its 95 % interval is Newcombe's square-and-add score interval for paired
  proportions (Newcombe 1998, method 10): unconditional, given also when every pair agrees;
- per-task p-values are McNemar's, with Holm-adjusted ones beside them (``p_holm``);
- the overall figure is given *pooled* (every scored pair of every task) and *stratified*
  (the mean of the per-task differences, tasks weighted equally; its interval combines the
  per-task Newcombe intervals by MOVER, Zou & Donner 2008).

Episodes are paired by scene only when both runs used the same seed (an episode's seed
derives from the run seed, the task and its index): with different seeds the comparison says
so (``seeds_differ``, and a plain-words line in ``caveats``). Given the runs' frozen graphs it
also says what differs between them (``graph_differences``: nodes, edges and fields, old →
new; :mod:`agentcanvas.eval.graph_diff`).

Pure functions of the summaries; results are sorted by key, so they do not depend on the
order of the records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentcanvas.errors import UserInputError
from agentcanvas.eval import intervals
from agentcanvas.eval.graph_diff import graph_differences
from agentcanvas.eval.health import ERROR_STATUSES
from agentcanvas.eval.metrics import mcnemar
from agentcanvas.eval.paired_sequential import paired_sequential_test
from agentcanvas.eval.sample_size import paired_sample_size, paired_sequential_expected_n
from agentcanvas.eval.sequential import SEQUENTIAL_METHOD_NAMES

__all__ = [
    "LEADERBOARD_MAX_RUNS",
    "METHODS",
    "RANK_RULE",
    "PairedCounts",
    "compare_runs",
    "config_differences",
    "leaderboard",
    "paired_difference",
    "success_of",
]

METHODS: Final = {
    "rate": "Wilson score interval, 95 % (Wilson 1927)",
    "difference": "Newcombe's square-and-add score interval for paired proportions, 95 % "
    "(Newcombe 1998, Stat Med 17:2635, method 10); the exact McNemar test is conservative, so "
    "near p = 0.05 the interval and the test can disagree",
    "test": "exact two-sided McNemar test on the discordant pairs",
    "per_task": "per-task p-values are McNemar's; p_holm adjusts them for the number of tasks "
    "(Holm 1979 step-down)",
    "stratified": "mean of the per-task differences, tasks weighted equally; interval by MOVER "
    "from the per-task Newcombe intervals (Zou & Donner 2008, Stat Med 27:1693)",
    "pooled": "every scored pair of every task, tasks weighted by their pairs",
    "errors": "a pair is scored when both episodes completed; pairs with an errored episode "
    "are counted apart and, in errors_as_failures, scored with each errored episode as a "
    "failure",
    "units": "rates in %, differences in percentage points (pp) of success rate, B − A",
}
RANK_RULE: Final = (
    "ranked by the success rate over the common tasks with errored episodes counted as "
    "failures (errors_as_failures), then by the rate over scored episodes; a run with errors "
    "never ranks level with a clean one on its scored rate alone"
)
Key = tuple[str, int]
_Graphs = tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]
"""The frozen graphs of runs A and B (None: one could not be read)."""


@dataclass(frozen=True)
class PairedCounts:
    """The 2×2 table of paired successes: both, only A, only B, neither."""

    both: int = 0
    a_only: int = 0
    b_only: int = 0
    neither: int = 0

    @property
    def n(self) -> int:
        return self.both + self.a_only + self.b_only + self.neither

    def add(self, a: bool, b: bool) -> PairedCounts:
        return PairedCounts(
            self.both + (a and b),
            self.a_only + (a and not b),
            self.b_only + (b and not a),
            self.neither + (not a and not b),
        )


def success_of(episode: Mapping[str, Any]) -> bool | None:
    """The episode's success (completed episodes only); None when it has no verdict."""
    if episode.get("status") != "completed":
        return None
    value = (episode.get("metrics") or {}).get("success")
    return None if value is None else bool(value)


def _errored(episode: Mapping[str, Any]) -> bool:
    return episode.get("status") in ERROR_STATUSES


def _success_or_failure(episode: Mapping[str, Any]) -> bool | None:
    """Success, with an errored episode counted as a failure; None for a cancelled one."""
    return False if _errored(episode) else success_of(episode)


def paired_difference(counts: PairedCounts) -> dict[str, Any]:
    """Rates of A and B on the pairs, their difference B − A with Newcombe's interval, and
    the McNemar p-value; all rates and differences as fractions."""
    n = counts.n
    if n == 0:
        return {"n": 0, "a": None, "b": None, "delta": None, "delta_lo": None, "delta_hi": None}
    ka, kb = counts.both + counts.a_only, counts.both + counts.b_only
    lo, hi = intervals.newcombe_paired(counts.both, counts.a_only, counts.b_only, counts.neither)
    return {
        "n": n,
        "a": ka / n,
        "b": kb / n,
        "a_interval": intervals.wilson(ka, n),
        "b_interval": intervals.wilson(kb, n),
        "delta": (counts.b_only - counts.a_only) / n,
        "delta_lo": lo,
        "delta_hi": hi,
        "a_only": counts.a_only,
        "b_only": counts.b_only,
        "p_value": mcnemar(counts.a_only, counts.b_only),
    }


def _stratified(per_task: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The mean of the per-task differences (tasks weighted equally), MOVER interval."""
    scored = [d for d in per_task.values() if d["n"]]
    if not scored:
        return {"tasks": 0, "delta": None, "delta_lo": None, "delta_hi": None}
    weight = 1.0 / len(scored)
    lo, hi = intervals.mover_sum(
        [d["delta"] for d in scored],
        [(d["delta_lo"], d["delta_hi"]) for d in scored],
        [weight] * len(scored),
    )
    delta = sum(d["delta"] for d in scored) * weight
    return {"tasks": len(scored), "delta": delta, "delta_lo": lo, "delta_hi": hi}


def _by_key(summary: Mapping[str, Any]) -> dict[Key, Mapping[str, Any]]:
    return {(e["task"], int(e["episode_index"])): e for e in summary.get("episodes", [])}


@dataclass
class _Tables:
    """What the pairing found: scored tables, tables with errors as failures, error counts."""

    scored: dict[str, PairedCounts]
    with_errors: dict[str, PairedCounts]
    errors: dict[str, dict[str, int]]
    flips: list[dict[str, Any]]


def _pair(
    left: Mapping[Key, Mapping[str, Any]], right: Mapping[Key, Mapping[str, Any]], keys: list[Key]
) -> _Tables:
    tables = _Tables({}, {}, {}, [])
    for key in keys:
        task, ea, eb = key[0], left[key], right[key]
        errors = tables.errors.setdefault(task, {"a": 0, "b": 0, "pairs": 0})
        errors["a"] += _errored(ea)
        errors["b"] += _errored(eb)
        errors["pairs"] += _errored(ea) or _errored(eb)
        fa, fb = _success_or_failure(ea), _success_or_failure(eb)
        if fa is not None and fb is not None:
            tables.with_errors[task] = tables.with_errors.get(task, PairedCounts()).add(fa, fb)
        sa, sb = success_of(ea), success_of(eb)
        if sa is None or sb is None:
            continue
        tables.scored[task] = tables.scored.get(task, PairedCounts()).add(sa, sb)
        if sa != sb:
            tables.flips.append(
                {
                    "task": task,
                    "episode_index": key[1],
                    "a": sa,
                    "b": sb,
                    "a_index": ea["index"],
                    "b_index": eb["index"],
                }
            )
    return tables


def _total(tables: Iterable[PairedCounts]) -> PairedCounts:
    total = PairedCounts()
    for t in tables:
        total = PairedCounts(
            total.both + t.both,
            total.a_only + t.a_only,
            total.b_only + t.b_only,
            total.neither + t.neither,
        )
    return total


def compare_runs(
    a: Mapping[str, Any], b: Mapping[str, Any], graphs: _Graphs | None = None
) -> dict[str, Any]:
    """Two runs paired by (task, episode_index): flips, per-task and overall (pooled and
    stratified) paired differences, McNemar, errors, the config fields that differ, what
    differs between their frozen ``graphs`` (when given; None for one that could not be
    read) and ``caveats`` in plain words.

    Two runs with no episode in common cannot be compared: a UserInputError says so."""
    left, right = _by_key(a), _by_key(b)
    paired = sorted(set(left) & set(right))
    if not paired:
        raise UserInputError(
            f"runs {a.get('run_id')} and {b.get('run_id')} have no paired episode: no "
            "(task, episode_index) in common; compare runs of the same tasks and episode "
            "indexes (same -n, --tasks and --start-index)"
        )
    tables = _pair(left, right, paired)
    overall = _total(tables.scored.values())
    tasks = sorted(set(tables.scored) | set(tables.errors))
    per_task = {t: paired_difference(tables.scored.get(t, PairedCounts())) for t in tasks}
    _add_holm(per_task)
    for task in tasks:
        per_task[task]["errors"] = tables.errors.get(task, {"a": 0, "b": 0, "pairs": 0})
    errors = {side: sum(e[side] for e in tables.errors.values()) for side in ("a", "b", "pairs")}
    return {
        "a": a.get("run_id"),
        "b": b.get("run_id"),
        "paired": len(paired),
        "scored_pairs": overall.n,
        "errors": errors,
        "flips": tables.flips,
        "mcnemar": {
            "a_only": overall.a_only,
            "b_only": overall.b_only,
            "p_value": mcnemar(overall.a_only, overall.b_only),
        },
        "overall": paired_difference(overall),
        "overall_stratified": _stratified(per_task),
        "overall_errors_as_failures": paired_difference(_total(tables.with_errors.values())),
        "sequential": sequential_verdict(_total(tables.with_errors.values())),
        "per_task": per_task,
        "seeds_differ": _seed(a) != _seed(b),
        "config_differences": config_differences(a.get("config", {}), b.get("config", {})),
        "graph_differences": _graph_differences(graphs),
        "caveats": caveats(a, b, graphs),
        "methods": METHODS,
    }


def _seed(summary: Mapping[str, Any]) -> Any:
    return (summary.get("config") or {}).get("seed")


def _graph_differences(graphs: _Graphs | None) -> dict[str, Any] | None:
    if graphs is None or graphs[0] is None or graphs[1] is None:
        return None
    return graph_differences(graphs[0], graphs[1])


def caveats(a: Mapping[str, Any], b: Mapping[str, Any], graphs: _Graphs | None = None) -> list[str]:
    """What a reader of the comparison must know, in plain words."""
    notes = []
    if _seed(a) != _seed(b):
        notes.append(
            f"The runs used different seeds (A: {_seed(a)}, B: {_seed(b)}): an episode of a "
            "task starts from another scene in each run, so the episodes are paired by task "
            "and index only, not by scene. The comparison still holds, without the precision "
            "that pairing by scene gives; rerun B with A's seed to pair them."
        )
    for side, summary, graph in zip("AB", (a, b), graphs or (), strict=False):
        if graph is None:
            notes.append(
                f"The frozen graph of run {side} ({summary.get('run_id')}) could not be read: "
                "what differs between the graphs is not shown."
            )
    return notes


SEQUENTIAL_ALPHA: Final = 0.05
SEQUENTIAL_POWER: Final = 0.8
SEQUENTIAL_REPS: Final = 400
SEQUENTIAL_MAX_PAIRS: Final = 20_000  # the simulation's cap (bounds a request's cost)


def sequential_verdict(table: PairedCounts, alpha: float = SEQUENTIAL_ALPHA) -> dict[str, Any]:
    """Whether the comparison is decided, by the anytime-valid McNemar on the pairs (errors
    as failures), so the answer stays valid however the runs were watched or stopped; when
    it is not, how many more pairs would likely decide it at the observed rates (the pairs
    by which SEQUENTIAL_POWER of simulated continuations decide, a seeded simulation)."""
    test = paired_sequential_test(table.b_only, table.a_only, alpha)
    decided = test.decision in ("B better", "B worse")
    verdict: dict[str, Any] = {
        "decided": decided,
        "decision": test.decision if decided else "not distinguishable yet",
        "evidence": test.evidence,
        "threshold": test.threshold,
        "b_wins": table.b_only,
        "a_wins": table.a_only,
        "pairs": table.n,
        "alpha": alpha,
        "method": SEQUENTIAL_METHOD_NAMES["paired-sequential"],
        "more_pairs": None,
        "note": "",
    }
    if decided or table.n == 0:
        return verdict
    discordance = (table.a_only + table.b_only) / table.n
    delta = (table.b_only - table.a_only) / table.n
    p_a = (table.both + table.a_only) / table.n
    if delta == 0 or not 0 < p_a < 1 or not 0 < p_a + delta < 1:
        verdict["note"] = (
            "the runs agree on the rate so far: no number of further pairs is likely to "
            "decide it (an equal pair of policies is never decided, by design)"
        )
        return verdict
    try:
        fixed = paired_sample_size(p_a, delta, SEQUENTIAL_POWER, alpha, discordance)
    except ValueError:  # every discordant pair one way: no simulation of continuations
        verdict["note"] = "every discordant pair went one way so far: more pairs will tell"
        return verdict
    cap = min(4 * fixed.n, SEQUENTIAL_MAX_PAIRS)
    plan = paired_sequential_expected_n(
        p_a, delta, SEQUENTIAL_POWER, alpha, discordance, cap=cap, reps=SEQUENTIAL_REPS, seed=0
    )
    if plan.n_at_power is None:
        verdict["note"] = f"not likely decided within {plan.cap} pairs at the observed rates"
        return verdict
    verdict["more_pairs"] = max(0, plan.n_at_power - table.n)
    verdict["note"] = (
        f"at the observed rates (difference {delta:+.3f}, discordance {discordance:.3f}) "
        f"{SEQUENTIAL_POWER:.0%} of continuations decide within {plan.n_at_power} pairs "
        f"(seeded simulation, {SEQUENTIAL_REPS} runs): about {verdict['more_pairs']} more"
    )
    return verdict


def _add_holm(per_task: dict[str, dict[str, Any]]) -> None:
    """Holm-adjusted p-values over the tasks that have scored pairs."""
    tested = [t for t, d in per_task.items() if d["n"]]
    adjusted = intervals.holm([per_task[t]["p_value"] for t in tested]) if tested else []
    for task, p in zip(tested, adjusted, strict=True):
        per_task[task]["p_holm"] = p


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Config fields that differ (worker_count is a speed dial, so it is not listed)."""
    keys = sorted((set(a) | set(b)) - {"worker_count"})
    return [k for k in keys if a.get(k) != b.get(k)]


LEADERBOARD_MAX_RUNS = 20
"""The most runs a leaderboard compares (the CLI's and the route's limit)."""


def leaderboard(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """N runs side by side, best first by ``RANK_RULE``.

    Each run's overall rate is over its episodes of the tasks every run has
    (``common_tasks``), so runs are ranked on the same task set; per-task columns cover
    every task any run has (``None`` where a run has none). Each rate says how many planned
    episodes it covers and how many errored. Ties keep the given order."""
    task_sets = [{e["task"] for e in s.get("episodes", [])} for s in summaries]
    common = set.intersection(*task_sets) if task_sets else set()
    rows = [_leaderboard_row(s, common) for s in summaries]
    ranked = sorted(rows, key=_rank_key)
    for rank, row in enumerate(ranked, start=1):
        row["rank"] = rank
    return {
        "runs": ranked,
        "tasks": sorted(set().union(*task_sets)) if task_sets else [],
        "common_tasks": sorted(common),
        "same_task_set": all(t == task_sets[0] for t in task_sets),
        "rank_rule": RANK_RULE,
        "methods": METHODS,
    }


def _rank_key(row: Mapping[str, Any]) -> tuple[float, float]:
    overall = row["overall"]
    as_failures = overall["errors_as_failures"]
    rate = overall["rate"]
    return (
        -(as_failures if as_failures is not None else -1.0),
        -(rate if rate is not None else -1.0),
    )


def _leaderboard_row(summary: Mapping[str, Any], common: set[str]) -> dict[str, Any]:
    episodes = summary.get("episodes", [])
    per_task: dict[str, list[Mapping[str, Any]]] = {}
    for episode in episodes:
        per_task.setdefault(episode["task"], []).append(episode)
    overall = [e for task in sorted(common) for e in per_task.get(task, [])]
    config = summary.get("config") or {}
    errors = sum(1 for e in episodes if _errored(e))
    return {
        "run_id": summary.get("run_id"),
        "graph_name": summary.get("graph_name"),
        "status": summary.get("status"),
        "episodes_total": summary.get("episodes_total"),
        "episodes": len(episodes),
        "errors": errors,
        "clean": errors == 0 and summary.get("status") == "completed",
        "config": {k: config.get(k) for k in ("seed", "step_budget", "start_index")},
        "overall": _rate(overall),
        "per_task": {task: _rate(values) for task, values in sorted(per_task.items())},
    }


def _rate(episodes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Success over the scored episodes, with the planned count, errors, the rate counting
    errors as failures and the worst/best cases over every episode without a score."""
    group = list(episodes)
    flags = [s for e in group if (s := success_of(e)) is not None]
    n, k = len(flags), sum(flags)
    planned, errors = len(group), sum(1 for e in group if _errored(e))
    out: dict[str, Any] = {
        "n": n,
        "k": k,
        "n_planned": planned,
        "errors": errors,
        "rate": None,
        "lo": None,
        "hi": None,
        "errors_as_failures": k / (n + errors) if n + errors else None,
        "worst": k / planned if planned else None,
        "best": (k + planned - n) / planned if planned else None,
    }
    if n:
        lo, hi = intervals.wilson(k, n)
        out.update(rate=k / n, lo=lo, hi=hi)
    return out
