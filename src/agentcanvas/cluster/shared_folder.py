"""Logs written where the run folder is: a Ray worker that sees the run folder writes its
episodes' log.jsonl there itself, instead of sending it to the head.

An episode's firing log grows with its length (a 160-step CartPole episode: about 200 KB);
sent back with the record, it is the head's largest cost per result — Ray's transfer of the
reply, then the write (`bench/ray_head.py`: 1.96 ms of head CPU an episode with the log,
0.81 ms without, at 160 steps and eight episodes a call). Where the workers see the run
folder — on the head's machine, or with the outputs folder on storage every node mounts at
the same path — they write the logs themselves and the head's work per result stays flat.

How a worker tells: at the start of a run the head writes a random token into the run
folder (``_STORAGE_CHECK``, `check_token`) and sends the folder's path and the token with
every episode; a worker writes into the folder only if it reads that token at that path
(`SeenFolders`). Anywhere else (a node with its own disk at that path, or none), or when its
write fails (a full disk), the worker sends the log as before (`write_log` says False).

A log is written as the local engine leaves it: the episode's folder made, the lines replaced
in one rename (an earlier attempt's log gone), not synced (the run's durability covers its
records, `eval.record_writer`); an episode that fired nothing leaves no log.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from agentcanvas.errors import RunError
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_bytes, durable_replace, write_temp

__all__ = ["SeenFolders", "check_token", "write_log"]


def check_token(run_dir: RunDir) -> str:
    """A new token in the run folder's ``_STORAGE_CHECK``; "" when it cannot be written
    (the workers then send their logs)."""
    token = secrets.token_hex(16)
    try:
        atomic_write_bytes(run_dir.storage_check_path, token.encode("ascii"), durable=False)
    except (OSError, RunError):
        return ""
    return token


class SeenFolders:
    """A worker's answers to "do I see this run folder?", one look per folder and token."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], bool] = {}

    def run_dir(self, root: str, token: str) -> RunDir | None:
        """The run folder at ``root`` if it holds ``token``, else None."""
        if not root or not token:
            return None
        key = (root, token)
        seen = self._seen.get(key)
        if seen is None:
            run_dir = RunDir(Path(root))
            try:
                seen = run_dir.storage_check_path.read_bytes() == token.encode("ascii")
            except OSError:
                seen = False
            self._seen[key] = seen
        return RunDir(Path(root)) if seen else None


def write_log(run_dir: RunDir, index: int, lines: bytes) -> bool:
    """Episode ``index``'s log.jsonl in ``run_dir`` (none when ``lines`` is empty); False
    when it could not be written (the caller sends it to the head instead)."""
    path = run_dir.episode_log_path(index)
    try:
        if not lines:
            path.unlink(missing_ok=True)  # nor the log an earlier attempt left
            return True
        run_dir.create_episode(index)
        fd, temp = write_temp(path, lines)
        durable_replace(fd, temp, path, sync=False)
    except (OSError, RunError):
        return False
    return True
