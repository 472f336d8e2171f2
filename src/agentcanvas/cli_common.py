"""What every ``agentcanvas`` sub-command module shares: the command table, the workspace's
registry, strict JSON output, graph resolution and the ``--max-errors`` parser.

Below ``cli`` and its sub-command modules (``cli_eval``, ``cli_servers``, ``cli_backend``,
``cli_export``), which import it and never each other.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentcanvas import jsontext
from agentcanvas.errors import ConfigError
from agentcanvas.graph.model import Graph, load_graph_file
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = [
    "COMMANDS",
    "FRAMES_HELP",
    "Handler",
    "add_meta_arguments",
    "command",
    "parse_max_errors",
    "print_json",
    "resolve_graph",
    "workspace_registry",
]

Handler = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, Handler] = {}
"""Sub-command name → handler, filled by :func:`command`."""


def command(name: str) -> Callable[[Handler], Handler]:
    """Register the decorated function as the handler of ``agentcanvas NAME``."""

    def register(fn: Handler) -> Handler:
        COMMANDS[name] = fn
        return fn

    return register


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


def parse_max_errors(text: str | None) -> int | float | None:
    """``--max-errors``: a whole number is a count, a decimal a fraction."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError as exc:
        raise ConfigError(
            f"--max-errors: expected a count (e.g. 3) or a fraction (e.g. 0.2), got {text!r}"
        ) from exc


FRAMES_HELP = "which episodes keep frames (default: every with --save-frames, else none)"


def add_meta_arguments(p: argparse.ArgumentParser) -> None:
    """``--name``, ``--tag`` (repeatable) and ``--note``: what tells this run apart."""
    p.add_argument("--name", help="a short name for the run, shown in the runs list")
    p.add_argument("--tag", action="append", dest="tags", metavar="TAG", help="a tag (repeatable)")
    p.add_argument("--note", help="free text about the run (why, what changed)")
