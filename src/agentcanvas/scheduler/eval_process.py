"""A job's eval process: spawned in its own session below the backend's priority, with the
environment its spec asks for; signalled as the eval process alone (it stops its servers)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import psutil

from agentcanvas.cluster.placement import PLACEMENT_GROUP_ENV
from agentcanvas.eval.store import RunDir
from agentcanvas.server.procs import ChildProcess, spawn

__all__ = ["EVAL_NICENESS", "child_env", "spawn_eval", "terminate_leader"]

EVAL_NICENESS = 10
"""Eval subprocesses run this much below the backend's priority, so that the API stays responsive
when runs keep every core busy (with a high ``--cpu-oversubscription``, or outside load)."""


def child_env(active_workspace_dir: str | None, placement_group: str | None) -> dict[str, str]:
    """The eval process's environment: ours, its overlay, and the placement group reserved
    for it (its actors go there)."""
    env = dict(os.environ)
    if active_workspace_dir:
        env["ACTIVE_WORKSPACE_DIR"] = active_workspace_dir
    env.pop(PLACEMENT_GROUP_ENV, None)
    if placement_group:
        env[PLACEMENT_GROUP_ENV] = placement_group
    return env


def spawn_eval(
    run_dir: RunDir, backend_url: str, env: dict[str, str], cwd: Path | None
) -> ChildProcess:
    """``python -m agentcanvas.eval_subprocess_main`` for the run, leader of its own process
    group, its output in the run folder, niced by EVAL_NICENESS."""
    argv = [sys.executable, "-m", "agentcanvas.eval_subprocess_main"]
    argv += ["--run-dir", str(run_dir.root), "--backend-url", backend_url]
    child = spawn(
        argv,
        env=env,
        cwd=cwd,
        new_session=True,
        stdout_path=run_dir.stdout_path,
        stderr_path=run_dir.stderr_path,
    )
    with contextlib.suppress(psutil.Error):  # its env servers inherit it when they fork
        psutil.Process(child.pid).nice(min(19, os.nice(0) + EVAL_NICENESS))
    return child


def terminate_leader(child: ChildProcess, signum: signal.Signals) -> None:
    """``signum`` to the eval process only (not its env servers, which it stops itself):
    SIGINT cancels its run (``cancelled``), SIGTERM interrupts it (``aborted``, resumable)."""
    if child.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)
