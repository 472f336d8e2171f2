"""``agentcanvas export`` and ``agentcanvas.runs_df`` / ``episodes_df`` on real run folders.

The module's workspace holds a real ``babyai_oracle`` run (6 episodes) and a live copy of it
stopped after 4 episodes (its records only in episodes.jsonl), made once for the module.
"""

from __future__ import annotations

import csv
import io
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

import agentcanvas
from agentcanvas import export
from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.records import start_index
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json
from support.cli import run_cli
from support.export_runs import LIVE_DONE, ExportRuns, make_runs

CLI_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExportRuns]:
    yield make_runs(tmp_path_factory.mktemp("export"))


def export_cli(runs: ExportRuns, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("export", *args, workspace=runs.workspace, timeout_s=CLI_TIMEOUT_S)


def read_csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_export_csv_has_one_row_per_episode(runs: ExportRuns, tmp_path: Path) -> None:
    out = tmp_path / "episodes.csv"
    done = export_cli(runs, runs.done_id, "--format", "csv", "--output", str(out))
    assert done.returncode == 0, done.stderr
    assert f"wrote 6 episode row(s) of run {runs.done_id}" in done.stderr
    rows = read_csv_rows(out.read_text(encoding="utf-8"))
    records = runs.summary(runs.done_id)["episodes"]
    assert len(rows) == len(records) == 6
    for row, record in zip(rows, records, strict=True):
        assert row["run_id"] == runs.done_id and row["graph_name"] == "babyai_oracle"
        assert int(row["index"]) == record["index"] and row["task"] == record["task"]
        assert int(row["seed"]) == record["seed"] and row["status"] == record["status"]
        assert float(row["metric_return"]) == record["metrics"]["return"]
        assert int(row["metric_success"]) == record["metrics"]["success"]
        assert row["error"] == ""  # None is an empty cell
    frame = pd.read_csv(out)
    assert frame.shape[0] == 6 and list(frame["index"]) == list(range(6))


def test_export_to_stdout_and_default_path(runs: ExportRuns) -> None:
    printed = export_cli(runs, runs.done_id, "-o", "-")
    assert printed.returncode == 0, printed.stderr
    assert len(read_csv_rows(printed.stdout)) == 6
    written = export_cli(runs, runs.done_id)  # csv, into the current directory
    assert written.returncode == 0, written.stderr
    default = runs.workspace / f"{runs.done_id}_episodes.csv"
    assert read_csv_rows(default.read_text(encoding="utf-8")) == read_csv_rows(printed.stdout)


def test_parquet_round_trips_through_pandas(runs: ExportRuns, tmp_path: Path) -> None:
    out = tmp_path / "episodes.parquet"
    done = export_cli(runs, runs.done_id, "--format", "parquet", "-o", str(out))
    assert done.returncode == 0, done.stderr
    frame = pd.read_parquet(out)
    records = runs.summary(runs.done_id)["episodes"]
    assert frame.shape[0] == 6
    assert list(frame["seed"]) == [r["seed"] for r in records]
    assert list(frame["metric_return"]) == [r["metrics"]["return"] for r in records]
    assert set(frame["run_id"]) == {runs.done_id}
    expected = agentcanvas.episodes_df(runs.workspace, runs.done_id)
    assert list(frame.columns) == list(expected.columns)
    assert list(frame["instruction"]) == list(expected["instruction"])


def test_runs_df_one_row_per_run_with_flat_columns(runs: ExportRuns) -> None:
    frame = agentcanvas.runs_df(runs.workspace)
    assert list(frame["run_id"]) == [runs.live_id, runs.done_id]  # oldest first
    done = frame.set_index("run_id").loc[runs.done_id]
    summary = runs.summary(runs.done_id)
    assert done["metric_success"] == summary["aggregate_metrics"]["success"]["mean"]
    assert done["metric_success_lo"] == summary["aggregate_metrics"]["success"]["lo"]
    assert done["config_worker_count"] == 1 and done["config_episode_count"] == 3
    assert done["health"] == "clean" and done["count_completed"] == 6
    live = frame.set_index("run_id").loc[runs.live_id]
    assert live["health"] == "in_progress" and not live["episodes_complete"]


def test_episodes_df_every_run_with_run_id_on_every_row(runs: ExportRuns) -> None:
    frame = agentcanvas.episodes_df(runs.workspace)
    assert frame.shape[0] == 6 + LIVE_DONE
    assert list(frame.columns[:2]) == ["run_id", "graph_name"]
    counts = frame.groupby("run_id").size().to_dict()
    assert counts == {runs.done_id: 6, runs.live_id: LIVE_DONE}
    assert {"metric_success", "metric_return", "metric_spl", "metric_steps"} <= set(frame)
    assert set(frame["graph_name"]) == {"babyai_oracle"}


def test_a_live_run_exports_from_its_index(runs: ExportRuns) -> None:
    printed = export_cli(runs, runs.live_id, "-o", "-")
    assert printed.returncode == 0, printed.stderr
    rows = read_csv_rows(printed.stdout)
    assert runs.summary(runs.live_id)["episodes"] == []  # nothing in the summary itself
    done_records = runs.summary(runs.done_id)["episodes"][:LIVE_DONE]
    assert [int(r["seed"]) for r in rows] == [r["seed"] for r in done_records]
    assert {r["run_id"] for r in rows} == {runs.live_id}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("20990101_000000",), "RUN: no run '20990101_000000'"),  # well-formed, no such run
        (("../outputs",), "RUN: no run '../outputs'"),
        (("{done}", "--format", "xls"), "--format"),
        (("{done}", "--format", "parquet", "-o", "-"), "--output"),
        (("{done}", "-o", "no/such/folder/x.csv"), "--output"),
    ],
)
def test_bad_input_exits_1_naming_the_field(
    runs: ExportRuns, args: tuple[str, ...], named: str
) -> None:
    result = export_cli(runs, *(a.format(done=runs.done_id) for a in args))
    assert result.returncode == 1, result.stderr
    assert named in result.stderr and "Traceback" not in result.stderr


def test_import_agentcanvas_does_not_import_pandas() -> None:
    code = "import sys, agentcanvas; assert 'pandas' not in sys.modules; agentcanvas.runs_df"
    code += "; assert 'pandas' not in sys.modules; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_csv_cells_are_strict() -> None:
    table = (["a", "b", "c"], [{"a": math.nan, "b": math.inf, "c": {"x": [1, None]}}, {}])
    assert export.csv_text(table) == 'a,b,c\n,,"{""x"":[1,null]}"\n,,\n'


def test_a_10k_episode_live_run_exports(tmp_path: Path) -> None:
    n = 10_000
    run_dir = RunDir(tmp_path / "outputs" / "eval_runs" / "20260101_000001")
    run_dir.create()
    results = [
        EpisodeResult(
            index=i,
            task="BabyAI-GoToObj-v0",
            episode_index=i,
            seed=i * 7,
            status="completed",
            steps=i % 40,
            metrics={"success": i % 3 != 0, "return": 0.5},
        )
        for i in range(n)
    ]
    start_index(run_dir, results)
    config = EvalConfig(graph_name="babyai_oracle", episode_count=n)
    summary = EvalRun(
        run_id=run_dir.root.name,
        graph_name="babyai_oracle",
        config=config,
        episodes_total=n,
        episodes_done=n,
        status="running",
        episodes_complete=False,
    )
    atomic_write_json(run_dir.summary_path, summary.model_dump(mode="json"))
    out = tmp_path / "big.parquet"
    path, count = export.export_run(run_dir.root.name, "parquet", out, workspace=tmp_path)
    assert (path, count) == (out, n)
    frame = pd.read_parquet(out)
    assert frame.shape[0] == n and frame["seed"].iloc[-1] == (n - 1) * 7
    assert int(frame["metric_success"].sum()) == sum(1 for i in range(n) if i % 3 != 0)
