"""Errored episodes never vanish from a score: real runs of a user's node set whose env
fails in two of three tasks, through the CLI, the run folder, ``runs_df`` and a real
backend's leaderboard and compare.

The node set is written into a temporary workspace with only the documented node API
(``agentcanvas.nodes``). With ``faulty`` on, task ``crash_mid`` raises at its third step (so
its episodes end ``error`` with the metrics harvested before: partial results) and task
``broken`` cannot be loaded (every episode ``exception``); ``ok`` always succeeds. With
``faulty`` off every episode succeeds. Episodes pair by (task, episode_index).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.export import run_rows
from support.backend import Backend
from support.cli import run_cli
from support.workspace import write_files

pytestmark = pytest.mark.slow
API = "/api/eval/v2"
N = 4  # episodes per task
TASKS = ["broken", "crash_mid", "ok"]

NODESET = """
from agentcanvas.nodes import (
    FieldSpec, LoadInfo, MetricSpec, NodeSet, NodeSetError, Panel, PanelSpec, PortSpec,
)


class Walk:
    def __init__(self):
        self.task, self.steps, self.faulty = "ok", 0, False


class WalkPanel(Panel):
    spec = PanelSpec(
        fields=[
            FieldSpec(name="task_id", kind="choice", default="ok", choices=TASKS_HERE),
            FieldSpec(name="episode_index", kind="int", default=0),
            FieldSpec(name="seed", kind="int", default=0),
            FieldSpec(name="faulty", kind="bool", default=False),
        ],
        actions=["play"],
    )

    def on_action(self, name):
        if name != "play":
            return super().on_action(name)
        self.state.task, self.state.steps = self.values["task_id"], 0
        self.state.faulty = bool(self.values["faulty"])
        return dict(self.values)

    def on_load(self):
        if self.state.faulty and self.state.task == "broken":
            raise NodeSetError("walk: level 'broken' cannot be built")
        return LoadInfo(episode_id=f"{self.state.task}/{self.values['episode_index']}",
                        step_budget=10)


NODESET = NodeSet(
    name="walk", parallelism="replicated", state_factory=Walk, panel_class=WalkPanel,
    metrics={"success": MetricSpec(kind="binary"),
             "progress": MetricSpec(kind="bounded", lo=0.0, hi=1.0)},
)


@NODESET.node("step", inputs=[PortSpec(name="go", required=False)],
              outputs=[PortSpec(name="done", type="bool"), PortSpec(name="metrics", type="dict")],
              done_port="done")
def step(inputs, config, state, ctx):
    if inputs.get("go") is not None:
        state.steps += 1
    if state.faulty and state.task == "crash_mid" and state.steps == 2:
        raise RuntimeError("walk: the simulator diverged")
    done = state.steps >= 3
    return {"done": done, "metrics": {"success": int(done), "progress": state.steps / 3}}
""".replace("TASKS_HERE", repr(TASKS))


def _graph(name: str, faulty: bool) -> str:
    return json.dumps(
        {
            "version": 1,
            "name": name,
            "env": {"nodeset": "walk", "fields": {"faulty": faulty}, "tasks": TASKS},
            "nodes": [
                {"id": "env", "type": "walk.step"},
                {"id": "go", "type": "core.constant", "config": {"value": 1}},
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [
                {"source": "go.value", "target": "env.go", "next_iteration": True},
                {"source": "env.metrics", "target": "out.metrics"},
            ],
        }
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    workspace = write_files(
        tmp_path_factory.mktemp("errors_in_scores"),
        {
            "graph_nodes/walk/__init__.py": NODESET,
            "graphs/walk_clean.json": _graph("walk_clean", False),
            "graphs/walk_faulty.json": _graph("walk_faulty", True),
        },
    )
    out: dict[str, Any] = {}
    clean = run_cli("eval", "walk_clean", "-n", str(N), "-w", "2", "--json",
                    workspace=workspace, timeout_s=240)  # fmt: skip
    assert clean.returncode == 0, clean.stderr
    out["clean"] = json.loads(clean.stdout)
    wide = {**os.environ, "COLUMNS": "250"}  # rich wraps the tables at 80 columns otherwise
    faulty = run_cli("eval", "walk_faulty", "-n", str(N), "-w", "2",
                     workspace=workspace, timeout_s=240, env=wide)  # fmt: skip
    assert faulty.returncode == 3, faulty.stderr  # completed, with errors
    out["faulty_stderr"] = faulty.stderr
    folder = max((workspace / "outputs" / "eval_runs").iterdir(), key=lambda p: p.name)
    out["faulty"] = json.loads((folder / "summary.json").read_text())
    assert out["faulty"]["graph_name"] == "walk_faulty"
    return workspace, out


def test_errors_are_counted_beside_the_success_rate(runs: tuple[Path, dict[str, Any]]) -> None:
    summary = runs[1]["faulty"]
    success = summary["aggregate_metrics"]["success"]
    assert (success["mean"], success["n"], success["n_planned"], success["n_errors"]) == (
        1.0, N, 3 * N, 2 * N,
    )  # fmt: skip
    assert success["errors_as_failures"] == pytest.approx(1 / 3)
    assert (success["worst"], success["best"]) == (pytest.approx(1 / 3), 1.0)
    assert (success["kind"], success["kind_source"]) == ("binary", "declared")
    assert summary["aggregate_metrics"]["progress"]["method"] == "betting"
    assert summary["health"]["verdict"] == "errors"


def test_a_task_whose_every_episode_errored_is_listed(runs: tuple[Path, dict[str, Any]]) -> None:
    by_task = runs[1]["faulty"]["aggregate_by_task"]
    assert sorted(by_task) == TASKS
    broken = by_task["broken"]["success"]
    assert (broken["n"], broken["n_planned"], broken["n_errors"], broken["mean"]) == (
        0, N, N, None,
    )  # fmt: skip
    assert by_task["ok"]["success"]["n_errors"] == 0


def test_errored_episodes_keep_their_partial_metrics_apart(
    runs: tuple[Path, dict[str, Any]],
) -> None:
    crashed = [e for e in runs[1]["faulty"]["episodes"] if e["task"] == "crash_mid"]
    assert len(crashed) == N
    for episode in crashed:
        assert episode["status"] == "error" and "diverged" in episode["node_errors"]["env"]
        assert episode["metrics"] == {}  # never scored
        # Harvested before the failure: the step before the crash had made one move.
        assert episode["partial_metrics"] == {"progress": pytest.approx(1 / 3), "success": 0}


def test_the_cli_table_shows_the_errors(runs: tuple[Path, dict[str, Any]]) -> None:
    text = runs[1]["faulty_stderr"]
    assert "errors as failures" in text and "scored/planned" in text
    assert f"{N}/{3 * N}" in text  # success covers 4 of the 12 planned episodes
    assert "broken" in text  # the all-error task has its row


def test_runs_df_columns_carry_the_errors(runs: tuple[Path, dict[str, Any]]) -> None:
    columns, rows = run_rows(runs[0])
    assert "metric_success_n_errors" in columns and "metric_success_errors_as_failures" in columns
    faulty = next(r for r in rows if r["graph_name"] == "walk_faulty")
    assert (faulty["metric_success"], faulty["metric_success_n_errors"]) == (1.0, 2 * N)
    assert faulty["metric_success_n_planned"] == 3 * N


@pytest.fixture(scope="module")
def backend(runs: tuple[Path, dict[str, Any]]) -> Iterator[Backend]:
    with Backend(runs[0]) as server:
        yield server


def test_the_leaderboard_ranks_the_clean_run_first_and_shows_the_errors(
    runs: tuple[Path, dict[str, Any]], backend: Backend
) -> None:
    clean, faulty = runs[1]["clean"]["run_id"], runs[1]["faulty"]["run_id"]
    response = backend.http.get(f"{API}/leaderboard", params={"runs": f"{faulty},{clean}"})
    assert response.status_code == 200, response.text
    board = response.json()
    assert [r["run_id"] for r in board["runs"]] == [clean, faulty]
    row = board["runs"][1]
    assert row["overall"]["rate"] == 1.0  # the same as the clean run's over scored episodes
    assert (row["errors"], row["clean"]) == (2 * N, False)
    assert row["overall"]["errors_as_failures"] == pytest.approx(1 / 3)
    assert row["per_task"]["broken"]["errors"] == N


def test_compare_shows_the_errors_and_the_difference_with_errors_as_failures(
    runs: tuple[Path, dict[str, Any]], backend: Backend
) -> None:
    clean, faulty = runs[1]["clean"]["run_id"], runs[1]["faulty"]["run_id"]
    response = backend.http.get(f"{API}/compare", params={"a": clean, "b": faulty})
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["paired"] == 3 * N and data["overall"]["n"] == N
    assert data["overall"]["delta"] == 0.0  # the scored pairs alone agree...
    assert data["errors"] == {"a": 0, "b": 2 * N, "pairs": 2 * N}  # ...but 8 are not scored
    as_failures = data["overall_errors_as_failures"]
    assert as_failures["delta"] == pytest.approx(-2 / 3) and as_failures["delta_hi"] < 0
    assert data["per_task"]["broken"]["errors"]["b"] == N
    assert data["overall"]["delta_lo"] < 0 < data["overall"]["delta_hi"]  # an interval at ±0


def test_compare_refuses_runs_with_no_paired_episode(
    runs: tuple[Path, dict[str, Any]], backend: Backend
) -> None:
    workspace = runs[0]
    other = run_cli("eval", "walk_clean", "-n", "2", "--start-index", "50", "--tasks", "ok",
                    "--json", workspace=workspace, timeout_s=240)  # fmt: skip
    assert other.returncode == 0, other.stderr
    unpaired = json.loads(other.stdout)["run_id"]
    response = backend.http.get(
        f"{API}/compare", params={"a": runs[1]["clean"]["run_id"], "b": unpaired}
    )
    assert response.status_code == 400, response.text
    assert "no paired episode" in response.json()["detail"]
