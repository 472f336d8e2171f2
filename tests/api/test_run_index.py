"""RunIndex: the run listing's rows, re-read only when a summary.json changed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.api.runs import RunCache, compact
from agentcanvas.eval.run_index import RunIndex, compact_row


@pytest.fixture
def runs_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "eval_runs"
    folder.mkdir()
    return folder


def write_summary(
    runs_dir: Path, run_id: str, status: str, success: float | None = None, n_episodes: int = 3
) -> Path:
    summary: dict[str, Any] = {
        "version": 1,
        "run_id": run_id,
        "status": status,
        "graph_name": "nav",
        "episodes_total": n_episodes,
        "episodes_done": n_episodes,
        "aggregate_metrics": {} if success is None else {"success": {"mean": success}},
        "episodes": [
            {"index": i, "status": "completed", "metrics": {"success": 1.0}}
            for i in range(n_episodes)
        ],
    }
    path = runs_dir / run_id / "summary.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(summary))
    return path


def test_rows_are_newest_first_compact_and_paged(runs_dir: Path) -> None:
    write_summary(runs_dir, "20260101_000001", "completed", success=0.5)
    write_summary(runs_dir, "20260101_000003", "running")
    write_summary(runs_dir, "20260101_000002", "completed", success=1.0)

    page = RunIndex(runs_dir).page(0, 2)

    assert page["total"] == 3
    assert [r["run_id"] for r in page["runs"]] == ["20260101_000003", "20260101_000002"]
    assert all("episodes" not in r for r in page["runs"])
    assert page["runs"][1]["success_rate"] == 1.0 and page["runs"][0]["success_rate"] is None
    completed = RunIndex(runs_dir).page(1, 10, status="completed")
    oldest = {**RunIndex(runs_dir).rows()[2], "config_diff": {}}
    assert completed == {"total": 2, "runs": [oldest], "tags": [], "graphs": ["nav"]}


def test_a_row_equals_the_compact_summary_of_the_status_endpoint(runs_dir: Path) -> None:
    path = write_summary(runs_dir, "20260101_000001", "completed", success=0.25)
    summary = json.loads(path.read_text())

    no_meta = {"name": None, "tags": [], "note": None}  # the row adds meta.json's fields
    assert RunIndex(runs_dir).rows() == [{**compact(summary), **no_meta}]
    assert compact(summary) == compact_row(summary)
    row = {**compact(summary), **no_meta, "config_diff": {}}
    assert RunCache(runs_dir).list(0, 50) == {
        "total": 1,
        "runs": [row],
        "tags": [],
        "graphs": ["nav"],
    }


def test_an_unchanged_summary_is_not_read_again(runs_dir: Path) -> None:
    path = write_summary(runs_dir, "20260101_000001", "running")
    index = RunIndex(runs_dir)
    assert index.rows()[0]["status"] == "running"
    before = path.stat()
    # Same size, same inode, same mtime: the index must not look inside.
    text = path.read_text().replace('"running"', '"RUNNING"')
    with path.open("r+") as handle:
        handle.write(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    assert index.rows()[0]["status"] == "running"  # served from the index

    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert index.rows()[0]["status"] == "RUNNING"  # the change is seen


def test_a_rewritten_summary_is_read_again(runs_dir: Path) -> None:
    index = RunIndex(runs_dir)
    write_summary(runs_dir, "20260101_000001", "running", n_episodes=1)
    assert index.rows()[0]["episodes_done"] == 1

    write_summary(runs_dir, "20260101_000001", "completed", success=1.0, n_episodes=40)

    assert index.rows()[0]["status"] == "completed"
    assert index.rows()[0]["episodes_done"] == 40


def test_unreadable_and_foreign_entries(runs_dir: Path, tmp_path: Path) -> None:
    index = RunIndex(runs_dir)
    good = write_summary(runs_dir, "20260101_000001", "completed")
    assert len(index.rows()) == 1
    good.write_text('{"status": "compl')  # torn: the last good row stays
    (runs_dir / "20260101_000002").mkdir()  # no summary yet
    write_summary(runs_dir, "not-a-run", "completed")
    outside = tmp_path / "outside"
    outside.mkdir()
    write_summary(outside, "20260101_000009", "completed")
    (runs_dir / "20260101_000009").symlink_to(outside / "20260101_000009")

    rows = index.rows()

    assert [(r["run_id"], r["status"]) for r in rows] == [("20260101_000001", "completed")]


def test_a_removed_run_leaves_the_listing(runs_dir: Path) -> None:
    index = RunIndex(runs_dir)
    write_summary(runs_dir, "20260101_000001", "completed")
    write_summary(runs_dir, "20260101_000002", "completed")
    assert len(index.rows()) == 2

    shutil.rmtree(runs_dir / "20260101_000001")

    assert [r["run_id"] for r in index.rows()] == ["20260101_000002"]
    empty = {"total": 0, "runs": [], "tags": [], "graphs": []}
    assert RunIndex(runs_dir / "missing").page(0, 10) == empty
