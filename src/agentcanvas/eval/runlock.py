"""One writer per run folder: an OS lock (``flock``) on the run folder itself.

The eval process (the scheduler's subprocess, or the CLI's foreground eval) takes the lock
before its first write and holds it until it exits; the scheduler takes it briefly around its
own writes (submit, cancel of a queued run, spawn, reap, resume, recover). Whoever cannot get
it must not write: it refuses (:class:`~agentcanvas.errors.RunLockedError`, a StateError: HTTP
409, CLI exit 1) or waits for it with a deadline.

The lock is on the folder's own inode, not on a file in it: a lock file can be unlinked under
a living holder, and a new file of the same name is a new inode anyone could lock (two writers
in one folder). The folder cannot be replaced while it holds the run. The kernel drops a flock
when the process holding it dies (its file descriptions close), so a held lock always has a
living holder: a lock is never stale. The holder writes its pid in ``_LOCK``, only for
messages (a deleted ``_LOCK`` loses the pid, never the lock). The descriptor is
close-on-exec, so servers the holder spawns do not inherit it. Two descriptors of the same
folder exclude each other even within one process, so the lock is not re-entrant: take it
once per writer.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Final

from agentcanvas.errors import RunError, RunLockedError
from agentcanvas.eval.store import RunDir

__all__ = ["LOCK_NAME", "RunLock", "hold", "holder_pid", "is_locked"]

LOCK_NAME: Final = "_LOCK"
_POLL_S: Final = 0.05


def _lock_path(run_dir: RunDir) -> Path:
    return run_dir.root / LOCK_NAME


class RunLock:
    """The writer lock of one run folder; ``acquire`` then ``release`` (or ``with``)."""

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self.path = _lock_path(run_dir)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock now."""
        return self._fd is not None

    def acquire(self, wait_s: float = 0.0) -> RunLock:
        """Take the lock, waiting up to ``wait_s`` seconds; RunLockedError when it stays held."""
        if self._fd is not None:
            raise RunLockedError(f"{self.path} is already held by this RunLock")
        root = self.run_dir.root
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise RunError(f"cannot open {str(root)!r}: {exc.strerror or exc}") from exc
        deadline = time.monotonic() + wait_s
        while not _try_flock(fd):
            if time.monotonic() >= deadline:
                os.close(fd)
                raise RunLockedError(self._held_message(wait_s))
            time.sleep(_POLL_S)
        self._fd = fd
        with contextlib.suppress(OSError):  # the pid is for messages only
            pid_fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
            try:
                os.write(pid_fd, f"{os.getpid()}\n".encode())
            finally:
                os.close(pid_fd)
        return self

    def release(self) -> None:
        """Let the lock go (idempotent); closing the descriptor drops the flock."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def _held_message(self, wait_s: float) -> str:
        pid = holder_pid(self.run_dir)
        who = f"process {pid}" if pid is not None else "another process"
        waited = f" (waited {wait_s:g} s)" if wait_s > 0 else ""
        return (
            f"run {self.run_dir.root.name} is being written by {who}{waited}: one run folder "
            "has one writer; wait until that process ends (or cancel its run) and try again"
        )

    def __enter__(self) -> RunLock:
        if self._fd is None:
            self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


@contextlib.contextmanager
def hold(run_dir: RunDir, wait_s: float = 0.0) -> Iterator[RunLock]:
    """``with hold(run_dir):`` the lock for a few writes; RunLockedError when held."""
    lock = RunLock(run_dir).acquire(wait_s)
    try:
        yield lock
    finally:
        lock.release()


def _try_flock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def is_locked(run_dir: RunDir) -> bool:
    """Whether a living process holds the run folder's lock now (creates nothing)."""
    try:
        fd = os.open(run_dir.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not _try_flock(fd):
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def holder_pid(run_dir: RunDir) -> int | None:
    """The pid the current holder wrote, or None when the lock is free or says nothing."""
    if not is_locked(run_dir):
        return None
    try:
        text = _lock_path(run_dir).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
