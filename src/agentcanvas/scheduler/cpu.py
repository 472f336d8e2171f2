"""CPU as an admission resource: slots (cores × oversubscription) and the cores in use.

A run's CPU need is its processes (the eval process and one env server per worker); the
scheduler holds that many slots for it while it runs. ``CpuSampler`` reads how busy the host
is and how busy a set of processes is, as rates of psutil's CPU times, and is a
``resources.ResourceSampler`` like the memory samplers (its figures are slots, not MB).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Collection

import psutil

from agentcanvas.scheduler.resources import ResourceKind, ResourceSample

__all__ = [
    "CPU_RATE_WINDOW_S",
    "DEFAULT_CPU_OVERSUBSCRIPTION",
    "CpuSampler",
    "cpu_cores",
    "run_cpu_slots",
]

DEFAULT_CPU_OVERSUBSCRIPTION = 2.0
"""CPU slots per core: runs wait for servers and disks, so a core carries more than one."""
CPU_RATE_WINDOW_S = 0.5
"""CPU use is a rate over at least this long: the scheduler samples several times a tick."""


def run_cpu_slots(worker_count: int) -> float:
    """The slots a run holds: its eval process and one env server per worker."""
    return 1.0 + worker_count


def cpu_cores() -> int:
    """Cores this process may run on (its affinity where the OS tells, else all)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class _Rate:
    """d(value)/d(time) over a window of at least ``window_s``; 0 until the first window."""

    def __init__(self, value: float, now: float, window_s: float) -> None:
        self._since = (now, value)
        self._window_s = window_s
        self.rate = 0.0

    def update(self, value: float, now: float) -> float:
        since_t, since_v = self._since
        if now - since_t >= self._window_s:
            self.rate = max(0.0, (value - since_v) / (now - since_t))
            self._since = (now, value)
        return self.rate


class CpuSampler:
    """CPU in slots: ``cores × oversubscription`` in total, minus the busy cores measured.

    Busy cores (host-wide) and a process's use are rates of psutil's CPU times over a window
    of at least ``CPU_RATE_WINDOW_S``, so samples taken close together agree.
    """

    resource: ResourceKind = "cpu"

    def __init__(
        self,
        oversubscription: float = DEFAULT_CPU_OVERSUBSCRIPTION,
        cores: int | None = None,
        window_s: float = CPU_RATE_WINDOW_S,
    ) -> None:
        if not math.isfinite(oversubscription) or oversubscription <= 0:
            raise ValueError(f"oversubscription must be > 0, got {oversubscription!r}")
        self.cores = cores or cpu_cores()
        self.slots = self.cores * oversubscription
        self._window_s = window_s
        self._busy = _Rate(_busy_cpu_s(), time.monotonic(), window_s)
        self._procs: dict[int, tuple[psutil.Process, _Rate]] = {}

    def sample(self) -> ResourceSample:
        """Total slots, and the slots left after the host's busy cores."""
        self._forget_dead()
        busy = min(self._busy.update(_busy_cpu_s(), time.monotonic()), float(self.cores))
        return ResourceSample("cpu", self.slots, max(0.0, self.slots - busy), "host")

    def process_usage_mb(self, pids: Collection[int]) -> float:
        """Cores the given processes kept busy lately (0 for one seen for the first time)."""
        now = time.monotonic()
        return sum(self._process_rate(pid, now) for pid in set(pids))

    def _forget_dead(self) -> None:
        for pid, (proc, _) in list(self._procs.items()):
            if not _running(proc):
                del self._procs[pid]

    def _process_rate(self, pid: int, now: float) -> float:
        known = self._procs.get(pid)
        try:
            if known is None or not known[0].is_running():  # is_running guards pid reuse
                proc = psutil.Process(pid)
                known = (proc, _Rate(_cpu_s(proc), now, self._window_s))
                self._procs[pid] = known
                return 0.0
            return known[1].update(_cpu_s(known[0]), now)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            self._procs.pop(pid, None)
            return 0.0


def _running(proc: psutil.Process) -> bool:
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _busy_cpu_s() -> float:
    """Host-wide CPU seconds spent not idle (all cores together)."""
    times = psutil.cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    guest = getattr(times, "guest", 0.0) + getattr(times, "guest_nice", 0.0)  # inside user
    return float(sum(times) - idle - guest)
