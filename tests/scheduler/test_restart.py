"""The scheduler's writes into run folders: summary.json only through ``EvalRun``, its
status only through the run's lifecycle, whatever state the folder's files are in."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentcanvas.eval.config import EpisodeResult, EvalRun
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.run_state import RunStateError, RunStatus
from agentcanvas.eval.runlock import hold
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json, read_json
from agentcanvas.scheduler.job_scheduler import JobScheduler
from agentcanvas.scheduler.restart import mark_failed, set_status


def queued_run(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> RunDir:
    scheduler = new_scheduler(canvas_locked=lambda: True)
    return scheduler.run_dir(scheduler.submit(make_spec(), {}))


def record(run_dir: RunDir, index: int) -> None:
    result = EpisodeResult(
        index=index,
        task="BabyAI-GoToObj-v0",
        episode_index=index,
        seed=index,
        status="completed",
        metrics={"success": True},
    )
    run_dir.create_episode(index)
    atomic_write_json(run_dir.episode_json_path(index), result.model_dump(mode="json"))


def summary(run_dir: RunDir) -> EvalRun:
    return EvalRun.model_validate(read_json(run_dir.summary_path))


def test_a_status_moves_keeping_the_rest_of_the_summary(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    run_dir = queued_run(new_scheduler, make_spec)
    before = summary(run_dir)

    with hold(run_dir):
        set_status(run_dir, RunStatus.RUNNING)
        set_status(run_dir, RunStatus.FAILED, "it broke")

    after = summary(run_dir)
    assert (after.status, after.error) == (RunStatus.FAILED, "it broke")
    assert after.config == before.config and after.episodes_total == before.episodes_total


def test_a_move_the_lifecycle_has_not_is_refused_and_writes_nothing(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    run_dir = queued_run(new_scheduler, make_spec)
    written = run_dir.summary_path.read_bytes()

    with hold(run_dir), pytest.raises(RunStateError, match="cannot go from queued to completed"):
        set_status(run_dir, RunStatus.COMPLETED)

    assert run_dir.summary_path.read_bytes() == written


@pytest.mark.parametrize("damage", [b"{not json", b"[1, 2]", b'{"status": 7}'])
def test_an_unreadable_summary_is_rebuilt_from_the_spec_before_it_moves(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec], damage: bytes
) -> None:
    run_dir = queued_run(new_scheduler, make_spec)
    planned = summary(run_dir).episodes_total
    record(run_dir, 0)
    run_dir.summary_path.write_bytes(damage)

    with hold(run_dir):
        set_status(run_dir, RunStatus.RUNNING)

    rebuilt = summary(run_dir)
    assert rebuilt.status == RunStatus.RUNNING
    assert rebuilt.graph_name == "babyai_oracle" and rebuilt.episodes_total == planned == 2
    assert [e.index for e in rebuilt.episodes] == [0]  # the episode folders' records


def test_mark_failed_rebuilds_from_the_spec(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    run_dir = queued_run(new_scheduler, make_spec)
    planned = summary(run_dir).episodes_total
    run_dir.summary_path.write_bytes(b"\x00garbage")

    with hold(run_dir):
        mark_failed(run_dir, "could not be recovered")

    failed = summary(run_dir)
    assert (failed.status, failed.error) == (RunStatus.FAILED, "could not be recovered")
    assert failed.config.episode_count == 1 and failed.episodes_total == planned
    assert run_dir.is_done()


def test_mark_failed_writes_a_minimal_typed_summary_when_the_spec_is_gone_too(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    run_dir = queued_run(new_scheduler, make_spec)
    record(run_dir, 0)
    record(run_dir, 1)
    run_dir.summary_path.write_bytes(b"{truncated")
    atomic_write_json(run_dir.spec_path, {"config": {"graph_name": "babyai_oracle"}})  # no graph

    with hold(run_dir):
        mark_failed(run_dir, "spec.json: graph: Field required")

    minimal = summary(run_dir)  # an EvalRun like any other summary
    assert minimal.run_id == run_dir.root.name
    assert (minimal.status, minimal.error) == (RunStatus.FAILED, "spec.json: graph: Field required")
    assert minimal.graph_name == "babyai_oracle"  # salvaged from what spec.json still says
    assert minimal.config.graph_name == "babyai_oracle"
    assert (minimal.episodes_total, minimal.episodes_done) == (2, 2)
    assert minimal.status_counts == {"completed": 2}
    assert run_dir.is_done()


def test_a_folder_with_nothing_readable_is_still_failed_with_a_typed_summary(
    new_scheduler: Callable[..., JobScheduler],
    make_spec: Callable[..., RunSpec],
) -> None:
    run_dir = queued_run(new_scheduler, make_spec)
    run_dir.summary_path.write_bytes(b"")
    run_dir.spec_path.write_bytes(b"")

    with hold(run_dir):
        mark_failed(run_dir, "nothing readable")

    minimal = summary(run_dir)
    assert (minimal.graph_name, minimal.status, minimal.episodes_total) == (
        "unknown",
        RunStatus.FAILED,
        0,
    )
