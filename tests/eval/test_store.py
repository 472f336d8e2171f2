"""Tests for agentcanvas.eval.store: atomic writes, torn JSONL lines, run dir layout, run ids."""

from __future__ import annotations

import json
import math
import os
import threading
from datetime import datetime
from pathlib import Path

import pytest

from agentcanvas.errors import RunError, UnsafeNameError
from agentcanvas.eval.store import RunDir, new_run_id
from agentcanvas.fileio import (
    JsonlRead,
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    read_json,
    read_jsonl,
)
from agentcanvas.paths import check_name

NOW = datetime(2026, 6, 16, 14, 30, 52)


def test_atomic_write_json_round_trips_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    obj = {"version": 1, "z": [1, 2.5, "é"], "a": {"nested": True}, "none": None}
    atomic_write_json(path, obj)
    atomic_write_json(path, obj)  # a rewrite replaces, never appends
    assert read_json(path) == obj
    assert list(read_json(path)) == ["version", "z", "a", "none"]  # insertion order kept
    assert path.read_text(encoding="utf-8").endswith("}\n")
    assert os.listdir(tmp_path) == ["summary.json"]


def test_atomic_write_json_writes_non_finite_floats_as_null(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    atomic_write_json(path, {"nan": math.nan, "inf": [math.inf, -math.inf], "ok": (1.5,)})
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert read_json(path) == {"nan": None, "inf": [None, None], "ok": [1.5]}


def test_atomic_write_bytes_failure_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "occupied"
    target.mkdir()
    (target / "keep").write_text("x")
    with pytest.raises(RunError, match="occupied"):
        atomic_write_bytes(target, b"data")  # os.replace onto a non-empty folder fails
    assert sorted(os.listdir(tmp_path)) == ["occupied"]
    with pytest.raises(RunError, match="no_such_dir"):
        atomic_write_bytes(tmp_path / "no_such_dir" / "f", b"data")


def test_atomic_write_json_refuses_unencodable_objects_without_writing(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    with pytest.raises(RunError, match=r"bad\.json"):
        atomic_write_json(path, {"x": object()})
    assert os.listdir(tmp_path) == []


def test_a_concurrent_reader_never_sees_a_half_written_file(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    # Large enough (~300 kB) that a non-atomic write would routinely be observed half done.
    versions = [{"version": v, "rows": [[v] * 50] * 600} for v in range(2)]
    atomic_write_json(path, versions[0])
    n_writes, stop = 40, threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                obj = read_json(path)
                assert obj == versions[obj["version"]]
                seen.append(obj["version"])
            except BaseException as exc:
                errors.append(exc)
                return

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(n_writes):
            atomic_write_json(path, versions[i % 2])
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()
    assert errors == []
    assert seen, "the reader never completed a read"
    assert os.listdir(tmp_path) == ["summary.json"]


def test_read_json_names_the_file_when_missing_or_corrupt(tmp_path: Path) -> None:
    with pytest.raises(RunError, match=r"missing\.json"):
        read_json(tmp_path / "missing.json")
    (tmp_path / "corrupt.json").write_text('{"a": 1')
    with pytest.raises(RunError, match=r"corrupt\.json.*not valid JSON"):
        read_json(tmp_path / "corrupt.json")
    (tmp_path / "latin.json").write_bytes(b'"\xff"')
    with pytest.raises(RunError, match=r"latin\.json"):
        read_json(tmp_path / "latin.json")


def test_append_and_read_jsonl_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    records = [{"step": i, "node": f"n{i}", "reward": 0.5 * i} for i in range(3)]
    for record in records:
        append_jsonl(path, record)
    append_jsonl(path, {"step": 3, "value": math.nan, "text": "line\nbreak"})
    read = read_jsonl(path)
    assert read == JsonlRead(
        records=(*records, {"step": 3, "value": None, "text": "line\nbreak"}), torn_lines=0
    )
    assert path.read_bytes().count(b"\n") == 4


def test_a_torn_last_line_is_skipped_counted_and_healed_by_the_next_append(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    append_jsonl(path, {"step": 0})
    append_jsonl(path, {"step": 1, "payload": "x" * 100})
    # Tear the last line for real: cut the file in the middle of the second record.
    full_size = path.stat().st_size
    os.truncate(path, full_size - 40)
    assert read_jsonl(path) == JsonlRead(records=({"step": 0},), torn_lines=1)
    # A writer that resumes must not fuse its record onto the torn bytes.
    append_jsonl(path, {"step": 2})
    assert read_jsonl(path) == JsonlRead(records=({"step": 0}, {"step": 2}), torn_lines=1)


def test_a_partial_write_from_a_crashed_writer_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    append_jsonl(path, {"step": 0})
    line = json.dumps({"step": 1, "obs": list(range(50))}).encode()
    with path.open("ab") as handle:  # what a writer killed mid-write leaves behind
        handle.write(line[: len(line) // 2])
    assert read_jsonl(path) == JsonlRead(records=({"step": 0},), torn_lines=1)


def test_garbled_lines_in_the_middle_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_bytes(
        b'{"step": 0}\n'
        b'{"step": 1\n'  # truncated object
        b"\xff\xfe garbage\n"  # not UTF-8
        b"[1, 2]\n"  # valid JSON but not a record
        b"\n"  # blank lines are not torn
        b'{"step": 2}\n'
    )
    assert read_jsonl(path) == JsonlRead(records=({"step": 0}, {"step": 2}), torn_lines=3)


def test_read_jsonl_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(RunError, match=r"nope\.jsonl"):
        read_jsonl(tmp_path / "nope.jsonl")


def test_run_dir_layout_matches_the_design(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "20260616_143052")
    names = {
        run.spec_path: "spec.json",
        run.shared_urls_path: "shared_urls.json",
        run.summary_path: "summary.json",
        run.graph_path: "graph.json",
        run.stdout_path: "stdout.log",
        run.stderr_path: "stderr.log",
        run.done_path: "_DONE",
        run.episodes_dir: "episodes",
    }
    for path, name in names.items():
        assert path == run.root / name
    assert run.episode_dir(7) == run.root / "episodes" / "ep0007"
    assert run.episode_dir(12345) == run.root / "episodes" / "ep12345"
    assert run.episode_log_path(7) == run.root / "episodes" / "ep0007" / "log.jsonl"
    assert run.episode_assets_dir(7) == run.root / "episodes" / "ep0007" / "assets"
    assert run.episode_json_path(7) == run.root / "episodes" / "ep0007" / "episode.json"


@pytest.mark.parametrize("idx", [-1, True, 1.0, "1"])
def test_run_dir_refuses_bad_episode_indices(tmp_path: Path, idx: object) -> None:
    with pytest.raises(UnsafeNameError, match="episode index"):
        RunDir(tmp_path).episode_dir(idx)  # type: ignore[arg-type]


def test_run_dir_create_and_done_marker(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "runs" / "r")
    run.create()
    run.create()  # idempotent
    assert run.episodes_dir.is_dir()
    assert run.create_episode(3) == run.episode_dir(3)
    assert run.episode_dir(3).is_dir()
    assert not run.episode_assets_dir(3).exists()  # made with the episode's first asset
    assert not run.is_done()
    run.touch_done()
    run.touch_done()  # idempotent
    assert run.is_done()
    assert sorted(os.listdir(run.root)) == ["_DONE", "episodes"]


def test_new_run_id_uses_the_timestamp_then_collision_suffixes(tmp_path: Path) -> None:
    runs = tmp_path / "outputs" / "eval_runs"  # created on demand
    ids = [new_run_id(runs, NOW) for _ in range(3)]
    assert ids == ["20260616_143052", "20260616_143052_1", "20260616_143052_2"]
    assert all((runs / run_id).is_dir() for run_id in ids)
    assert all(check_name("run_id", run_id) for run_id in ids)


def test_new_run_id_defaults_to_now(tmp_path: Path) -> None:
    before = datetime.now().replace(microsecond=0)
    run_id = new_run_id(tmp_path)
    after = datetime.now()
    assert before <= datetime.strptime(run_id[:15], "%Y%m%d_%H%M%S") <= after


def test_concurrent_new_run_id_calls_get_distinct_ids(tmp_path: Path) -> None:
    n_threads, n_calls = 16, 8
    barrier = threading.Barrier(n_threads)
    results: list[str] = []
    lock = threading.Lock()

    def claim() -> None:
        barrier.wait(timeout=10)
        mine = [new_run_id(tmp_path, NOW) for _ in range(n_calls)]
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=claim) for _ in range(n_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(results) == n_threads * n_calls
    assert len(set(results)) == len(results)
    assert sorted(os.listdir(tmp_path)) == sorted(results)
