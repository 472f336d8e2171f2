"""The ``agentcanvas`` console script, run as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "agentcanvas"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "agentcanvas.cli"]


def run_cli(
    *args: str, workspace: Path, timeout_s: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed console script with ``workspace`` as AGENTCANVAS_HOME and cwd.

    ``env`` is the environment to start from (default: this process's)."""
    sent = {**(os.environ if env is None else env), "AGENTCANVAS_HOME": str(workspace)}
    return subprocess.run(
        [*COMMAND, *args],
        cwd=workspace,
        env=sent,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
