"""Exit codes of ``agentcanvas`` (also in the README and ``agentcanvas --help``).

A run that had errors never exits like a clean one. :data:`TABLE` says which code each
command can exit with; :func:`epilog` prints the rows of one command (or all of them).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Final

__all__ = ["TABLE", "ExitCode", "epilog", "for_run"]

OK: Final = 0
"""eval/submit --follow: the run completed and every episode has a verdict; play: the
episode completed; verify-invariance: identical records and every episode has a verdict;
compare: no regression (or no --fail-on-regression)."""
USAGE: Final = 1
"""Bad input: usage, validation, an unknown graph, task or run, a refused config (a message
on stderr, no traceback); submit: the backend refused the run or cannot be reached."""
RUN_FAILED: Final = 2
"""The run failed (e.g. ``--max-errors`` exceeded, or it could not start), was cancelled
or aborted."""
EPISODE_ERRORS: Final = 3
"""The run completed, but some episodes ended in error, exception, timeout or no_verdict
(play: the episode did)."""
NOT_INVARIANT: Final = 4
"""verify-invariance: the records differ between worker counts."""
REGRESSION: Final = 5
"""compare --fail-on-regression: B is significantly worse than A (the exact McNemar test on
the paired episodes, errors counted as failures: p < alpha, and B's rate below A's)."""
INTERRUPTED: Final = 130
"""Interrupted (Ctrl-C)."""
BROKEN_PIPE: Final = 141
"""stdout was closed before everything was written (e.g. ``| head``)."""

RUNS = ("eval", "play", "submit --follow", "resume --follow", "verify-invariance")
"""The commands whose exit code is a run's (or play's episode's) outcome."""
ALL = (*RUNS, "compare")


@dataclass(frozen=True)
class ExitCode:
    """One row of the table: a code, what it means, and the commands that exit with it."""

    code: str
    meaning: str
    commands: tuple[str, ...] = ALL


TABLE: Final = (
    ExitCode(
        str(OK),
        "the run completed and every episode has a verdict (play: the episode completed; "
        "compare: no regression)",
    ),
    ExitCode(
        str(USAGE),
        "bad input: usage, validation, unknown graph, task or run (message, no traceback)",
    ),
    ExitCode(
        str(RUN_FAILED),
        "the run failed (e.g. --max-errors exceeded, could not start), was cancelled or "
        "aborted (play: the episode could not start)",
        RUNS,
    ),
    ExitCode(
        str(EPISODE_ERRORS),
        "the run completed but some episodes ended in error, exception, timeout or "
        "no_verdict (play: the episode did)",
        RUNS,
    ),
    ExitCode(
        str(NOT_INVARIANT),
        "verify-invariance: records differ between worker counts",
        ("verify-invariance",),
    ),
    ExitCode(
        str(REGRESSION),
        "compare --fail-on-regression: B is significantly worse than A (exact McNemar test, "
        "errors as failures: p < --alpha and B's success rate below A's)",
        ("compare",),
    ),
    ExitCode(f"{INTERRUPTED}", "interrupted (Ctrl-C)"),
    ExitCode(f"{BROKEN_PIPE}", "stdout closed early (e.g. | head)"),
)


def epilog(command: str | None) -> str:
    """The exit-code table for ``command`` (its rows only), or every row for None."""
    rows = [row for row in TABLE if command is None or command in row.commands]
    head = "exit codes:" if command else f"exit codes of {', '.join(ALL)}:"
    lines = [head]
    for row in rows:
        lines.append(f"  {row.code:<5}{row.meaning}")
    return _wrapped(lines)


def _wrapped(lines: list[str], width: int = 92) -> str:
    """Lines longer than ``width`` continued under their meaning's first column."""
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        out.extend(textwrap.wrap(line, width, subsequent_indent=" " * 7))
    return "\n".join(out)


def for_run(status: str, verdict: str) -> int:
    """The exit code of a finished run with ``status`` and health ``verdict``."""
    if status != "completed":
        return RUN_FAILED
    return EPISODE_ERRORS if verdict != "clean" else OK
