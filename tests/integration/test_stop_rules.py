"""Runs that stop when the answer is known, after the same episodes at any W.

Real ``agentcanvas eval`` runs of babyai_oracle. The baseline is the oracle with a step
budget too small for half the episodes (success 0.5); the oracle itself never fails. Against
that baseline ``--until-decided-vs`` stops early with "B better", after identical episodes
at ``-w 1`` and ``-w 4`` (records, aggregates and decision bit-identical; episodes that
finished past the decision are in ``past_stop/``, not in the run); against a run of the same
configuration it runs to the cap and says "not distinguishable". ``--until-halfwidth`` stops
where the confidence sequence is narrow enough, also at any W. Over REST the same fields
work, and an unknown baseline is a 404 naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval.config import EpisodeResult
from support.backend import Backend
from support.cli import run_cli

pytestmark = pytest.mark.timeout(300)

EPISODES = 100  # per task: a cap of 200 episodes
TIGHT_BUDGET = "5"  # the oracle fails about half the episodes within 5 steps


def run_json(workspace: Path, *args: str) -> dict[str, Any]:
    done = run_cli(
        "eval", "babyai_oracle", "-n", str(EPISODES), *args, "--json",
        workspace=workspace, timeout_s=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stop_rules")


@pytest.fixture(scope="module")
def baseline(workspace: Path) -> dict[str, Any]:
    summary = run_json(workspace, "-w", "2", "--step-budget", TIGHT_BUDGET)
    assert 0.2 < summary["aggregate_metrics"]["success"]["mean"] < 0.8
    return summary


def identities(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [EpisodeResult.model_validate(e).identity() for e in summary["episodes"]]


def folders(workspace: Path, summary: dict[str, Any], name: str) -> int:
    run = workspace / "outputs" / "eval_runs" / summary["run_id"]
    return len(list((run / name).glob("ep*")))


def assert_same_stop(one: dict[str, Any], other: dict[str, Any]) -> None:
    """Records, aggregates and the decision are bit-identical (only kept_apart may differ)."""
    assert identities(one) == identities(other)
    assert one["aggregate_metrics"] == other["aggregate_metrics"]
    assert one["aggregate_by_task"] == other["aggregate_by_task"]
    drop = {"kept_apart"}
    assert {k: v for k, v in one["stop"].items() if k not in drop} == {
        k: v for k, v in other["stop"].items() if k not in drop
    }


def test_against_a_clearly_worse_baseline_it_stops_early_identically_at_w1_and_w4(
    workspace: Path, baseline: dict[str, Any]
) -> None:
    base = baseline["run_id"]
    runs = [run_json(workspace, "-w", w, "--until-decided-vs", base) for w in ("1", "4")]
    for summary in runs:
        stop = summary["stop"]
        assert summary["status"] == "completed", summary["error"]
        assert stop["decision"] == "B better" and stop["decided"] is True
        assert stop["evidence"] >= stop["threshold"] == pytest.approx(1 / 0.05)
        assert stop["b_wins"] > stop["a_wins"] == 0
        assert stop["episodes_used"] < 2 * EPISODES // 2, stop  # well before the cap
        assert summary["episodes_done"] == stop["episodes_used"] == len(summary["episodes"])
        # the records are the plan-order prefix: episode 0.. of both tasks, interleaved
        used = stop["episodes_used"]
        assert sorted((e["episode_index"], e["task"]) for e in summary["episodes"]) == sorted(
            (i // 2, task)
            for i, task in zip(
                range(used), ["BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0"] * used, strict=False
            )
        )
        assert folders(workspace, summary, "episodes") == used
        assert folders(workspace, summary, "past_stop") == stop["kept_apart"]
    assert_same_stop(*runs)
    saved = 2 * EPISODES - runs[0]["stop"]["episodes_used"]
    print(f"decided after {runs[0]['stop']['episodes_used']} of {2 * EPISODES}: {saved} saved")


def test_against_an_equal_baseline_it_runs_to_the_cap_not_distinguishable(
    workspace: Path, baseline: dict[str, Any]
) -> None:
    same = run_json(
        workspace, "-w", "2", "--step-budget", TIGHT_BUDGET,
        "--until-decided-vs", baseline["run_id"],
    )  # fmt: skip
    stop = same["stop"]
    assert same["status"] == "completed"
    assert stop["decision"] == "not distinguishable" and stop["decided"] is False
    assert stop["episodes_used"] == stop["episodes_planned"] == 2 * EPISODES
    assert stop["b_wins"] == stop["a_wins"] == 0 and stop["evidence"] == 1.0
    assert identities(same) == identities(baseline)
    assert stop["kept_apart"] == 0


def test_until_halfwidth_stops_where_the_sequence_is_narrow_at_any_w(
    workspace: Path, baseline: dict[str, Any]
) -> None:
    args = ("--step-budget", TIGHT_BUDGET, "--until-halfwidth", "0.15")
    runs = [run_json(workspace, "-w", w, *args) for w in ("1", "3")]
    for summary in runs:
        stop, live = summary["stop"], summary["live_interval"]
        assert stop["decision"] == "narrow enough" and stop["halfwidth"] <= 0.15
        assert stop["episodes_used"] < 2 * EPISODES
        assert live["n"] == stop["episodes_used"]  # every episode scored
        assert (live["hi"] - live["lo"]) / 2 == pytest.approx(stop["halfwidth"])
        assert live["lo"] <= summary["aggregate_metrics"]["success"]["mean"] <= live["hi"]
    assert_same_stop(*runs)
    # the final summary keeps its fixed-n interval, narrower than the sequence
    fixed = runs[0]["aggregate_metrics"]["success"]
    assert (
        fixed["hi"] - fixed["lo"] < runs[0]["live_interval"]["hi"] - runs[0]["live_interval"]["lo"]
    )


def test_stop_rules_over_rest(workspace: Path, baseline: dict[str, Any]) -> None:
    backend = Backend(workspace)
    try:
        unknown = backend.http.post(
            "/api/eval/v2/start",
            json={"graph_name": "babyai_oracle", "until_decided_vs": "19990101_000000"},
        )
        assert unknown.status_code == 404, unknown.text
        assert unknown.json()["detail"].startswith("until_decided_vs: no run")
        other_seed = backend.http.post(
            "/api/eval/v2/start",
            json={
                "graph_name": "babyai_oracle",
                "until_decided_vs": baseline["run_id"],
                "seed": 7,
            },
        )
        assert other_seed.status_code == 400 and "seed" in other_seed.json()["detail"]
        run_id = backend.start_run(
            "babyai_oracle", EPISODES, 2, until_decided_vs=baseline["run_id"]
        )
        summary = backend.wait_status(run_id, "completed")
        compared = backend.api(
            "GET", "/api/eval/v2/compare", params={"a": baseline["run_id"], "b": run_id}
        )
        planned = backend.api(
            "GET",
            "/api/eval/v2/plan",
            params={"run": baseline["run_id"], "delta": 0.2, "workers": 2, "vs": run_id},
        )
    finally:
        backend.close()
    # compare's verdict is the same test on the same pairs: decided, as the run was
    verdict = compared["sequential"]
    assert verdict["decided"] and verdict["decision"] == "B better"
    assert verdict["pairs"] == summary["stop"]["episodes_used"]
    assert verdict["evidence"] == pytest.approx(summary["stop"]["evidence"])
    assert summary["stop"]["decision"] == "B better"
    assert summary["stop"]["episodes_used"] == summary["episodes_done"] < 2 * EPISODES
    assert planned["vs"] == run_id and set(planned["per_task"]) == {
        "BabyAI-GoToObj-v0",
        "BabyAI-GoToLocal-v0",
    }
    assert all(row["n"] >= 1 for row in planned["per_task"].values())
    assert planned["eta_s"] is not None and "observed" in planned["methods"]["discordance"]


def test_plan_from_the_cli(workspace: Path, baseline: dict[str, Any]) -> None:
    done = run_cli(
        "plan", baseline["run_id"], "--delta", "0.1", "-w", "4", "--json",
        workspace=workspace, timeout_s=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    pooled = plan["overall"]
    assert pooled["n"] > 100 and pooled["sequential_n"] > pooled["n"]
    assert "Connor 1987" in plan["methods"]["n"]
    text = run_cli("plan", baseline["run_id"], "--delta", "0.1", workspace=workspace, timeout_s=60)
    assert text.returncode == 0 and "paired episodes (fixed n)" in text.stdout
    bad = run_cli("plan", baseline["run_id"], "--delta", "2", workspace=workspace, timeout_s=60)
    assert bad.returncode == 1 and "delta" in bad.stderr and "Traceback" not in bad.stderr


def test_compare_from_the_cli_says_whether_it_is_decided(
    workspace: Path, baseline: dict[str, Any]
) -> None:
    stopped = run_json(workspace, "-w", "2", "--until-decided-vs", baseline["run_id"])
    done = run_cli(
        "compare", baseline["run_id"], stopped["run_id"], workspace=workspace, timeout_s=60
    )
    assert done.returncode == 0, done.stderr
    assert "decided: B better" in done.stdout and "Newcombe 1998" in done.stdout
    same = run_cli(
        "compare", baseline["run_id"], baseline["run_id"], "--json",
        workspace=workspace, timeout_s=60,
    )  # fmt: skip
    verdict = json.loads(same.stdout)["sequential"]
    assert not verdict["decided"] and "agree" in verdict["note"]
    missing = run_cli("compare", baseline["run_id"], "19990101_000000", workspace=workspace,
                      timeout_s=60)  # fmt: skip
    assert missing.returncode == 1 and "run_id" in missing.stderr
