"""The one table of ``agentcanvas`` commands, in the order ``agentcanvas --help`` lists them.

A command is added here and nowhere else: its module defines a
:class:`~agentcanvas.cli.command.Command` (parser and handler together).
"""

from __future__ import annotations

from agentcanvas.cli.command import Command
from agentcanvas.cli.commands import (
    backend,
    compare,
    evaluate,
    failures,
    graphs,
    leaderboard,
    play,
    retry,
    runs,
    serve,
    servers,
)

__all__ = ["COMMANDS"]

COMMANDS: tuple[Command, ...] = (
    # the workspace
    graphs.NODESETS,
    graphs.GRAPHS,
    graphs.SCHEMA,
    graphs.VALIDATE,
    graphs.TASKS,
    # running here
    play.PLAY,
    evaluate.EVAL,
    evaluate.VERIFY_INVARIANCE,
    evaluate.DEMO,
    # finished runs, from their folders
    failures.FAILURES,
    retry.RETRY,
    runs.EXPORT,
    runs.PLAN,
    compare.COMPARE,
    leaderboard.LEADERBOARD,
    # node-set servers by hand
    servers.SERVE_NODESET,
    servers.SERVE_POLICY,
    servers.SERVERS,
    # the backend and its runs
    serve.SERVE,
    backend.SUBMIT,
    backend.RUNS,
    backend.STATUS,
    backend.CANCEL,
    backend.RESUME,
)
