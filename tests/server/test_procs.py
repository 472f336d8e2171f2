"""Child process hygiene, tested with real subprocesses."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

import agentcanvas
from agentcanvas.errors import ServerDiedError, ServerError, StateError
from agentcanvas.server import procs
from agentcanvas.server.procs import ChildProcess, ChildState, spawn

SRC_DIR = Path(agentcanvas.__file__).resolve().parent.parent
READY_TIMEOUT_S = 30.0  # generous: only a broken child ever waits this long
GONE_TIMEOUT_S = 10.0

# Each child imports procs the way a node-set server would.
PRELUDE = """
import os, signal, socket, subprocess, sys, time
from agentcanvas.server import procs
"""


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC_DIR), env.get("PYTHONPATH")) if p)
    return env


def script(tmp_path: Path, name: str, body: str) -> list[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(PRELUDE + textwrap.dedent(body))
    return [sys.executable, str(path)]


def pid_gone(pid: int) -> bool:
    """True when `pid` no longer runs; an unreaped zombie counts as gone."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.02)


@pytest.fixture
def children() -> Iterator[list[ChildProcess]]:
    """Children a test spawns; whatever a failing test leaves running is stopped here."""
    spawned: list[ChildProcess] = []
    yield spawned
    for child in spawned:
        child.close_sync(term_timeout_s=1.0)


def start(
    children: list[ChildProcess],
    argv: list[str],
    *,
    stdout_path: Path | None = None,
    stderr_path: Path | None = None,
    new_session: bool = False,
) -> ChildProcess:
    child = spawn(
        argv,
        env=child_env(),
        stdout_path=stdout_path,
        stderr_path=stderr_path,
        new_session=new_session,
    )
    children.append(child)
    return child


SERVER = """
procs.set_parent_death_signal()
sock = socket.create_server(("127.0.0.1", 0))
procs.child_report_ready({"port": sock.getsockname()[1], "pid": os.getpid()})
while True:
    conn, _ = sock.accept()
    conn.sendall(b"hello")
    conn.close()
"""


async def test_ready_handshake_delivers_port(tmp_path: Path, children: list[ChildProcess]) -> None:
    child = start(children, script(tmp_path, "server", SERVER))
    assert child.state is ChildState.STARTING

    info = await child.wait_ready(READY_TIMEOUT_S)

    assert info["pid"] == child.pid
    assert child.state is ChildState.READY and child.is_alive()
    with socket.create_connection(("127.0.0.1", info["port"]), timeout=5) as conn:
        assert conn.recv(5) == b"hello"
    assert await child.aclose() == -signal.SIGTERM
    assert child.state is ChildState.EXITED and not child.is_alive()


async def test_child_that_exits_before_ready_raises_died_with_stderr_tail(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    stderr_path = tmp_path / "stderr.log"
    argv = script(tmp_path, "crasher", 'raise RuntimeError("model weights are missing")')
    child = start(children, argv, stderr_path=stderr_path)

    with pytest.raises(ServerDiedError) as caught:
        await child.wait_ready(READY_TIMEOUT_S)

    message = str(caught.value)
    assert "RuntimeError: model weights are missing" in message
    assert "crasher.py" in message and "before ready" in message
    assert child.state is ChildState.EXITED and child.returncode == 1
    assert await child.aclose() == 1


async def test_child_that_never_reports_times_out(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    child = start(children, script(tmp_path, "sleeper", "time.sleep(600)"))

    started = time.monotonic()
    with pytest.raises(ServerError, match=r"not ready after 1 s") as caught:
        await child.wait_ready(1.0)

    assert not isinstance(caught.value, ServerDiedError)
    assert 0.9 < time.monotonic() - started < 10
    assert child.is_alive()  # left for the caller to stop
    assert await child.aclose() == -signal.SIGTERM


async def test_child_that_closes_pipe_without_report_dies_later(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    body = 'os.close(int(os.environ[procs.READY_FD_ENV])); time.sleep(0.3); sys.exit("bye")'
    child = start(children, script(tmp_path, "quitter", body), stderr_path=tmp_path / "e.log")

    with pytest.raises(ServerDiedError, match="bye"):
        await child.wait_ready(READY_TIMEOUT_S)


IGNORES_SIGTERM = """
signal.signal(signal.SIGTERM, signal.SIG_IGN)
procs.child_report_ready({})
while True:
    time.sleep(1)
"""


async def test_aclose_kills_child_that_ignores_sigterm(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    child = start(children, script(tmp_path, "stubborn", IGNORES_SIGTERM))
    await child.wait_ready(READY_TIMEOUT_S)

    started = time.monotonic()
    returncode = await child.aclose(term_timeout_s=0.5)

    assert returncode == -signal.SIGKILL
    assert time.monotonic() - started >= 0.5
    assert child.state is ChildState.EXITED
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # reaped: no zombie left behind


async def test_aclose_finishes_cleanup_when_cancelled(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    child = start(children, script(tmp_path, "stubborn", IGNORES_SIGTERM))
    await child.wait_ready(READY_TIMEOUT_S)

    closing = asyncio.ensure_future(child.aclose(term_timeout_s=0.5))
    deadline = time.monotonic() + GONE_TIMEOUT_S
    while child.state is not ChildState.STOPPING:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    closing.cancel()

    with pytest.raises(asyncio.CancelledError):
        await closing
    assert child.state is ChildState.EXITED  # cleanup ran to the end before re-raising
    assert child.returncode == -signal.SIGKILL


async def test_closing_twice_is_harmless(tmp_path: Path, children: list[ChildProcess]) -> None:
    child = start(children, script(tmp_path, "server", SERVER))
    await child.wait_ready(READY_TIMEOUT_S)

    first, second = await asyncio.gather(child.aclose(), child.aclose())

    assert first == second == -signal.SIGTERM
    assert await child.aclose() == -signal.SIGTERM
    assert child.close_sync() == -signal.SIGTERM


def test_close_sync_stops_child(tmp_path: Path, children: list[ChildProcess]) -> None:
    child = start(children, script(tmp_path, "stubborn", IGNORES_SIGTERM))
    asyncio.run(child.wait_ready(READY_TIMEOUT_S))

    assert child.close_sync(term_timeout_s=0.2) == -signal.SIGKILL
    assert child.state is ChildState.EXITED


async def test_wait_ready_in_wrong_state_is_a_state_error(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    child = start(children, script(tmp_path, "server", SERVER))
    await child.wait_ready(READY_TIMEOUT_S)

    with pytest.raises(StateError, match="ready"):
        await child.wait_ready(1.0)
    await child.aclose()
    with pytest.raises(StateError, match="exited"):
        await child.wait_ready(1.0)


async def test_new_session_close_kills_whole_group(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    body = """
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    grandchild = subprocess.Popen([sys.executable, "-c", stubborn])
    procs.child_report_ready({"grandchild_pid": grandchild.pid})
    time.sleep(600)
    """
    child = start(children, script(tmp_path, "leader", body), new_session=True)
    info = await child.wait_ready(READY_TIMEOUT_S)
    grandchild_pid = info["grandchild_pid"]
    assert isinstance(grandchild_pid, int)
    assert procs.descendants_alive(child.pid) == [grandchild_pid]

    assert await child.aclose(term_timeout_s=2.0) == -signal.SIGTERM

    wait_until(lambda: pid_gone(grandchild_pid), GONE_TIMEOUT_S, "the group straggler to die")


async def test_stdout_and_stderr_are_appended_to_files(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    out_path, err_path = tmp_path / "out.log", tmp_path / "err.log"
    out_path.write_text("earlier run\n")
    body = 'print("to stdout"); print("to stderr", file=sys.stderr)'
    child = start(
        children, script(tmp_path, "printer", body), stdout_path=out_path, stderr_path=err_path
    )

    with pytest.raises(ServerDiedError):
        await child.wait_ready(READY_TIMEOUT_S)
    assert out_path.read_text() == "earlier run\nto stdout\n"
    assert err_path.read_text() == "to stderr\n"


def test_spawn_of_missing_program_is_a_server_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="could not start"):
        spawn([str(tmp_path / "no-such-program")])


INTERMEDIATE = """
import asyncio

async def start_grandchild():
    grandchild = procs.spawn([sys.executable, sys.argv[1]])
    await grandchild.wait_ready(30.0)
    return grandchild.pid

pid = asyncio.run(start_grandchild())  # spawned from the main thread, which lives on
procs.child_report_ready({"grandchild_pid": pid})
while True:
    time.sleep(1)
"""

GRANDCHILD = """
procs.set_parent_death_signal()
procs.child_report_ready({})
while True:
    time.sleep(1)
"""


async def test_grandchild_dies_with_its_parent(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    grandchild_argv = script(tmp_path, "grandchild", GRANDCHILD)
    argv = [*script(tmp_path, "intermediate", INTERMEDIATE), grandchild_argv[1]]
    intermediate = start(children, argv)
    info = await intermediate.wait_ready(READY_TIMEOUT_S)
    grandchild_pid = info["grandchild_pid"]
    assert isinstance(grandchild_pid, int)
    assert procs.descendants_alive(intermediate.pid) == [grandchild_pid]

    os.kill(intermediate.pid, signal.SIGKILL)

    wait_until(lambda: pid_gone(grandchild_pid), GONE_TIMEOUT_S, "the orphan to get SIGTERM")
    assert await intermediate.aclose() == -signal.SIGKILL


def test_death_signal_exits_at_once_when_parent_already_gone(tmp_path: Path) -> None:
    argv = script(tmp_path, "orphan", 'procs.set_parent_death_signal(); print("survived")')
    env = child_env() | {procs.PARENT_PID_ENV: "1"}  # not our parent: as if it had died

    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30)

    assert done.returncode == 1
    assert "survived" not in done.stdout
    assert "parent 1 is gone" in done.stderr


def test_report_ready_without_pipe_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(procs.READY_FD_ENV, raising=False)
    procs.child_report_ready({"port": 1})


def test_descendants_of_missing_pid_is_empty() -> None:
    finished = subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert finished.returncode == 0
    assert procs.descendants_alive(2**22 + 12345) == []
