"""Logs written where the run folder is: a Ray worker that sees the run folder puts its
episodes' log.jsonl there itself, instead of sending it to the head.

An episode's firing log grows with its length (a 160-step CartPole episode: about 200 KB);
sent back with the record, it is the head's largest cost per result — Ray's transfer of the
reply, then the write (`bench/ray_head.py`: 1.96 ms of head CPU an episode with the log,
0.81 ms without, at 160 steps and eight episodes a call). Where the workers see the run
folder — on the head's machine, or with the outputs folder on storage every node mounts at
the same path — they write the logs themselves and the head's work per result stays flat.

How a worker tells: at the start of a run the head writes a random token into the run
folder (``_STORAGE_CHECK``, `check_token`) and sends the folder's path (as the head resolves
it: symlinks followed) and the token with every episode; a worker writes into the folder
only if it reads that token at that path (`SeenFolders`). Anywhere else (a node with its own
disk at that path, or none), or when its write fails (a full disk), the worker sends the log
as before (`stage_log` answers None).

A worker *stages* the log: it writes it into the episode's folder under a temp name of its
own (``.log.jsonl.<random>.tmp``, not synced) and sends that name; the head renames it to
``log.jsonl`` only when it takes the attempt's record (`place_log`, in its recording
thread: one rename). So a log is in place exactly when its attempt was recorded, as when the
head wrote it: an attempt the head gave up on (lost, past its deadline, cancelled in a batch,
a killed actor that still finishes) never replaces the log of the one that counted. What
such an attempt staged stays a temp file, which resume and recover remove with the other
temp files a killed writer leaves (`eval.recovery.remove_stale_temp_files`). An episode that
fired nothing stages nothing, and the head removes an earlier attempt's log.
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from agentcanvas.errors import RunError
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_bytes, write_error, write_temp

__all__ = ["SeenFolders", "check_token", "place_log", "stage_log"]


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


def stage_log(run_dir: RunDir, index: int, lines: bytes) -> str | None:
    """Episode ``index``'s log staged in its folder: the temp file's name ("" when the
    episode fired nothing: nothing staged); None when it could not be written (the caller
    sends the log to the head instead)."""
    if not lines:
        return ""
    try:
        run_dir.create_episode(index)
        fd, temp = write_temp(run_dir.episode_log_path(index), lines)
        os.close(fd)
    except (OSError, RunError):
        return None
    return temp.name


def place_log(run_dir: RunDir, index: int, staged: str) -> None:
    """The head took the attempt's record: its staged log becomes the episode's log.jsonl
    ("" for none: an earlier attempt's log goes); RunError when that fails, or when
    ``staged`` is not a name `stage_log` gives."""
    path = run_dir.episode_log_path(index)
    try:
        if not staged:
            path.unlink(missing_ok=True)
            return
        if Path(staged).name != staged or not _STAGED.fullmatch(staged):
            raise RunError(f"episode {index}: {staged!r} is not the name of a staged log")
        os.replace(path.with_name(staged), path)
    except OSError as exc:
        raise write_error(path, exc) from exc


_STAGED = re.compile(r"\.log\.jsonl\.[0-9a-f]+\.tmp")
