"""The backend commands against a real ``agentcanvas serve`` on loopback: runs by id or name
in ``status``, ``cancel`` and ``resume``, names and tags in ``runs``, and what ``submit``
sends reaching the run's config."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcanvas import exit_codes
from support.backend import Backend
from support.cli import run_cli
from support.truth_workspace import write_truth_workspace

CLI_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with Backend(write_truth_workspace(tmp_path_factory.mktemp("backend") / "ws")) as server:
        yield server


def cli(backend: Backend, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in the backend's workspace, finding the backend through AGENTCANVAS_URL."""
    env = {**os.environ, "AGENTCANVAS_URL": backend.url}
    proc = run_cli(*args, workspace=backend.workspace, timeout_s=CLI_TIMEOUT_S, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def submitted(backend: Backend, *args: str) -> str:
    proc = cli(backend, "submit", *args)
    assert proc.returncode == 0, proc.stderr
    run_id = str(json.loads(proc.stdout)["run_id"])
    backend.wait_status(run_id, "completed")
    return run_id


def test_submit_with_follow_and_new_run_options(backend: Backend) -> None:
    """Also: the Idempotency-Key header is taken by a real backend (one that does not know
    it yet ignores it)."""
    proc = cli(
        backend, "submit", "walk", "-n", "2", "--per-step-timeout", "5", "--episode-timeout",
        "30", "--engine", "local", "--name", "followed", "--follow", "--idempotency-key",
        "followed-1",
    )  # fmt: skip
    assert proc.returncode == exit_codes.OK, proc.stderr[-3000:]
    run_id = json.loads(proc.stdout.splitlines()[0])["run_id"]
    config = backend.status(run_id)["config"]
    assert (config["per_step_timeout_s"], config["episode_timeout_s"]) == (5.0, 30.0)
    assert f"run {run_id} - graph walk" in proc.stderr  # the summary in words, at the end


def test_status_cancel_and_resume_by_name(backend: Backend) -> None:
    run_id = submitted(backend, "walk", "-n", "2", "--name", "flaky cli", "--tag", "nightly")
    status = cli(backend, "status", "flaky cli")
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f'run {run_id} "flaky cli" - graph walk\n')
    assert "completed 2" in status.stdout and "{" not in status.stdout
    as_json = cli(backend, "status", "flaky cli", "--json")
    assert json.loads(as_json.stdout)["run_id"] == run_id
    # The name reached the routes: each refuses a finished run, naming it.
    resumed = cli(backend, "resume", "flaky cli")
    assert resumed.returncode == exit_codes.USAGE
    assert f"run {run_id} is completed; nothing to resume" in resumed.stderr
    listing = cli(backend, "runs")
    (line,) = [row for row in listing.stdout.splitlines() if row.startswith(run_id)]
    assert line.endswith('"flaky cli"  tags nightly')


def test_an_ambiguous_or_unknown_name_exits_1(backend: Backend) -> None:
    twins = sorted(submitted(backend, "walk", "-n", "1", "--name", "twin") for _ in range(2))
    for command in ("status", "cancel", "resume"):
        proc = cli(backend, command, "twin")
        assert (proc.returncode, proc.stdout) == (exit_codes.USAGE, ""), proc.stderr
        assert "run name 'twin' is ambiguous: 2 runs" in proc.stderr
        assert f"({twins[0]}, {twins[1]})" in proc.stderr
    unknown = cli(backend, "status", "no such run")
    assert unknown.returncode == exit_codes.USAGE
    assert f"no run 'no such run' in the backend at {backend.url}" in unknown.stderr


def test_the_url_flag_wins_over_the_environment(backend: Backend, tmp_path: Path) -> None:
    env = {**os.environ, "AGENTCANVAS_URL": "http://127.0.0.1:9"}
    proc = run_cli(
        "runs", "--json", "--url", backend.url, workspace=tmp_path, timeout_s=CLI_TIMEOUT_S,
        env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "runs" in json.loads(proc.stdout)
