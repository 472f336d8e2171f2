"""The leaderboard of N runs: per-task success with intervals, best overall first.

``GET /api/eval/v2/leaderboard?runs=A,B,C`` reads each run's records (a live run's so far)
and ranks them with :func:`agentcanvas.eval.comparison.leaderboard`; the paired view of any
two of them is ``/compare?a=&b=``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from agentcanvas.errors import UserInputError
from agentcanvas.eval.comparison import leaderboard
from agentcanvas.paths import NAME_PATTERNS

from .models import error_responses
from .runs import comparable

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))

MAX_RUNS = 20
_ONE_ID = NAME_PATTERNS["run_id"].strip("^$")
RUN_LIST_PATTERN = f"^{_ONE_ID}(,{_ONE_ID})*$"
RunList = Annotated[
    str,
    Query(
        min_length=1,
        max_length=MAX_RUNS * 24,
        pattern=RUN_LIST_PATTERN,
        description=f"Comma-separated run ids, 2 to {MAX_RUNS}, each once.",
        examples=["20261201_050254,20261201_051010"],
    ),
]


def parse_run_list(text: str) -> list[str]:
    """The run ids of ``runs=`` (the pattern already checked each; a malformed list is a
    422); a 400 naming ``runs`` and the fix when there are too few, too many or repeats."""
    ids = text.split(",")
    if not 2 <= len(ids) <= MAX_RUNS:
        raise UserInputError(f"runs: give 2 to {MAX_RUNS} comma-separated run ids, got {len(ids)}")
    if len(set(ids)) != len(ids):
        raise UserInputError("runs: a run id is listed twice; list each run once")
    return ids


@router.get("/leaderboard", responses=error_responses(404))
async def run_leaderboard(runs: RunList, request: Request) -> dict[str, Any]:
    """N runs ranked by overall success rate (over the tasks they all have), with per-task
    rates and Wilson 95 % intervals; ``methods`` names how each number is computed."""
    cache = request.app.state.services.runs
    summaries = [comparable(cache.summary(run_id)) for run_id in parse_run_list(runs)]
    return leaderboard(summaries)
