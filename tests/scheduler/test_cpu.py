"""CpuSampler against real processes: slots, the host's busy cores, a process tree's use."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from agentcanvas.scheduler.cpu import CpuSampler, cpu_cores, run_cpu_slots
from agentcanvas.scheduler.resources import ProcessTreeMonitor, RamSampler
from agentcanvas.scheduler.samplers import default_samplers
from support.polling import poll_until

SPIN = "while True: pass"
IDLE = "import sys; sys.stdin.read()"


Start = Callable[[str], "subprocess.Popen[bytes]"]


@pytest.fixture
def child() -> Iterator[Start]:
    """Starts ``python -c CODE`` children; kills them after the test."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(code: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(10)


def test_slots_are_cores_times_oversubscription() -> None:
    sampler = CpuSampler(oversubscription=1.5, cores=4)

    sample = sampler.sample()

    assert (sample.resource, sample.total_mb, sample.device) == ("cpu", 6.0, "host")
    assert 6.0 - 4.0 <= sample.free_mb <= 6.0  # at most every core busy
    assert CpuSampler().slots == 2.0 * cpu_cores()
    assert run_cpu_slots(3) == 4.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_oversubscription_must_be_a_positive_number(bad: float) -> None:
    with pytest.raises(ValueError, match="oversubscription"):
        CpuSampler(oversubscription=bad)


def test_a_spinning_process_is_seen_busy_and_an_idle_one_is_not(child: Start) -> None:
    spinning, idle = child(SPIN), child(IDLE)
    sampler = CpuSampler(window_s=0.2)

    assert sampler.process_usage_mb([spinning.pid]) == 0.0  # first sight: no window yet
    # A spinning process keeps about one core busy (less on a host shared with others).
    poll_until(
        lambda: sampler.process_usage_mb([spinning.pid]) > 0.2,
        "the spinning child to show CPU use",
        20.0,
    )
    assert sampler.process_usage_mb([spinning.pid]) <= 1.2
    sampler.process_usage_mb([idle.pid])
    poll_until(
        lambda: sampler.process_usage_mb([idle.pid]) < 0.05 or None, "the idle child's rate", 5.0
    )


def test_readings_of_several_trees_do_not_reset_each_other(child: Start) -> None:
    # The scheduler asks about each running job's tree in turn, from one sampler.
    first, second = child(SPIN), child(SPIN)
    sampler = CpuSampler(window_s=0.2)

    def both_busy() -> bool:
        return (
            min(sampler.process_usage_mb([first.pid]), sampler.process_usage_mb([second.pid])) > 0.1
        )

    poll_until(both_busy, "both spinning children to show CPU use", 20.0)


def test_a_vanished_process_counts_as_nothing(child: Start) -> None:
    gone = child(SPIN)
    sampler = CpuSampler(window_s=0.1)
    sampler.process_usage_mb([gone.pid])
    gone.kill()
    gone.wait(10)

    assert sampler.process_usage_mb([gone.pid]) == 0.0


def test_the_tree_monitor_reads_cpu_next_to_memory(child: Start) -> None:
    spinning = child(SPIN)
    monitor = ProcessTreeMonitor(spinning.pid, [RamSampler(), CpuSampler(window_s=0.1)])

    poll_until(lambda: monitor.poll().get("cpu", 0.0) > 0.2, "CPU use of the tree", 20.0)

    assert set(monitor.peaks_mb()) == {"ram", "cpu"}


def test_default_samplers_take_the_oversubscription() -> None:
    cpu = next(s for s in default_samplers(cpu_oversubscription=0.5) if s.resource == "cpu")

    assert isinstance(cpu, CpuSampler) and cpu.slots == 0.5 * cpu_cores()
