"""Child process hygiene for node-set servers and eval subprocesses (POSIX).

Parent side: `spawn` starts a child with a *ready pipe*; `ChildProcess.wait_ready` reads the
one JSON line the child reports on it, and `ChildProcess.aclose` / `close_sync` stop the child
with SIGTERM, a deadline, SIGKILL and a reap.

Child side: `set_parent_death_signal` (first thing at start-up) makes the kernel send SIGTERM
when the parent dies; `child_report_ready` (once listening) reports e.g. the bound port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Mapping
from pathlib import Path
from typing import IO

import psutil

from agentcanvas.errors import ServerDiedError, ServerError, StateError

__all__ = [
    "PARENT_PID_ENV",
    "READY_FD_ENV",
    "ChildProcess",
    "ChildState",
    "child_report_ready",
    "descendants_alive",
    "reported_call_endpoint",
    "set_parent_death_signal",
    "spawn",
]

READY_FD_ENV = "AGENTCANVAS_READY_FD"
PARENT_PID_ENV = "AGENTCANVAS_PARENT_PID"

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_EXIT_POLL_S = 0.05  # how often wait_ready checks whether the child died
_MAX_STOP_POLL_S = 0.05  # longest sleep between exit checks while stopping
_KILL_REAP_TIMEOUT_S = 5.0  # after SIGKILL; only a process stuck in the kernel takes longer
_MAX_STDERR_TAIL_LINES = 20
_MAX_ARGV_SUMMARY_CHARS = 200


class ChildState(enum.Enum):
    """Lifecycle of a `ChildProcess`; `_TRANSITIONS` lists the allowed moves."""

    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    EXITED = "exited"


_TRANSITIONS: dict[ChildState, frozenset[ChildState]] = {
    ChildState.STARTING: frozenset({ChildState.READY, ChildState.STOPPING, ChildState.EXITED}),
    ChildState.READY: frozenset({ChildState.STOPPING, ChildState.EXITED}),
    ChildState.STOPPING: frozenset({ChildState.EXITED}),
    ChildState.EXITED: frozenset(),
}


def spawn(
    argv: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdout_path: Path | None = None,
    stderr_path: Path | None = None,
    new_session: bool = False,
) -> ChildProcess:
    """Start `argv` with a ready pipe; the child reports through `child_report_ready`.

    `env` replaces the environment (default: this process's); the ready-pipe and parent-pid
    variables are added to it. stdin is /dev/null; stdout/stderr are appended to the given
    files or inherited. With `new_session` the child leads its own process group, and stopping
    it signals the whole group.

    Call this from a long-lived thread (the main thread or the event loop's thread): Linux
    delivers PR_SET_PDEATHSIG when the *thread* that forked the child exits, not the process,
    so a child spawned from a short-lived worker thread would be killed when that thread ends.
    """
    ready_read_fd, ready_write_fd = os.pipe()
    child_env = dict(os.environ if env is None else env)
    child_env[READY_FD_ENV] = str(ready_write_fd)
    child_env[PARENT_PID_ENV] = str(os.getpid())
    try:
        with _open_log(stdout_path) as stdout, _open_log(stderr_path) as stderr:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                cwd=cwd,
                env=child_env,
                pass_fds=(ready_write_fd,),
                start_new_session=new_session,
            )
    except OSError as exc:
        os.close(ready_read_fd)
        raise ServerError(f"could not start {_summarize(argv)}: {exc}") from exc
    except BaseException:
        os.close(ready_read_fd)
        raise
    finally:
        os.close(ready_write_fd)  # the child holds its copy; EOF then means the child let go
    os.set_blocking(ready_read_fd, False)
    return ChildProcess(
        popen, list(argv), ready_read_fd, stderr_path=stderr_path, new_session=new_session
    )


def _open_log(path: Path | None) -> contextlib.AbstractContextManager[IO[bytes] | None]:
    return open(path, "ab") if path is not None else contextlib.nullcontext()


class ChildProcess:
    """A child started by `spawn`: ready handshake, liveness, and a stop that always reaps."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        argv: list[str],
        ready_fd: int,
        *,
        stderr_path: Path | None,
        new_session: bool,
    ) -> None:
        self._popen = popen
        self._argv = argv
        self._ready_fd: int | None = ready_fd
        self._stderr_path = stderr_path
        self._new_session = new_session
        self._state = ChildState.STARTING
        self._lock = threading.RLock()  # RLock: close_sync may run in a signal handler
        self._closing: asyncio.Task[int | None] | None = None
        self._reading_ready = False  # the ready fd stays open while wait_ready selects on it

    @property
    def pid(self) -> int:
        """Process id of the child."""
        return self._popen.pid

    @property
    def argv(self) -> list[str]:
        """The command line the child was started with."""
        return list(self._argv)

    @property
    def state(self) -> ChildState:
        """Current lifecycle state."""
        return self._state

    @property
    def returncode(self) -> int | None:
        """Exit status once the child has exited (negative: killed by that signal), else None."""
        return self._popen.poll()

    def is_alive(self) -> bool:
        """True while the child has not exited (a zombie not yet reaped counts as exited)."""
        return not self._has_exited()

    def __repr__(self) -> str:
        return f"<ChildProcess pid={self.pid} {self._state.value} {_summarize(self.argv)}>"

    def _transition(self, new: ChildState) -> None:
        with self._lock:
            if new is self._state:
                return
            if new not in _TRANSITIONS[self._state]:
                raise StateError(f"{self!r}: cannot go from {self._state.value} to {new.value}")
            self._state = new
            self._close_ready_fd()

    def _close_ready_fd(self) -> None:
        if self._ready_fd is not None and not self._reading_ready:
            os.close(self._ready_fd)
            self._ready_fd = None

    # --- ready handshake ------------------------------------------------------------------

    async def wait_ready(self, timeout_s: float) -> dict[str, object]:
        """Wait for the child's ready report and return it.

        Raises ServerDiedError if the child exits first and ServerError if `timeout_s` passes
        or the report is not a JSON object; the child is left as it is (call `aclose`).
        """
        if self._state is not ChildState.STARTING or self._ready_fd is None:
            raise StateError(f"{self!r}: wait_ready needs state starting")
        self._reading_ready = True
        try:
            async with asyncio.timeout(timeout_s):
                line = await self._read_ready_line(self._ready_fd)
        except TimeoutError:
            raise ServerError(self._describe(f"not ready after {timeout_s:g} s")) from None
        finally:
            self._reading_ready = False
            if self._state is not ChildState.STARTING:
                self._close_ready_fd()
        try:
            info = json.loads(line)
        except ValueError as exc:
            raise ServerError(self._describe(f"sent a garbled ready line {line!r}")) from exc
        if not isinstance(info, dict):
            raise ServerError(
                self._describe(f"sent a ready report that is not an object: {info!r}")
            )
        self._transition(ChildState.READY)
        return info

    async def _read_ready_line(self, fd: int) -> bytes:
        received = bytearray()
        while b"\n" not in received:
            # Check for exit *before* reading, so a report written just before exit is seen.
            exited = self._popen.poll() is not None
            chunk = _read_nonblocking(fd)
            if chunk:
                received += chunk
                continue
            if exited:
                self._transition(ChildState.EXITED)
                raise ServerDiedError(self._describe(f"exited with {self.returncode} before ready"))
            if chunk == b"":
                # The child closed the pipe without a report but lives on (or a grandchild
                # holds the pipe): keep polling for its exit until the deadline.
                await asyncio.sleep(_EXIT_POLL_S)
                continue
            await _wait_readable(fd, _EXIT_POLL_S)
        return bytes(received.split(b"\n", 1)[0])

    def _describe(self, what: str) -> str:
        message = f"child pid {self.pid} ({_summarize(self.argv)}) {what}"
        tail = _stderr_tail(self._stderr_path)
        return f"{message}\n--- last lines of {self._stderr_path} ---\n{tail}" if tail else message

    # --- stopping -------------------------------------------------------------------------

    async def aclose(self, term_timeout_s: float = 5.0) -> int | None:
        """SIGTERM, wait up to `term_timeout_s`, SIGKILL, reap; returns the exit status.

        Runs to the end even if the caller is cancelled (CancelledError is re-raised after
        cleanup). Returns None only if the child could not be reaped even after SIGKILL.
        """
        if self._closing is None or (self._closing.done() and self._state is not ChildState.EXITED):
            self._closing = asyncio.ensure_future(_drive_async(self._stop_steps(term_timeout_s)))
        closing = self._closing
        try:
            return await asyncio.shield(closing)
        except asyncio.CancelledError:
            while not closing.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(closing)
            raise

    def close_sync(self, term_timeout_s: float = 5.0) -> int | None:
        """Blocking `aclose` for sync contexts (atexit, signal handlers, finalizers)."""
        return _drive_sync(self._stop_steps(term_timeout_s))

    def _stop_steps(self, term_timeout_s: float) -> Generator[float, None, int | None]:
        """The stop sequence, yielding seconds to sleep; driven by aclose and close_sync."""
        if self._state is ChildState.EXITED:
            return self.returncode
        self._transition(ChildState.STOPPING)
        self._signal(signal.SIGTERM)
        if not (yield from _poll_until(self._has_exited, term_timeout_s)):
            self._signal(signal.SIGKILL)
            yield from _poll_until(self._has_exited, _KILL_REAP_TIMEOUT_S)
        if self._new_session:
            # The leader is a zombie until reaped below, so its group id cannot be reused yet:
            # killing the group now only hits stragglers the leader left behind.
            self._signal(signal.SIGKILL)
        returncode = self._popen.poll()
        if returncode is not None:
            self._transition(ChildState.EXITED)
        return returncode

    def send_signal(self, signum: signal.Signals) -> None:
        """Signal the child (its whole group when started with ``new_session``), if not reaped."""
        self._signal(signum)

    def _has_exited(self) -> bool:
        """True once the child has exited; unlike Popen.poll it leaves a zombie unreaped."""
        if self._popen.returncode is not None:
            return True  # reaped: the pid may already belong to another process
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True  # reaped by someone else
        return info is not None

    def _signal(self, signum: signal.Signals) -> None:
        if self._popen.returncode is not None:
            return  # reaped: the pid may already belong to another process
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self._new_session:
                os.killpg(self.pid, signum)
            else:
                os.kill(self.pid, signum)


# --- child side ---------------------------------------------------------------------------


def set_parent_death_signal() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies (Linux; elsewhere no-op).

    Then exit at once if the parent is already gone: it may have died between our fork and
    the prctl call, a window the signal alone misses.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(errno)}")
    expected = os.environ.get(PARENT_PID_ENV)
    if expected is not None and os.getppid() != int(expected):
        sys.stderr.write(f"agentcanvas: parent {expected} is gone; exiting\n")
        sys.stderr.flush()
        os._exit(1)


def reported_call_endpoint(info: dict[str, object]) -> str | None:
    """The call socket a server's ready report names (auto_host reports it as ``"call"``)."""
    call = info.get("call")
    return call if isinstance(call, str) and call else None


def child_report_ready(info: dict[str, object]) -> None:
    """Write `info` as one JSON line to the ready pipe and close it.

    A no-op when this process was not started by `spawn` (no ready pipe), and on a second call.
    """
    fd_text = os.environ.pop(READY_FD_ENV, None)
    if fd_text is None:
        return
    data = (json.dumps(info, separators=(",", ":")) + "\n").encode()
    fd = int(fd_text)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


# --- helpers ------------------------------------------------------------------------------


def descendants_alive(pid: int) -> list[int]:
    """Pids of the living (non-zombie) descendants of `pid`; empty if `pid` is gone."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    alive = []
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.append(child.pid)
    return alive


def _poll_until(predicate: Callable[[], bool], timeout_s: float) -> Generator[float, None, bool]:
    """Yield growing sleeps until `predicate()` holds or `timeout_s` passes; return it."""
    deadline = time.monotonic() + timeout_s
    sleep_s = 0.001
    while not predicate():
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            return False
        yield min(sleep_s, remaining_s)
        sleep_s = min(sleep_s * 2, _MAX_STOP_POLL_S)
    return True


def _drive_sync(steps: Generator[float, None, int | None]) -> int | None:
    try:
        while True:
            time.sleep(next(steps))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def _drive_async(steps: Generator[float, None, int | None]) -> int | None:
    try:
        while True:
            await asyncio.sleep(next(steps))
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


def _read_nonblocking(fd: int) -> bytes | None:
    """Bytes available on `fd`; b"" at end of file; None when nothing is there yet."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None


async def _wait_readable(fd: int, max_wait_s: float) -> None:
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(fd, on_readable)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(readable, max_wait_s)
    finally:
        loop.remove_reader(fd)


def _summarize(argv: list[str]) -> str:
    text = shlex.join(str(arg) for arg in argv)
    if len(text) <= _MAX_ARGV_SUMMARY_CHARS:
        return text
    return text[: _MAX_ARGV_SUMMARY_CHARS - 3] + "..."


def _stderr_tail(path: Path | None) -> str:
    """The last lines of the child's stderr file, or "" when there is none."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-_MAX_STDERR_TAIL_LINES:])
