"""A job's lifecycle in the scheduler: one table of moves, one method that changes the
state, a named error for a wrong move; a real job goes through it from submit to reaped."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from agentcanvas.errors import StateError
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.scheduler.job_scheduler import JobScheduler
from agentcanvas.scheduler.jobs import Job, JobState, JobStateError
from agentcanvas.scheduler.resources import RamSampler
from support.polling import poll_until

SCHEDULER_SRC = Path(__file__).resolve().parents[2] / "src" / "agentcanvas" / "scheduler"
DEADLINE_S = 60.0
S = JobState


def a_job(tmp_path: Path, make_spec: Callable[..., RunSpec], state: JobState) -> Job:
    from agentcanvas.eval.store import RunDir

    job = Job.from_spec(RunDir(tmp_path / "20250101_000000"), make_spec(), {})
    job.state = state  # the table is under test here, not how the job got there
    return job


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.LOADING, S.QUEUED),  # its shared models are up
        (S.LOADING, S.ENDED),  # cancelled while they load, or they could not start
        (S.QUEUED, S.RUNNING),
        (S.QUEUED, S.ENDED),  # cancelled or failed before it ran
        (S.RUNNING, S.CANCELLING),
        (S.RUNNING, S.ENDED),
        (S.CANCELLING, S.ENDED),
        (S.RUNNING, S.RUNNING),  # staying is no move
    ],
)
def test_allowed_moves(
    tmp_path: Path, make_spec: Callable[..., RunSpec], old: JobState, new: JobState
) -> None:
    job = a_job(tmp_path, make_spec, old)
    job.move_to(new)
    assert job.state is new


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (S.ENDED, S.QUEUED),  # a resumed run is a new job
        (S.ENDED, S.RUNNING),
        (S.RUNNING, S.QUEUED),
        (S.CANCELLING, S.RUNNING),
        (S.QUEUED, S.CANCELLING),  # a queued run is cancelled at once: ended
        (S.LOADING, S.RUNNING),  # never spawned before its models are up
        (S.QUEUED, S.LOADING),
    ],
)
def test_refused_moves_name_the_run_and_both_states(
    tmp_path: Path, make_spec: Callable[..., RunSpec], old: JobState, new: JobState
) -> None:
    job = a_job(tmp_path, make_spec, old)
    with pytest.raises(JobStateError, match=f"run 20250101_000000 cannot go from {old.value} "):
        job.move_to(new)
    assert job.state is old  # a refused move changes nothing
    assert issubclass(JobStateError, StateError)  # a 409 where it reaches the API


def test_a_job_goes_queued_running_cancelling_ended(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    scheduler = new_scheduler(samplers=[RamSampler()])
    run_id = scheduler.submit(make_spec(), {})
    (job,) = scheduler.queue
    assert job.state is S.QUEUED

    scheduler.tick()
    assert job.state is S.RUNNING and scheduler.running[run_id].job is job

    assert scheduler.cancel(run_id) == "cancelling"
    assert job.state is S.CANCELLING
    assert scheduler.cancel(run_id) == "cancelling"  # asked twice: still one SIGINT
    assert job.state is S.CANCELLING

    def reaped() -> bool:
        scheduler.tick()
        return run_id not in scheduler.running

    poll_until(reaped, f"{run_id} to be reaped", DEADLINE_S)
    assert job.state is S.ENDED


def test_a_queued_job_cancelled_ends_at_once(
    new_scheduler: Callable[..., JobScheduler], make_spec: Callable[..., RunSpec]
) -> None:
    scheduler = new_scheduler(canvas_locked=lambda: True)
    scheduler.submit(make_spec(), {})
    (job,) = scheduler.queue

    scheduler.cancel(job.run_id)

    assert job.state is S.ENDED and scheduler.queue == []


# The state of a job changes only in Job.move_to: nothing in the scheduler assigns one.
_ASSIGNS_STATE = re.compile(r"\.state\s*=[^=]")


def test_no_module_assigns_a_job_state_by_hand() -> None:
    offenders = []
    for path in sorted(SCHEDULER_SRC.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if _ASSIGNS_STATE.search(code) and "self.state = new" not in code:
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert not offenders, "change job states through Job.move_to:\n" + "\n".join(offenders)


def test_the_check_finds_an_assignment_by_hand() -> None:
    assert _ASSIGNS_STATE.search("        job.state = JobState.RUNNING")
    assert not _ASSIGNS_STATE.search("    if job.state == JobState.RUNNING:")
