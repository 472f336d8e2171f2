"""The events file of a run in its own process: whole lines only, in order, never replayed."""

from __future__ import annotations

import json
from pathlib import Path

from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.events import EvalComplete, EvalEpisodeDone, EvalProgress
from agentcanvas.eval.live_events import EventLog, EventTail, events_path

EPISODE = EpisodeResult(index=0, episode_index=0, seed=1, status="completed")
DONE = EvalEpisodeDone(run_id="r", episode=EPISODE)
PROGRESS = EvalProgress(run_id="r", episodes_done=1, episodes_total=2, success_rate=None)


def test_the_log_writes_episode_events_and_not_the_end(tmp_path: Path) -> None:
    path = events_path(tmp_path)
    log = EventLog(path)
    tail = EventTail(path)

    for event in (DONE, PROGRESS, EvalComplete(run_id="r", status="completed")):
        log(event)

    assert tail.read_new() == [DONE, PROGRESS]
    assert tail.read_new() == []


def test_a_line_being_written_is_read_once_it_is_whole(tmp_path: Path) -> None:
    path = events_path(tmp_path)
    line = json.dumps(PROGRESS.wire()).encode()
    tail = EventTail(path, from_start=True)
    path.write_bytes(json.dumps(DONE.wire()).encode() + b"\n" + line[:10])

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
    EventLog(path)(PROGRESS.model_copy(update={"success_rate": float("nan")}))

    assert "NaN" not in path.read_text()
    [event] = EventTail(path, from_start=True).read_new()
    assert isinstance(event, EvalProgress) and event.success_rate is None


def test_a_line_that_is_no_event_is_skipped(tmp_path: Path) -> None:
    path = events_path(tmp_path)
    path.write_text('{"type": "eval_progress", "run_id": "r"}\n{"type": "unknown"}\n[1]\n')
    EventLog(path)(PROGRESS)

    assert EventTail(path, from_start=True).read_new() == [PROGRESS]
