"""The stop rules decide on the plan-order prefix: the same decision, at the same episode,
whatever order the episodes finish in (as on any number of workers)."""

from __future__ import annotations

import numpy as np
import pytest

from agentcanvas.eval.config import EpisodeResult, EvalConfig
from agentcanvas.eval.episode import EpisodeSpec
from agentcanvas.eval.stopping import PrefixWatcher, decision_order

TASKS = ["a", "b"]
N = 60


def specs() -> list[EpisodeSpec]:
    return [
        EpisodeSpec(pos * N + i, task, i, seed=i, key=f"k:{pos * N + i}")
        for pos, task in enumerate(TASKS)
        for i in range(N)
    ]


def result(spec: EpisodeSpec, success: bool, status: str = "completed") -> EpisodeResult:
    metrics = {"success": int(success)} if status == "completed" else {}
    return EpisodeResult(
        index=spec.index,
        task=spec.task,
        episode_index=spec.episode_index,
        seed=spec.seed,
        status=status,  # type: ignore[arg-type]
        metrics=metrics,
    )


def test_the_decision_order_interleaves_tasks() -> None:
    order = decision_order(specs())
    assert order[:4] == [0, N, 1, N + 1]
    assert sorted(order) == list(range(2 * N))


@pytest.mark.parametrize("seed", range(5))
def test_the_same_decision_at_the_same_episode_in_any_finishing_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    plan = specs()
    ours = {s.index: bool(rng.random() < 0.9) for s in plan}
    errors = {s.index for s in plan if rng.random() < 0.05}
    baseline = {(s.task, s.episode_index): bool(rng.random() < 0.4) for s in plan}
    config = EvalConfig(graph_name="g", episode_count=N, until_decided_vs="20260101_000000")
    results = [
        result(s, ours[s.index], "error" if s.index in errors else "completed") for s in plan
    ]
    decisions = []
    for shuffle in range(4):
        watcher = PrefixWatcher(plan, config, baseline)
        finishing = list(results)
        if shuffle:
            rng.shuffle(finishing)  # type: ignore[arg-type]
        for done in finishing:
            if watcher.decided:
                assert watcher.past_stop(done.index) == (
                    watcher.position[done.index] >= watcher.prefix
                )
                continue
            watcher.observe(done)
        report = watcher.final()
        assert report is not None
        decisions.append(report.model_dump())
    assert all(d == decisions[0] for d in decisions)
    assert decisions[0]["decision"] == "B better" and decisions[0]["decided"]


def test_missing_baseline_pairs_end_the_comparison_there() -> None:
    plan = specs()
    baseline = {(s.task, s.episode_index): True for s in plan if s.episode_index < 3}
    config = EvalConfig(graph_name="g", episode_count=N, until_decided_vs="20260101_000000")
    watcher = PrefixWatcher(plan, config, baseline)
    for spec in plan:
        watcher.observe(result(spec, True))
    report = watcher.final()
    assert report is not None
    assert report.decision == "not distinguishable" and report.decided
    assert report.episodes_used == 6 and "ran out" in report.note


def test_the_live_interval_is_the_sequence_on_the_prefix() -> None:
    plan = specs()
    config = EvalConfig(graph_name="g", episode_count=N)
    watcher = PrefixWatcher(plan, config)
    assert watcher.rule is None and watcher.live() is None
    watcher.observe(result(plan[N], True))  # episode 0 of task b: the prefix waits for a's
    assert watcher.prefix == 0 and watcher.live() is None
    watcher.observe(result(plan[0], False))
    live = watcher.live()
    assert live is not None and (live.k, live.n, live.prefix) == (1, 2, 2)
    assert watcher.final() is None


def test_a_baseline_without_a_task_of_the_run_is_refused_naming_it() -> None:
    from agentcanvas.errors import ConfigError

    baseline = {("a", i): True for i in range(N)}  # no episode of task b
    config = EvalConfig(graph_name="g", episode_count=N, until_decided_vs="20260101_000000")
    with pytest.raises(ConfigError, match=r"^until_decided_vs: .* task\(s\) b .*--tasks"):
        PrefixWatcher(specs(), config, baseline)
