"""The leaderboard of N runs: per-task success with intervals, best overall first.

``GET /api/eval/v2/leaderboard?runs=A,B,C`` reads each run's records (a live run's so far)
and ranks them with :func:`agentcanvas.eval.comparison.leaderboard`; the paired view of any
two of them is ``/compare?a=&b=``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from agentcanvas.errors import DamagedRunError, UserInputError
from agentcanvas.eval.comparison import LEADERBOARD_MAX_RUNS, leaderboard
from agentcanvas.eval.run_index import read_checked_meta
from agentcanvas.eval.run_meta import RunMeta
from agentcanvas.paths import NAME_PATTERNS

from .models import error_responses
from .runs import comparable

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))

MAX_RUNS = LEADERBOARD_MAX_RUNS
_ONE_ID = NAME_PATTERNS["run_id"].strip("^$")
RUN_LIST_PATTERN = f"^{_ONE_ID}(,{_ONE_ID}){{1,{MAX_RUNS - 1}}}$"
RunList = Annotated[
    str,
    Query(
        min_length=1,
        max_length=MAX_RUNS * 24,
        pattern=RUN_LIST_PATTERN,
        description=f"Comma-separated run ids, 2 to {MAX_RUNS}; a repeated id counts once.",
        examples=["20261201_050254,20261201_051010"],
    ),
]


def parse_run_list(text: str) -> list[str]:
    """The run ids of ``runs=``, each once, in their order. The schema's pattern says what
    is accepted (2 to MAX_RUNS ids; a malformed list is a 422 naming ``runs``): whatever it
    lets through is answered, so a repeated id counts once (a leaderboard of one run too)."""
    ids = list(dict.fromkeys(text.split(",")))
    if not 1 <= len(ids) <= MAX_RUNS:  # the pattern's rule, for callers that skip it
        raise UserInputError(f"runs: give 2 to {MAX_RUNS} comma-separated run ids, got {len(ids)}")
    return ids


@router.get("/leaderboard", responses=error_responses(404))
async def run_leaderboard(runs: RunList, request: Request) -> dict[str, Any]:
    """N runs ranked by overall success rate (over the tasks they all have), with per-task
    rates and Wilson 95 % intervals, each run's name and tags; ``methods`` names how each
    number is computed."""
    cache = request.app.state.services.runs
    summaries = [comparable(cache.summary(run_id)) for run_id in parse_run_list(runs)]
    board = leaderboard(summaries)
    for row in board["runs"]:  # each run's name and tags (meta.json), to tell them apart
        try:
            meta = read_checked_meta(cache.run_dir(row["run_id"]).root)
        except DamagedRunError:  # a damaged meta.json hides no result: the run shows by id
            meta = RunMeta()
        row.update(name=meta.name, tags=meta.tags)
    return board
