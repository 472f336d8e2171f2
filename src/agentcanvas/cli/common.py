"""What the commands share: the workspace's registry, graph resolution, its runs by id or
name, and strict JSON output."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from agentcanvas import jsontext
from agentcanvas.eval.run_lookup import local_run_id
from agentcanvas.export import read_run, workspace_runs
from agentcanvas.graph.model import Graph, load_graph_file
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = [
    "RUN_HELP",
    "print_json",
    "resolve_graph",
    "run_id_of",
    "stderr",
    "with_records",
    "workspace_registry",
]

RUN_HELP = "a run's id (a folder of outputs/eval_runs), or its name when one run has it"

stderr = Console(stderr=True, soft_wrap=True)
"""Progress, tables and notes: stdout is kept for what a script reads (``--json``). Notes are
never wrapped by inserting newlines (soft wrap): a run folder's path or a command to run again
stays on one line, to copy or to parse, at any width."""


def workspace_registry() -> WorkspaceComponentRegistry:
    """The workspace's registry, scanned (it starts no server until asked to)."""
    registry = WorkspaceComponentRegistry()
    registry.scan_all()
    return registry


def print_json(obj: Any, indent: int | None = 2) -> None:
    """``obj`` on stdout as strict JSON (no NaN/Infinity: they print as null)."""
    sys.stdout.write(jsontext.dumps(obj, indent=indent) + "\n")


def resolve_graph(registry: WorkspaceComponentRegistry, name_or_path: str) -> Graph:
    """A graph by name, or by a path to a .json file; validated against the node sets."""
    if name_or_path.endswith(".json") or os.sep in name_or_path:
        graph = load_graph_file(Path(name_or_path))
        registry.validate(graph)
        return graph
    return registry.load_graph(name_or_path)


def run_id_of(ref: str, field: str = "RUN") -> str:
    """The id of the workspace's run that ``ref`` (given as ``field``) names: its id or
    its name."""
    return local_run_id(workspace_runs(None), ref, field)


def with_records(ref: str, field: str = "RUN") -> dict[str, Any]:
    """The summary of the run ``ref`` names, with its records (a live run's so far)."""
    summary, records = read_run(workspace_runs(None), run_id_of(ref, field))
    return {**summary, "episodes": records}
