"""Waiting for a condition with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEFAULT_DEADLINE_S = 120.0
POLL_S = 0.05


def poll_until(
    check: Callable[[], T | None],
    what: str,
    deadline_s: float = DEFAULT_DEADLINE_S,
    *,
    explain: Callable[[], str] | None = None,
) -> T:
    """Call ``check`` until it returns something other than None/False; fail at the deadline,
    with what ``explain`` says then (a run's logs, say) below the message."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"gave up after {deadline_s:g} s waiting for {what}{detail}")
        time.sleep(POLL_S)
