"""The events file of a run in its own process: whole lines only, in order, never replayed."""

from __future__ import annotations

import json
from pathlib import Path

from agentcanvas.eval.live_events import EventLog, EventTail, events_path

DONE = {"type": "eval_episode_done", "run_id": "r", "episode": {"index": 0}}
PROGRESS = {"type": "eval_progress", "run_id": "r", "episodes_done": 1, "success_rate": None}


def test_the_log_writes_episode_events_and_not_the_end(tmp_path: Path) -> None:
    path = events_path(tmp_path)
    log = EventLog(path)
    tail = EventTail(path)

    for event in (DONE, PROGRESS, {"type": "eval_complete", "run_id": "r"}):
        log(event)

    assert tail.read_new() == [DONE, PROGRESS]
    assert tail.read_new() == []


def test_a_line_being_written_is_read_once_it_is_whole(tmp_path: Path) -> None:
    path = events_path(tmp_path)
    line = json.dumps(PROGRESS).encode()
    tail = EventTail(path, from_start=True)
    path.write_bytes(json.dumps(DONE).encode() + b"\n" + line[:10])

    assert tail.read_new() == [DONE]
    with path.open("ab") as handle:
        handle.write(line[10:] + b"\n")
    assert tail.read_new() == [PROGRESS]


def test_a_new_tail_skips_what_an_earlier_process_left(tmp_path: Path) -> None:
    path = events_path(tmp_path)
    EventLog(path)(DONE)  # a run's first process, before a resume

    tail = EventTail(path)
    EventLog(path)(PROGRESS)

    assert tail.read_new() == [PROGRESS]


def test_a_replaced_file_is_read_from_its_start(tmp_path: Path) -> None:
    path = events_path(tmp_path)
    log = EventLog(path)
    tail = EventTail(path)
    log(DONE)
    log(PROGRESS)
    assert len(tail.read_new()) == 2

    path.unlink()
    log(PROGRESS)

    assert tail.read_new() == [PROGRESS]


def test_non_finite_numbers_are_written_as_null(tmp_path: Path) -> None:
    path = events_path(tmp_path)
    EventLog(path)({**PROGRESS, "success_rate": float("nan")})

    assert "NaN" not in path.read_text()
    assert EventTail(path, from_start=True).read_new()[0]["success_rate"] is None
