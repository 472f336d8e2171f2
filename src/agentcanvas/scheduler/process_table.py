"""The host's parent → children links, from one process-table scan shared for a moment.

Finding a process's descendants means reading every process's parent (psutil's
``children(recursive=True)`` scans the whole process table on each call). A scheduler that
follows many runs' process trees each tick shares one scan among them instead.
"""

from __future__ import annotations

import math
import time

import psutil

__all__ = ["PROCESS_TABLE", "ProcessTable"]


class ProcessTable:
    """Parent → children links of the host's processes, from one scan reused for ``ttl_s``."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._scanned_at = -math.inf
        self._children: dict[int, list[psutil.Process]] = {}

    def descendants(self, pid: int, newer_than: float = -math.inf) -> list[psutil.Process]:
        """Children, grandchildren, … of ``pid`` as of the latest scan; a scan taken before
        ``newer_than`` (a ``time.monotonic()`` reading) is never used."""
        now = time.monotonic()
        if now - self._scanned_at >= self._ttl_s or self._scanned_at < newer_than:
            self._scan()
            self._scanned_at = now
        found: list[psutil.Process] = []
        seen = {pid}  # a scan is not atomic: a reused pid must not make a loop
        stack = [pid]
        while stack:
            for child in self._children.get(stack.pop(), []):
                if child.pid not in seen:
                    seen.add(child.pid)
                    found.append(child)
                    stack.append(child.pid)
        return found

    def _scan(self) -> None:
        children: dict[int, list[psutil.Process]] = {}
        for proc in psutil.process_iter(["ppid"]):
            ppid = proc.info.get("ppid")
            if ppid is not None and ppid != proc.pid:
                children.setdefault(ppid, []).append(proc)
        self._children = children


PROCESS_TABLE = ProcessTable(ttl_s=0.25)
"""Shared by every ``ProcessTreeMonitor`` of this process."""
