"""Starts that cannot duplicate: the ``Idempotency-Key`` header of ``POST /api/eval/v2/start``.

A client that does not know whether its start arrived (a timeout, a dropped connection) sends
it again with the same key. The first start with a key records it in the run folder it
creates (``submission.json``: the key, a hash of the body, the answer), before the run is
queued; a later start with that key and the same body gets that answer again (200, with
``replayed: true``) and creates nothing; with another body it is refused (409 naming the
header). The record lives with the run, so a retry after a backend restart finds it too: the
first keyed start of a backend process reads the records of the runs folder once (off the
event loop), and each keyed start adds its own.

Two starts with one key at once are served one after the other (a lock per key), so the
second sees the first's record. The body's hash is taken over the validated request with every
default filled in, so leaving out a field and sending its default are the same body.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, Field, ValidationError

from agentcanvas.errors import RunError, StateError
from agentcanvas.fileio import atomic_write_json, read_json

__all__ = [
    "IDEMPOTENCY_HEADER",
    "KEY_PATTERN",
    "SUBMISSION_FILE",
    "IdempotencyConflictError",
    "Submission",
    "SubmitKeys",
    "body_fingerprint",
]

IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
KEY_PATTERN: Final = r"^[!-~]{1,255}$"
"""1 to 255 visible ASCII characters (a UUID, a ULID, a hash...)."""
SUBMISSION_FILE: Final = "submission.json"


class Submission(BaseModel):
    """``submission.json``: the key a run was started with, and the answer it got."""

    version: Literal[1] = 1
    idempotency_key: str
    body_sha256: str = Field(description="sha256 of the validated body (defaults filled in).")
    response: dict[str, Any] = Field(description="The start's answer (run_id, status, ...).")
    submitted_at: float


class IdempotencyConflictError(StateError):
    """An Idempotency-Key already started a run with another body (HTTP 409)."""


def body_fingerprint(body: BaseModel) -> str:
    """sha256 of the request as validated (key order and spacing do not count)."""
    text = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class SubmitKeys:
    """The keys of keyed starts, by the run each created (see the module docstring)."""

    runs_dir: Path
    _known: dict[str, Submission] | None = None
    _locks: dict[str, tuple[asyncio.Lock, int]] = field(default_factory=dict)
    _reading: asyncio.Lock = field(default_factory=asyncio.Lock)

    @contextlib.asynccontextmanager
    async def claim(self, key: str, fingerprint: str) -> AsyncIterator[Submission | None]:
        """Hold ``key`` while a start with it is served: yields the earlier start's record
        (its run still there), or None when the key is new and the caller may start a run
        (recording it with :meth:`record`). IdempotencyConflictError when the key started
        a run with another body."""
        lock = self._lock(key)
        try:
            async with lock:
                earlier = (await self._records()).get(key)
                if earlier is not None and not self._run_exists(earlier):
                    earlier = None  # its run folder was removed since: the key is free
                if earlier is not None and earlier.body_sha256 != fingerprint:
                    run_id = earlier.response.get("run_id")
                    raise IdempotencyConflictError(
                        f"{IDEMPOTENCY_HEADER}: {key[:80]!r} already started run {run_id} "
                        "with another body; send that body again to get its answer, or use "
                        "a new key for a new run"
                    )
                yield earlier
        finally:
            self._unlock(key)

    def record(self, run_root: Path, key: str, fingerprint: str, response: dict[str, Any]) -> None:
        """Write the run's ``submission.json`` (before the run is queued) and remember it."""
        submission = Submission(
            idempotency_key=key,
            body_sha256=fingerprint,
            response=response,
            submitted_at=time.time(),
        )
        atomic_write_json(run_root / SUBMISSION_FILE, submission.model_dump(mode="json"))
        if self._known is not None:
            self._known[key] = submission

    async def _records(self) -> dict[str, Submission]:
        async with self._reading:
            if self._known is None:
                self._known = await asyncio.to_thread(read_submissions, self.runs_dir)
            return self._known

    def _run_exists(self, submission: Submission) -> bool:
        run_id = submission.response.get("run_id")
        return isinstance(run_id, str) and (self.runs_dir / run_id).is_dir()

    def _lock(self, key: str) -> asyncio.Lock:
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        return lock

    def _unlock(self, key: str) -> None:
        lock, users = self._locks[key]
        if users <= 1:
            del self._locks[key]
        else:
            self._locks[key] = (lock, users - 1)


def read_submissions(runs_dir: Path) -> dict[str, Submission]:
    """The ``submission.json`` of every run folder under ``runs_dir``, by key (a damaged one
    is skipped: its run cannot be found by key, and a retry starts a new run)."""
    found: dict[str, Submission] = {}
    if not runs_dir.is_dir():
        return found
    for folder in sorted(runs_dir.iterdir()):
        path = folder / SUBMISSION_FILE
        if not path.is_file():
            continue
        try:
            submission = Submission.model_validate(read_json(path))
        except (RunError, ValidationError):
            continue
        found[submission.idempotency_key] = submission
    return found
