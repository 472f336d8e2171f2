"""The planner: per-task and pooled paired episodes (Connor 1987), the anytime-valid test's
pairs by simulation, the discordance observed against another run, and the ETA."""

from __future__ import annotations

from typing import Any

import pytest

from agentcanvas.errors import UserInputError
from agentcanvas.eval.planning import plan_comparison
from agentcanvas.eval.sample_size import paired_sample_size


def episode(task: str, i: int, success: bool, status: str = "completed") -> dict[str, Any]:
    return {
        "index": i,
        "task": task,
        "episode_index": i,
        "seed": i,
        "status": status,
        "metrics": {"success": int(success)} if status == "completed" else {},
    }


def run(run_id: str, outcomes: dict[str, list[bool]], seconds: float = 10.0) -> dict[str, Any]:
    episodes = [episode(t, i, ok) for t, row in outcomes.items() for i, ok in enumerate(row)]
    return {
        "run_id": run_id,
        "episodes": episodes,
        "episodes_done": len(episodes),
        "config": {"worker_count": 2, "seed": 0},
        "timings": {"started_at": 100.0, "finished_at": 100.0 + seconds},
    }


BASE = run("a", {"x": [True] * 30 + [False] * 70, "y": [True] * 60 + [False] * 40})


def test_per_task_n_is_connors_with_the_stated_assumption() -> None:
    plan = plan_comparison(BASE, 0.1, power=0.8, alpha=0.05, workers=4)
    x, y = plan["per_task"]["x"], plan["per_task"]["y"]
    assert x["n"] == paired_sample_size(0.3, 0.1, 0.8, 0.05).n
    assert y["n"] == paired_sample_size(0.6, 0.1, 0.8, 0.05).n
    assert "independent" in x["assumption"] and "assumed" in plan["methods"]["discordance"]
    assert x["sequential_n"] > x["n"]  # the anytime-valid test pays for looking every time
    assert plan["episodes_per_task_all_tasks"] == x["n"] + y["n"]
    # 200 episodes in 10 s on 2 workers: 10 per second per worker; at 4 workers, 40/s
    assert plan["eta_s"] == -(-(x["n"] + y["n"]) // 40)


def test_the_discordance_observed_against_another_run() -> None:
    # B agrees with A on every episode but 10 of task x, where it succeeds and A failed
    other_x = [True] * 30 + [True] * 10 + [False] * 60
    other = run("b", {"x": other_x, "y": [True] * 60 + [False] * 40})
    plan = plan_comparison(BASE, 0.05, other=other)
    x = plan["per_task"]["x"]
    assert x["discordance"] == pytest.approx(0.1)
    assert x["n"] == paired_sample_size(0.3, 0.05, 0.8, 0.05, discordance=0.1).n
    assert plan["per_task"]["y"]["discordance"] > 0.05  # none observed: its least value
    assert plan["vs"] == "b" and "observed" in plan["methods"]["discordance"]


def test_a_difference_with_no_room_is_said_per_task() -> None:
    perfect = run("p", {"x": [True] * 20})
    plan = plan_comparison(perfect, 0.05)
    assert plan["per_task"]["x"]["n"] is None
    assert "no room" in plan["per_task"]["x"]["problem"]
    assert plan["eta_s"] is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"power": 1.0}, "power"), ({"alpha": 0.7}, "alpha"), ({"workers": 0}, "workers")],
)
def test_bad_arguments_name_their_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(UserInputError, match=f"^{field}:"):
        plan_comparison(BASE, 0.1, **kwargs)
