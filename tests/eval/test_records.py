"""Tests for agentcanvas.eval.records: the episodes.jsonl index, its tail, and resume's truth."""

from __future__ import annotations

import math
from pathlib import Path

from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.records import (
    IndexTail,
    append_record,
    episode_records,
    read_index,
    recorded_results,
    start_index,
    summary_is_complete,
)
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json, read_jsonl


def result(index: int, status: str = "completed", **metrics: float) -> EpisodeResult:
    return EpisodeResult(
        index=index,
        task=f"t{index % 2}",
        episode_index=index // 2,
        seed=1000 + index,
        status=status,  # type: ignore[arg-type]
        steps=index % 7,
        metrics=dict(metrics) or {"success": index % 3 == 0},
    )


def run_dir(tmp_path: Path) -> RunDir:
    folder = RunDir(tmp_path / "run")
    folder.create()
    return folder


def write_episode(folder: RunDir, record: EpisodeResult) -> None:
    folder.create_episode(record.index)
    atomic_write_json(
        folder.episode_json_path(record.index),
        {**record.model_dump(mode="json"), "run_id": "r", "graph_name": "g"},
    )


def test_the_index_is_appended_in_completion_order_and_read_sorted_by_index(
    tmp_path: Path,
) -> None:
    folder = run_dir(tmp_path)
    start_index(folder, [])
    assert folder.episodes_index_path.read_bytes() == b""
    for index in (3, 0, 2, 1):
        append_record(folder, result(index))
    lines = read_jsonl(folder.episodes_index_path).records
    assert [r["index"] for r in lines] == [3, 0, 2, 1]  # completion order on disk
    read = read_index(folder)
    assert [r["index"] for r in read.records] == [0, 1, 2, 3] and read.torn_lines == 0
    assert list(read.records) == [result(i).model_dump(mode="json") for i in range(4)]


def test_a_later_line_for_the_same_index_wins(tmp_path: Path) -> None:
    folder = run_dir(tmp_path)
    start_index(folder, [result(0, "cancelled"), result(1)])
    append_record(folder, result(0))  # a resumed episode: its new record
    records = read_index(folder).records
    assert [(r["index"], r["status"]) for r in records] == [(0, "completed"), (1, "completed")]


def test_start_index_holds_the_resumed_results_sorted(tmp_path: Path) -> None:
    folder = run_dir(tmp_path)
    append_record(folder, result(9))  # a stale line from an earlier run into this folder
    start_index(folder, [result(2), result(0)])
    assert [r["index"] for r in read_jsonl(folder.episodes_index_path).records] == [0, 2]


def test_non_finite_metrics_are_written_as_null(tmp_path: Path) -> None:
    folder = run_dir(tmp_path)
    start_index(folder, [])
    append_record(folder, result(0, reward=math.nan, ret=math.inf))
    assert b"NaN" not in folder.episodes_index_path.read_bytes()
    assert read_index(folder).records[0]["metrics"] == {"reward": None, "ret": None}


def test_a_torn_last_line_is_skipped_and_the_next_append_heals_it(tmp_path: Path) -> None:
    folder = run_dir(tmp_path)
    start_index(folder, [result(0)])
    line = folder.episodes_index_path.read_bytes()
    with folder.episodes_index_path.open("ab") as handle:
        handle.write(line[: len(line) // 2])  # a writer killed mid-line
    assert [r["index"] for r in read_index(folder).records] == [0]
    append_record(folder, result(1))
    read = read_index(folder)
    assert [r["index"] for r in read.records] == [0, 1] and read.torn_lines == 1


def test_lines_without_a_valid_index_are_counted_not_kept(tmp_path: Path) -> None:
    folder = run_dir(tmp_path)
    folder.episodes_index_path.write_bytes(
        b'{"index": -1}\n{"index": true}\n{"no": 1}\n[1]\n{"index": 4, "status": "completed"}\n'
    )
    read = read_index(folder)
    assert [r["index"] for r in read.records] == [4] and read.torn_lines == 4


def test_a_missing_index_holds_no_records(tmp_path: Path) -> None:
    assert read_index(run_dir(tmp_path)).records == ()


def test_the_tail_parses_only_what_was_appended_since_its_last_poll(tmp_path: Path) -> None:
    folder = run_dir(tmp_path)
    tail = IndexTail(folder.episodes_index_path)
    assert tail.poll() == [] and tail.records() == []  # no index yet
    start_index(folder, [result(5)])
    assert [r["index"] for r in tail.poll()] == [5]
    append_record(folder, result(1))
    append_record(folder, result(3))
    assert [r["index"] for r in tail.poll()] == [1, 3]
    assert tail.poll() == []
    assert [r["index"] for r in tail.records()] == [1, 3, 5]
    # A line still being written is left for the next poll, then read whole.
    line = (folder.episodes_index_path.read_bytes().splitlines(keepends=True))[0]
    with folder.episodes_index_path.open("ab") as handle:
        handle.write(line.replace(b'"index":5', b'"index":7')[:10])
    assert tail.poll() == []
    with folder.episodes_index_path.open("ab") as handle:
        handle.write(line.replace(b'"index":5', b'"index":7')[10:])
    assert [r["index"] for r in tail.poll()] == [7]
    assert tail.torn_lines == 0


def test_the_tail_starts_over_when_the_index_is_replaced(tmp_path: Path) -> None:
    folder = run_dir(tmp_path)
    start_index(folder, [result(0), result(1), result(2)])
    tail = IndexTail(folder.episodes_index_path)
    assert len(tail.records()) == 3
    start_index(folder, [result(4)])  # a resumed run writes its index afresh
    assert [r["index"] for r in tail.records()] == [4]


def test_episode_records_follow_the_summary_once_complete_else_the_index(
    tmp_path: Path,
) -> None:
    folder = run_dir(tmp_path)
    start_index(folder, [result(1), result(0)])
    live = {"status": "running", "episodes": [], "episodes_complete": False}
    assert not summary_is_complete(live)
    assert [r["index"] for r in episode_records(folder, live)] == [0, 1]
    final = {
        "status": "completed",
        "episodes": [result(0).model_dump(mode="json")],
        "episodes_complete": True,
    }
    assert episode_records(folder, final) == final["episodes"]
    older = {"status": "completed", "episodes": final["episodes"]}  # no field: complete
    assert summary_is_complete(older) and episode_records(folder, older) == final["episodes"]


def test_resume_trusts_the_episode_folders_over_a_torn_index(tmp_path: Path) -> None:
    folder = run_dir(tmp_path)
    start_index(folder, [])
    for index in (0, 1, 2, 12_345):
        write_episode(folder, result(index))
        if index != 2:  # killed between episode.json and its index line
            append_record(folder, result(index))
    folder.create_episode(3)  # in flight: a folder, no episode.json
    folder.create_episode(4)
    folder.episode_json_path(4).write_text('{"index": 4, "sta')  # torn by hand
    (folder.episodes_dir / "notes").mkdir()
    rebuilt = recorded_results(folder)
    assert [r.index for r in rebuilt] == [0, 1, 2, 12_345]
    assert rebuilt == [result(i) for i in (0, 1, 2, 12_345)]
    assert folder.episode_dir(12_345).name == "ep12345"
