"""A run named by its id or by its name (``meta.json``'s ``name``), as a person types it.

A text that is the id of a run is that run. Otherwise it is a name: one run of that name is
that run; two or more are ambiguous (a UserInputError listing their ids: give one of them);
none is a RunNotFoundError naming the text. Names are matched exactly (case and spaces
count), so ``"flaky cli"`` is one name.

:func:`pick_run` decides on listing rows (``run_id`` and ``name``), wherever they come from
(the backend's ``GET /api/eval/v2/runs``, the run folders); :func:`local_run_id` reads the
run folders of a workspace.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentcanvas.errors import RunNotFoundError, UserInputError
from agentcanvas.eval.run_meta import read_meta
from agentcanvas.paths import NAME_PATTERNS

__all__ = ["is_run_id", "local_run_id", "pick_run", "run_names"]

MAX_LISTED = 10  # ids named in an "ambiguous" message

_RUN_ID = re.compile(NAME_PATTERNS["run_id"], re.ASCII)


def is_run_id(text: str) -> bool:
    """Whether ``text`` has the shape of a run id (``YYYYMMDD_HHMMSS[_N]``)."""
    return _RUN_ID.match(text) is not None


def pick_run(ref: str, rows: Iterable[Mapping[str, Any]], where: str, field: str = "RUN") -> str:
    """The id of the one run of ``rows`` whose id or name is ``ref``; ``where`` says where
    the runs were looked for and ``field`` what gave ``ref`` (in messages)."""
    rows = list(rows)
    if any(row.get("run_id") == ref for row in rows):
        return ref
    named = sorted(str(row["run_id"]) for row in rows if row.get("name") == ref)
    if len(named) == 1:
        return named[0]
    if named:
        shown = ", ".join(named[:MAX_LISTED]) + (" …" if len(named) > MAX_LISTED else "")
        raise UserInputError(
            f"{field}: run name {ref!r} is ambiguous: {len(named)} runs in {where} have it "
            f"({shown}); give the run id instead"
        )
    raise RunNotFoundError(
        f"{field}: no run {ref!r} in {where}: it is neither a run_id there nor a run's name "
        "(`agentcanvas runs` lists ids and names; name a run with --name)"
    )


def run_names(runs_dir: Path) -> list[dict[str, Any]]:
    """``{"run_id", "name"}`` of every run folder under ``runs_dir`` (name None if unset)."""
    try:
        entries = list(os.scandir(runs_dir))
    except OSError:  # no runs folder yet
        return []
    return [
        {"run_id": entry.name, "name": read_meta(Path(entry.path)).name}
        for entry in entries
        if is_run_id(entry.name) and entry.is_dir(follow_symlinks=False)
    ]


def local_run_id(runs_dir: Path, ref: str, field: str = "RUN") -> str:
    """The id of the run folder under ``runs_dir`` that ``ref`` names (id or name)."""
    if is_run_id(ref) and (runs_dir / ref).is_dir():
        return ref  # an id needs no scan of every meta.json
    return pick_run(ref, run_names(runs_dir), repr(str(runs_dir)), field)
