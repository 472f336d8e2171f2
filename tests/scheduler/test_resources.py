"""RAM/VRAM samplers and the process-tree monitor, against real child processes."""

from __future__ import annotations

import select
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psutil
import pytest

from agentcanvas.errors import ConfigError
from agentcanvas.scheduler.resources import (
    FAKE_VRAM_ENV,
    FakeVramSampler,
    NvmlVramSampler,
    ProcessTreeMonitor,
    RamSampler,
)
from agentcanvas.scheduler.samplers import default_samplers

CHILD_MB = 200
GRANDCHILD_MB = 100
# RSS of an idle interpreter plus allocator slack; generous so CI noise never flakes.
INTERPRETER_OVERHEAD_MB = 120.0
DEADLINE_S = 20.0

# Allocates argv[1] MB (every page written), optionally spawns a grandchild allocating
# argv[2] MB, prints "ready <pid> <grandchild_pid>", then lives until stdin closes.
_ALLOCATOR = r"""
import subprocess, sys
mb, grandchild_mb = int(sys.argv[1]), int(sys.argv[2])
buf = b"\x01" * (mb << 20)
grandchild_pid = 0
if grandchild_mb:
    g = subprocess.Popen([sys.executable, "-c", sys.argv[3], str(grandchild_mb), "0", sys.argv[3]],
                         stdout=subprocess.PIPE, text=True)
    g.stdout.readline()
    grandchild_pid = g.pid
print("ready", __import__("os").getpid(), grandchild_pid, flush=True)
sys.stdin.read()
"""


@dataclass
class Allocator:
    """A running allocator child and, optionally, its grandchild."""

    proc: subprocess.Popen[str]
    grandchild_pid: int


def _readline(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready:
        raise TimeoutError(f"no line from pid {proc.pid} within {timeout_s} s")
    return proc.stdout.readline()


def _spawn(mb: int, grandchild_mb: int = 0) -> Allocator:
    proc = subprocess.Popen(
        [sys.executable, "-c", _ALLOCATOR, str(mb), str(grandchild_mb), _ALLOCATOR],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    line = _readline(proc, DEADLINE_S).split()
    assert line[:2] == ["ready", str(proc.pid)], line
    return Allocator(proc, int(line[2]))


def _stop(alloc: Allocator) -> None:
    """Close stdin so both generations exit; kill whatever is left after a deadline."""
    if alloc.proc.stdin is not None and not alloc.proc.stdin.closed:
        alloc.proc.stdin.close()
    try:
        alloc.proc.wait(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        alloc.proc.kill()
        alloc.proc.wait(timeout=DEADLINE_S)
    if alloc.grandchild_pid:
        _kill_pid(alloc.grandchild_pid)
    if alloc.proc.stdout is not None:
        alloc.proc.stdout.close()


def _kill_pid(pid: int) -> None:
    """Kill a process that may not be our child; done once it is gone or a zombie."""
    try:
        proc = psutil.Process(pid)
        proc.kill()
    except psutil.NoSuchProcess:
        return
    _wait_until(lambda: _gone_or_zombie(proc), f"pid {pid} to die")


def _gone_or_zombie(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def allocator() -> Iterator[Callable[..., Allocator]]:
    started: list[Allocator] = []

    def start(mb: int, grandchild_mb: int = 0) -> Allocator:
        started.append(_spawn(mb, grandchild_mb))
        return started[-1]

    yield start
    for alloc in started:
        _stop(alloc)


def _wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=DEADLINE_S)
    return proc.pid


# --- RAM -----------------------------------------------------------------------------------


def test_ram_sample_reports_host_memory() -> None:
    sample = RamSampler().sample()
    assert sample.resource == "ram"
    assert sample.device == "host"
    assert 0 < sample.free_mb <= sample.total_mb


def test_ram_process_usage_sees_child_allocation(allocator: Callable[..., Allocator]) -> None:
    child = allocator(CHILD_MB)
    usage = RamSampler().process_usage_mb([child.proc.pid])
    assert CHILD_MB * 0.95 <= usage <= CHILD_MB + INTERPRETER_OVERHEAD_MB


def test_ram_process_usage_ignores_vanished_pids(allocator: Callable[..., Allocator]) -> None:
    child = allocator(CHILD_MB)
    sampler = RamSampler()
    alone = sampler.process_usage_mb([child.proc.pid])
    with_dead = sampler.process_usage_mb([child.proc.pid, _dead_pid()])
    assert abs(with_dead - alone) < 20.0
    assert sampler.process_usage_mb([_dead_pid()]) == 0.0


# --- process tree --------------------------------------------------------------------------


def test_tree_monitor_peak_counts_grandchild(allocator: Callable[..., Allocator]) -> None:
    tree = allocator(CHILD_MB, GRANDCHILD_MB)
    monitor = ProcessTreeMonitor(tree.proc.pid, [RamSampler()])
    expected_mb = CHILD_MB + GRANDCHILD_MB

    assert monitor.tree_pids() == {tree.proc.pid, tree.grandchild_pid}
    monitor.poll()
    peak = monitor.peaks_mb()["ram"]
    assert expected_mb * 0.95 <= peak <= expected_mb + 2 * INTERPRETER_OVERHEAD_MB
    assert monitor.n_polls == 1


def test_tree_monitor_keeps_peak_after_tree_shrinks(allocator: Callable[..., Allocator]) -> None:
    tree = allocator(CHILD_MB, GRANDCHILD_MB)
    monitor = ProcessTreeMonitor(tree.proc.pid, [RamSampler()])
    full = monitor.poll()["ram"]

    _kill_pid(tree.grandchild_pid)
    _wait_until(lambda: monitor.tree_pids() == {tree.proc.pid}, "grandchild to leave the tree")
    shrunk = monitor.poll()["ram"]

    assert shrunk < full - GRANDCHILD_MB * 0.9
    assert monitor.peaks_mb()["ram"] == full


def test_tree_monitor_tracks_orphaned_grandchild(allocator: Callable[..., Allocator]) -> None:
    tree = allocator(CHILD_MB, GRANDCHILD_MB)
    monitor = ProcessTreeMonitor(tree.proc.pid, [RamSampler()])
    monitor.poll()

    tree.proc.kill()
    tree.proc.wait(timeout=DEADLINE_S)
    # The grandchild now belongs to init, yet it is the run's memory until it exits.
    assert monitor.tree_pids() == {tree.grandchild_pid}
    usage = monitor.poll()["ram"]
    assert GRANDCHILD_MB * 0.95 <= usage <= GRANDCHILD_MB + INTERPRETER_OVERHEAD_MB


def test_tree_monitor_with_missing_root_measures_nothing() -> None:
    monitor = ProcessTreeMonitor(_dead_pid(), [RamSampler(), FakeVramSampler(1000.0)])
    assert monitor.poll() == {}
    assert monitor.peaks_mb() == {}


def test_tree_monitor_reads_vram_of_descendants(allocator: Callable[..., Allocator]) -> None:
    tree = allocator(1, 1)
    vram = FakeVramSampler(16_000.0)
    vram.set_usage(tree.grandchild_pid, 3_000.0)
    monitor = ProcessTreeMonitor(tree.proc.pid, [RamSampler(), vram])

    assert monitor.poll()["vram"] == 3_000.0
    assert set(monitor.peaks_mb()) == {"ram", "vram"}


# --- fake VRAM -----------------------------------------------------------------------------


def test_fake_vram_frees_memory_when_process_dies(allocator: Callable[..., Allocator]) -> None:
    child = allocator(1)
    vram = FakeVramSampler(8_000.0)
    vram.set_usage(child.proc.pid, 2_500.0)
    assert vram.sample().free_mb == 5_500.0
    assert vram.process_usage_mb([child.proc.pid]) == 2_500.0

    child.proc.kill()  # not reaped yet: a zombie holds no device memory
    _wait_until(lambda: vram.sample().free_mb == 8_000.0, "the killed child's VRAM to be freed")
    assert vram.process_usage_mb([child.proc.pid]) == 0.0
    child.proc.wait(timeout=DEADLINE_S)


def test_fake_vram_set_usage_zero_forgets_pid(allocator: Callable[..., Allocator]) -> None:
    child = allocator(1)
    vram = FakeVramSampler(1_000.0, device="fake:3")
    vram.set_usage(child.proc.pid, 400.0)
    vram.set_usage(child.proc.pid, 0.0)
    sample = vram.sample()
    assert (sample.resource, sample.device, sample.free_mb) == ("vram", "fake:3", 1_000.0)


def test_fake_vram_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        FakeVramSampler(0.0)
    with pytest.raises(ValueError):
        FakeVramSampler(100.0).set_usage(1, -5.0)


# --- NVML ----------------------------------------------------------------------------------


def test_nvml_sampler_degrades_without_gpu() -> None:
    if NvmlVramSampler.available():
        pytest.skip("a GPU is present; covered by test_nvml_sampler_reads_a_real_gpu")
    sampler = NvmlVramSampler()
    assert sampler.sample() is None
    assert sampler.sample() is None  # a failed init is remembered, not retried noisily
    assert sampler.process_usage_mb([1]) is None
    sampler.close()
    sampler.close()


def test_nvml_sampler_reads_a_real_gpu() -> None:
    if not NvmlVramSampler.available():
        pytest.skip("no GPU/NVML on this machine")
    sampler = NvmlVramSampler()
    try:
        sample = sampler.sample()
        assert sample is not None
        assert 0 <= sample.free_mb <= sample.total_mb
        assert sampler.process_usage_mb([_dead_pid()]) == 0.0
    finally:
        sampler.close()


class _FakeNvml(types.ModuleType):
    """A stand-in ``pynvml`` module: NVML cannot exist on a GPU-less machine."""

    class NVMLError(Exception):
        pass

    def __init__(self, procs: list[Any]) -> None:
        super().__init__("pynvml")
        self.procs = procs
        self.n_init = 0
        self.n_shutdown = 0

    def nvmlInit(self) -> None:
        self.n_init += 1

    def nvmlShutdown(self) -> None:
        self.n_shutdown += 1

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        if index != 0:
            raise self.NVMLError("Invalid Argument")
        return object()

    def nvmlDeviceGetMemoryInfo(self, handle: object) -> Any:
        return types.SimpleNamespace(total=80 << 30, free=60 << 30, used=20 << 30)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: object) -> list[Any]:
        return self.procs

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: object) -> list[Any]:
        return self.procs[:1]


def _nvml_proc(pid: int, used_mb: int | None) -> Any:
    return types.SimpleNamespace(pid=pid, usedGpuMemory=None if used_mb is None else used_mb << 20)


def test_nvml_sampler_with_gpu_present(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeNvml([_nvml_proc(10, 1_000), _nvml_proc(11, 500), _nvml_proc(12, 7)])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert NvmlVramSampler.available()

    sampler = NvmlVramSampler()
    sample = sampler.sample()
    assert sample is not None
    assert (sample.device, sample.total_mb, sample.free_mb) == ("cuda:0", 80 * 1024, 60 * 1024)
    # pid 10 is listed as compute and graphics: one context, counted once.
    assert sampler.process_usage_mb([10, 11, 99]) == 1_500.0
    assert sampler.process_usage_mb([99]) == 0.0
    sampler.close()
    sampler.close()
    assert fake.n_shutdown == fake.n_init == 2  # one for available(), one for the sampler


def test_nvml_sampler_unknown_usage_and_missing_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml([_nvml_proc(10, None)]))
    assert NvmlVramSampler().process_usage_mb([10]) is None
    assert NvmlVramSampler(device_index=3).sample() is None


# --- default_samplers ----------------------------------------------------------------------


def test_default_samplers_use_fake_vram_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAKE_VRAM_ENV, "24000")
    ram, cpu, vram = default_samplers()
    assert isinstance(ram, RamSampler)
    assert cpu.resource == "cpu"
    assert isinstance(vram, FakeVramSampler)
    assert vram.sample().total_mb == 24_000.0


def test_default_samplers_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAKE_VRAM_ENV, raising=False)
    samplers = default_samplers()
    assert [s.resource for s in samplers] == (
        ["ram", "cpu", "vram"] if NvmlVramSampler.available() else ["ram", "cpu"]
    )


@pytest.mark.parametrize("raw", ["lots", "-1", "nan"])
def test_default_samplers_reject_bad_env(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(FAKE_VRAM_ENV, raw)
    with pytest.raises(ConfigError, match=FAKE_VRAM_ENV):
        default_samplers()
