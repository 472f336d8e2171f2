"""A run's lifecycle: the moves its status may make, and nothing else setting it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.run_state import (
    TERMINAL_RUN_STATUSES,
    RunStateError,
    RunStatus,
    check_move,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "agentcanvas"


def _run(status: RunStatus = RunStatus.PENDING) -> EvalRun:
    config = EvalConfig(graph_name="g")
    return EvalRun(run_id="r1", graph_name="g", config=config, episodes_total=1, status=status)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("pending", "queued"),
        ("pending", "running"),
        ("queued", "running"),
        ("running", "completed"),
        ("running", "failed"),
        ("running", "cancelled"),
        ("running", "aborted"),
        ("aborted", "queued"),  # resume
        ("failed", "queued"),
        ("cancelled", "aborted"),  # its parent died before it saw the run end
        ("completed", "completed"),  # the same end written twice
    ],
)
def test_allowed_moves(old: str, new: str) -> None:
    assert check_move(old, new) == RunStatus(new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("completed", "running"),
        ("completed", "aborted"),
        ("completed", "queued"),
        ("running", "pending"),
        ("queued", "completed"),  # a run that never ran cannot have completed
        ("pending", "completed"),
    ],
)
def test_refused_moves_name_the_run_and_both_statuses(old: str, new: str) -> None:
    with pytest.raises(RunStateError, match=f"run r7 cannot go from {old} to {new}"):
        check_move(old, new, "r7")


def test_an_unknown_status_is_refused() -> None:
    with pytest.raises(ValueError, match="'paused'"):
        check_move("running", "paused")


def test_eval_run_moves_through_the_table_and_keeps_or_replaces_its_error() -> None:
    run = _run()
    run.move_to(RunStatus.RUNNING)
    run.move_to(RunStatus.FAILED, "budget spent")
    assert (run.status, run.error) == (RunStatus.FAILED, "budget spent")
    run.move_to(RunStatus.QUEUED)
    assert run.error == "budget spent"  # kept unless replaced
    run.move_to(RunStatus.RUNNING, None)
    assert run.error is None
    run.move_to(RunStatus.COMPLETED)
    with pytest.raises(RunStateError):
        run.move_to(RunStatus.RUNNING)
    assert run.status == RunStatus.COMPLETED  # a refused move changes nothing


def test_status_is_a_plain_string_on_disk_and_old_summaries_load() -> None:
    run = _run(RunStatus.ABORTED)
    data = json.loads(run.model_dump_json())
    assert data["status"] == "aborted"
    again = EvalRun.model_validate(data)
    assert again.status is RunStatus.ABORTED and again.status == "aborted"
    assert {"completed", "failed", "cancelled", "aborted"} == TERMINAL_RUN_STATUSES


# A run's status changes only through run_state (check_move / EvalRun.move_to): no module
# assigns one by hand. Episode statuses (EpisodeResult.status) are another lifecycle.
_ASSIGNS_RUN_STATUS = re.compile(
    r"\b(?:run|self\.run|runner\.run|summary|self\.summary)\.status\s*(?:=[^=]|,[^=\n]*=[^=])"
)
_RUN_ONLY_LITERAL = re.compile(
    r"""\bstatus["']?\s*[=:]\s*["'](?:pending|queued|running|failed|aborted)["']"""
)


def test_no_module_assigns_a_run_status_by_hand() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "run_state.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if '"nav_status"' in code:  # a navigation event's own status, not a run's
                continue
            if _ASSIGNS_RUN_STATUS.search(code) or _RUN_ONLY_LITERAL.search(code):
                offenders.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert not offenders, "set run statuses through eval.run_state:\n" + "\n".join(offenders)


def test_the_check_finds_an_assignment_by_hand() -> None:
    assert _ASSIGNS_RUN_STATUS.search('        self.run.status, self.run.error = "failed", x')
    assert _ASSIGNS_RUN_STATUS.search('    run.status = "aborted"')
    assert _RUN_ONLY_LITERAL.search('    state = {"status": "aborted", "error": e}')
    assert _RUN_ONLY_LITERAL.search('StartResponse(run_id=r, status="queued")')
    assert not _ASSIGNS_RUN_STATUS.search("    if run.status == RunStatus.COMPLETED:")
    assert not _RUN_ONLY_LITERAL.search('result.status, result.error = "timeout", why')
