"""Measure free RAM/VRAM/CPU and what a process tree uses.

The scheduler admits a run when its estimate fits what is free now
(``ResourceSampler.sample``), and calibrates memory from the peak a finished run's process
tree used (``ProcessTreeMonitor``). Each resource is behind one ``ResourceSampler`` Protocol:

- ``RamSampler``: host memory through psutil (always available).
- ``CpuSampler``: CPU slots (cores × oversubscription) through psutil (always available).
- ``NvmlVramSampler``: GPU memory through NVML; ``available()`` is False without a GPU.
- ``FakeVramSampler``: an honest stand-in for a GPU on machines without one; memory is
  registered per pid and freed when that process dies, as a real device does.

Memory is in MB; CPU in slots (one busy core is one slot), in the same fields.
``samplers.default_samplers()`` picks them. Setting ``AGENTCANVAS_FAKE_VRAM_MB=<total>`` replaces
NVML with a ``FakeVramSampler`` of that total, for tests and demos without a GPU.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import psutil

from agentcanvas.scheduler.process_table import PROCESS_TABLE

__all__ = [
    "FAKE_VRAM_ENV",
    "FakeVramSampler",
    "NvmlVramSampler",
    "ProcessTreeMonitor",
    "RamSampler",
    "ResourceKind",
    "ResourceSample",
    "ResourceSampler",
]

logger = logging.getLogger(__name__)

ResourceKind = Literal["ram", "vram", "cpu"]

FAKE_VRAM_ENV = "AGENTCANVAS_FAKE_VRAM_MB"
"""Environment knob: total MB of a ``FakeVramSampler`` used instead of NVML."""

_MB = 1024.0 * 1024.0


@dataclass(frozen=True)
class ResourceSample:
    """One reading of a resource: its total and what is free now (MB; slots for ``cpu``)."""

    resource: ResourceKind
    total_mb: float
    free_mb: float
    device: str


class ResourceSampler(Protocol):
    """Reads one resource; ``None`` means it cannot be measured right now."""

    @property
    def resource(self) -> ResourceKind:
        """The resource this sampler measures."""
        ...

    def sample(self) -> ResourceSample | None:
        """Total and free memory now, or ``None`` when unmeasurable."""
        ...

    def process_usage_mb(self, pids: Collection[int]) -> float | None:
        """Memory used by these processes in MB, or ``None`` when unknown."""
        ...


def _is_alive(pid: int) -> bool:
    """True when ``pid`` runs and is not a zombie (a zombie's memory is already freed)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


class RamSampler:
    """Host memory: ``available`` as free, process usage as the sum of RSS."""

    resource: ResourceKind = "ram"

    def sample(self) -> ResourceSample:
        """Total and available host memory."""
        vm = psutil.virtual_memory()
        return ResourceSample("ram", vm.total / _MB, vm.available / _MB, "host")

    def process_usage_mb(self, pids: Collection[int]) -> float:
        """Sum of RSS of the given pids; ones that vanished or are hidden count as 0.

        RSS counts pages shared between processes once per process, so a tree of forked
        workers is over- rather than under-estimated, which errs on the safe side.
        """
        total = 0
        for pid in pids:
            try:
                total += psutil.Process(pid).memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return total / _MB


class NvmlVramSampler:
    """GPU memory of one device through NVML, initialised on first use.

    ``device`` is ``cuda:<index>`` with the NVML index, which equals the CUDA ordinal when
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. Inside a container with its own pid namespace NVML
    reports host pids, so ``process_usage_mb`` may not find the processes and reports 0.
    """

    resource: ResourceKind = "vram"

    def __init__(self, device_index: int = 0) -> None:
        self._device_index = device_index
        self._handle: Any = None
        self._initialised = False
        self._init_failed = False

    @property
    def device(self) -> str:
        """Name of the device this sampler reads."""
        return f"cuda:{self._device_index}"

    @classmethod
    def available(cls) -> bool:
        """True when the NVML library loads and reports at least one GPU; never raises."""
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # NVMLError, OSError, ImportError: no usable library
            return False
        try:
            return int(pynvml.nvmlDeviceGetCount()) > 0
        except (pynvml.NVMLError, OSError):
            return False
        finally:
            _nvml_shutdown_quietly()

    def sample(self) -> ResourceSample | None:
        """Total and free memory of the device, or ``None`` without NVML or a GPU."""
        handle = self._device_handle()
        if handle is None:
            return None
        import pynvml

        try:
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        except (pynvml.NVMLError, OSError) as exc:
            logger.debug("NVML memory query failed: %s", exc)
            return None
        return ResourceSample("vram", info.total / _MB, info.free / _MB, self.device)

    def process_usage_mb(self, pids: Collection[int]) -> float | None:
        """GPU memory of the given pids on this device, ``None`` when NVML can't tell."""
        handle = self._device_handle()
        if handle is None:
            return None
        import pynvml

        try:
            procs = [
                *pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
                *pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
            ]
        except (pynvml.NVMLError, OSError) as exc:
            logger.debug("NVML process query failed: %s", exc)
            return None
        return _sum_process_memory(procs, set(pids))

    def close(self) -> None:
        """Shut NVML down if this sampler initialised it; idempotent."""
        if self._initialised:
            self._initialised = False
            self._handle = None
            _nvml_shutdown_quietly()

    def _device_handle(self) -> Any:
        """The NVML handle of the device, initialising NVML once; ``None`` on failure."""
        if self._handle is not None or self._init_failed:
            return self._handle
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError, OSError, ImportError: no usable library
            logger.debug("NVML unavailable: %s", exc)
            self._init_failed = True
            return None
        self._initialised = True
        try:
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self._device_index)
        except (pynvml.NVMLError, OSError) as exc:
            logger.warning("no GPU at NVML index %d: %s", self._device_index, exc)
            self._init_failed = True
            self.close()
        return self._handle


def _sum_process_memory(procs: Iterable[Any], pids: set[int]) -> float | None:
    """Sum ``usedGpuMemory`` of NVML process entries whose pid is in ``pids``.

    A process listed as both compute and graphics holds one context, so it counts once.
    """
    per_pid: dict[int, int] = {}
    for proc in procs:
        if proc.pid not in pids:
            continue
        used = proc.usedGpuMemory
        if used is None:  # NVML_VALUE_NOT_AVAILABLE, e.g. without permission
            return None
        per_pid[proc.pid] = max(per_pid.get(proc.pid, 0), int(used))
    return sum(per_pid.values()) / _MB


def _nvml_shutdown_quietly() -> None:
    try:
        import pynvml

        pynvml.nvmlShutdown()
    except Exception as exc:  # shutting down must never fail the caller
        logger.debug("nvmlShutdown failed: %s", exc)


class FakeVramSampler:
    """A GPU that exists only in this process: fixed total, usage registered per pid.

    Free memory is the total minus the usage of registered pids that are still alive, so a
    process that dies frees its memory, as on a real device.
    """

    resource: ResourceKind = "vram"

    def __init__(self, total_mb: float, device: str = "fake:0") -> None:
        if not math.isfinite(total_mb) or total_mb <= 0:
            raise ValueError(f"total_mb must be a positive number, got {total_mb!r}")
        self.total_mb = float(total_mb)
        self.device = device
        self._usage_mb: dict[int, float] = {}

    def set_usage(self, pid: int, mb: float) -> None:
        """Register that ``pid`` holds ``mb`` MB on this device (0 forgets it)."""
        if mb < 0:
            raise ValueError(f"usage must be >= 0 MB, got {mb!r}")
        if mb == 0:
            self._usage_mb.pop(pid, None)
        else:
            self._usage_mb[pid] = float(mb)

    def sample(self) -> ResourceSample:
        """Total and what the live registered processes leave free."""
        used = sum(self._live_usage().values())
        return ResourceSample("vram", self.total_mb, max(0.0, self.total_mb - used), self.device)

    def process_usage_mb(self, pids: Collection[int]) -> float:
        """Usage registered for those of ``pids`` that are still alive."""
        live = self._live_usage()
        return sum(live.get(pid, 0.0) for pid in set(pids))

    def _live_usage(self) -> dict[int, float]:
        # Dead pids are forgotten so that a reused pid does not inherit their memory.
        for pid in [p for p in self._usage_mb if not _is_alive(p)]:
            del self._usage_mb[pid]
        return dict(self._usage_mb)


class ProcessTreeMonitor:
    """Tracks the peak memory of a process and all its descendants, one ``poll`` at a time.

    Descendants seen once stay tracked while they live, so a grandchild orphaned by its
    parent's exit is still counted.
    """

    def __init__(self, root_pid: int, samplers: Sequence[ResourceSampler]) -> None:
        self.root_pid = root_pid
        self._samplers = list(samplers)
        self._known: dict[int, psutil.Process] = {}
        self._peaks_mb: dict[str, float] = {}
        self.last_readings: dict[str, float] = {}
        """What the latest ``poll`` read (empty before the first)."""
        self.n_polls = 0
        self._created_at = time.monotonic()  # a shared scan older than this misses our tree
        try:
            self._root: psutil.Process | None = psutil.Process(root_pid)
        except psutil.NoSuchProcess:
            self._root = None

    def tree_pids(self) -> set[int]:
        """Pids of the root and every live descendant seen so far."""
        self._discover()
        alive: set[int] = set()
        for pid, proc in list(self._known.items()):
            if _still_running(proc):
                alive.add(pid)
            else:
                del self._known[pid]
        return alive

    def poll(self) -> dict[str, float]:
        """Measure the tree now, update the peaks, and return this poll's readings."""
        pids = self.tree_pids()
        self.n_polls += 1
        readings: dict[str, float] = {}
        self.last_readings = readings
        if not pids:
            return readings
        for sampler in self._samplers:
            usage = sampler.process_usage_mb(pids)
            if usage is None:
                continue
            readings[sampler.resource] = usage
            self._peaks_mb[sampler.resource] = max(self._peaks_mb.get(sampler.resource, 0.0), usage)
        return readings

    def peaks_mb(self) -> dict[str, float]:
        """Highest usage per resource seen by any poll; a resource never measured is absent."""
        return dict(self._peaks_mb)

    def _discover(self) -> None:
        if self._root is None:
            return
        self._known.setdefault(self._root.pid, self._root)
        for proc in PROCESS_TABLE.descendants(self._root.pid, newer_than=self._created_at):
            self._known.setdefault(proc.pid, proc)


def _still_running(proc: psutil.Process) -> bool:
    """``is_running`` also guards against pid reuse; zombies hold no memory."""
    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
