"""Exit codes of ``agentcanvas`` (also in the README and ``agentcanvas --help``).

A run that had errors never exits like a clean one.
"""

from __future__ import annotations

from typing import Final

__all__ = ["EPILOG", "for_run"]

OK: Final = 0
"""eval/submit --follow: the run completed and every episode has a verdict; play: the
episode completed; verify-invariance: identical records and every episode has a verdict."""
USAGE: Final = 1
"""Bad input: usage, validation, an unknown graph or task, a refused config (a message on
stderr, no traceback); submit: the backend refused the run or cannot be reached."""
RUN_FAILED: Final = 2
"""The run failed (e.g. ``--max-errors`` exceeded, or it could not start), was cancelled
or aborted."""
EPISODE_ERRORS: Final = 3
"""The run completed, but some episodes ended in error, exception, timeout or no_verdict
(play: the episode did)."""
NOT_INVARIANT: Final = 4
"""verify-invariance: the records differ between worker counts."""
INTERRUPTED: Final = 130
"""Interrupted (Ctrl-C)."""
BROKEN_PIPE: Final = 141
"""stdout was closed before everything was written (e.g. ``| head``)."""

EPILOG = f"""exit codes:
  {OK}    the run completed and every episode has a verdict (play: the episode completed)
  {USAGE}    bad input: usage, validation, unknown graph or task (message, no traceback)
  {RUN_FAILED}    the run failed (e.g. --max-errors exceeded, could not start), was cancelled
       or aborted
  {EPISODE_ERRORS}    the run completed but some episodes ended in error, exception, timeout or
       no_verdict (play: the episode did)
  {NOT_INVARIANT}    verify-invariance: records differ between worker counts
  {INTERRUPTED}  interrupted; {BROKEN_PIPE}: stdout closed early (e.g. | head)"""


def for_run(status: str, verdict: str) -> int:
    """The exit code of a finished run with ``status`` and health ``verdict``."""
    if status != "completed":
        return RUN_FAILED
    return EPISODE_ERRORS if verdict != "clean" else OK
