"""``POST /api/eval/v2/start`` with an ``Idempotency-Key``: a retried start never creates a
second run, also when the first attempt timed out on the client after the server took it,
and also after a backend restart; the same key with another body is a 409 naming the header.

A real backend on loopback; every run here is of (babyai_oracle, HUGE_WORKERS workers), which
a recorded calibration makes need more RAM than any machine has: it stays queued.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.backend import Backend
from support.backend_workspace import HUGE_WORKERS, write_workspace

START = "/api/eval/v2/start"
HEADER = "Idempotency-Key"
BODY: dict[str, Any] = {
    "graph_name": "babyai_oracle",
    "episode_count": 1,
    "worker_count": HUGE_WORKERS,
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_workspace(tmp_path_factory.mktemp("idempotency") / "workspace")


@pytest.fixture(scope="module")
def backend(workspace: Path) -> Iterator[Backend]:
    with Backend(workspace) as server:
        yield server


def run_folders(workspace: Path) -> set[str]:
    runs = workspace / "outputs" / "eval_runs"
    return {p.name for p in runs.iterdir() if p.is_dir()} if runs.is_dir() else set()


def start(backend: Backend, key: str | None, **changes: Any) -> httpx.Response:
    headers = {HEADER: key} if key is not None else {}
    return backend.http.post(START, json={**BODY, **changes}, headers=headers)


def test_a_retry_after_a_client_timeout_finds_the_run_the_first_attempt_started(
    backend: Backend, workspace: Path
) -> None:
    before = run_folders(workspace)
    key = str(uuid.uuid4())
    impatient = httpx.Client(base_url=backend.url, timeout=httpx.Timeout(30.0, read=0.001))
    with impatient, pytest.raises(httpx.ReadTimeout):  # the request went out; no answer read
        impatient.post(START, json=BODY, headers={HEADER: key})

    retry = start(backend, key)
    again = start(backend, key)  # served after both: one key is served one start at a time

    assert retry.status_code == 200, retry.text
    assert again.status_code == 200 and again.json()["replayed"] is True, again.text
    created = run_folders(workspace) - before
    assert created == {retry.json()["run_id"]} == {again.json()["run_id"]}
    assert again.json()["status"] == "queued" and again.json()["via_subprocess"] is True
    backend.cancel(retry.json()["run_id"])


def test_the_same_key_with_another_body_is_a_409_naming_the_header(
    backend: Backend, workspace: Path
) -> None:
    key = str(uuid.uuid4())
    first = start(backend, key)
    assert first.status_code == 200 and first.json()["replayed"] is False, first.text
    before = run_folders(workspace)

    other = start(backend, key, seed=7)

    assert other.status_code == 409, other.text
    assert HEADER in other.json()["detail"] and first.json()["run_id"] in other.json()["detail"]
    assert run_folders(workspace) == before
    # Leaving a field out and sending its default are the same body.
    same = start(backend, key, seed=0, tasks=None)
    assert same.status_code == 200 and same.json()["run_id"] == first.json()["run_id"]
    backend.cancel(first.json()["run_id"])


def test_without_a_key_every_start_is_a_new_run(backend: Backend, workspace: Path) -> None:
    answers = [start(backend, None) for _ in range(2)]
    run_ids = {a.json()["run_id"] for a in answers}
    assert len(run_ids) == 2 and run_ids <= run_folders(workspace)
    for run_id in run_ids:
        backend.cancel(run_id)


@pytest.mark.parametrize("key", ["has space", "x" * 256, "tab\tinside"])
def test_a_malformed_key_is_a_422_naming_the_header(
    backend: Backend, workspace: Path, key: str
) -> None:
    before = run_folders(workspace)
    answer = start(backend, key)
    assert answer.status_code == 422, answer.text
    assert "idempotency-key" in answer.text.lower()
    assert run_folders(workspace) == before


def test_the_key_outlives_a_backend_restart(workspace: Path, backend: Backend) -> None:
    key = str(uuid.uuid4())
    first = start(backend, key)
    assert first.status_code == 200, first.text
    backend.close()  # the module's backend; the next test of this module would need another

    restarted = Backend(workspace)
    try:
        retry = start(restarted, key)
        conflict = start(restarted, key, episode_count=2)
        assert retry.status_code == 200 and retry.json()["replayed"] is True, retry.text
        assert retry.json()["run_id"] == first.json()["run_id"]
        assert conflict.status_code == 409 and HEADER in conflict.json()["detail"]
        restarted.cancel(first.json()["run_id"])
    finally:
        restarted.close()
