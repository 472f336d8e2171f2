"""A full outputs disk under a foreground run and under a backend run.

The outputs folder is a small tmpfs mounted for the test (root only: skipped otherwise) and
filled to its last byte while the run goes. Must hold: the run ends ``aborted`` (resumable)
with a reason naming the disk; a submit or a resume while the disk is full is a 507 naming
it, leaving nothing behind; the backend keeps serving; a run whose end the disk could not
take at all is shown ended from memory and written when space returns; once space is freed a
resume completes the run with records identical to a clean run's.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas import exit_codes
from agentcanvas.eval.config import EpisodeResult
from support.backend import Backend
from support.cli import COMMAND
from support.polling import poll_until

pytestmark = pytest.mark.timeout(300)

DISK_MB = 24
EPISODES = 150  # per task (babyai_oracle has 2): 300 episodes, ~10 s on 2 workers
FILL_AFTER = 20  # episodes recorded before the disk fills up
START = "/api/eval/v2/start"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A workspace whose ``outputs/`` is a tmpfs of DISK_MB MB."""
    workspace = tmp_path / "ws"
    outputs = workspace / "outputs"
    outputs.mkdir(parents=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}M", "tmpfs", str(outputs)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace')}")
    try:
        yield workspace
    finally:
        subprocess.run(["umount", "-l", str(outputs)], check=False)


def fill(disk: Path) -> Path:
    """Write zeros to ``disk/filler`` until the disk is full; the filler's path."""
    path = disk / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    chunk = bytes(64 * 1024)
    try:
        while True:
            os.write(fd, chunk)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    small = bytes(512)  # the last partial block
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        while True:
            os.write(fd, small)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    assert os.statvfs(disk).f_bavail == 0
    return path


def recorded(workspace: Path) -> int:
    return len(list((workspace / "outputs" / "eval_runs").glob("*/episodes/ep*/episode.json")))


def identities(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [EpisodeResult.model_validate(e).identity() for e in episodes]


def cli_env(workspace: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTCANVAS_TOKEN"}
    return {**env, "AGENTCANVAS_HOME": str(workspace), "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The records of a clean run of the same plan on a disk with room."""
    workspace = tmp_path_factory.mktemp("reference")
    args = [*COMMAND, "eval", "babyai_oracle", "-n", str(EPISODES), "-w", "2", "--json"]
    done = subprocess.run(
        args, cwd=workspace, env=cli_env(workspace), capture_output=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    summary = json.loads(done.stdout)
    assert summary["status"] == "completed"
    return identities(summary["episodes"])


def only_run(workspace: Path) -> Path:
    runs = sorted((workspace / "outputs" / "eval_runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def assert_ended_on_full_disk(run_dir: Path, disk: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "aborted", summary["status"]
    assert "disk full" in summary["error"] and str(disk) in summary["error"], summary["error"]
    assert not (run_dir / "_DONE").exists()  # resumable
    assert not list(run_dir.rglob(".*.tmp"))
    return summary


def test_a_foreground_run_on_a_full_disk_ends_aborted_and_resumes_identically(
    small_disk: Path, reference: list[dict[str, Any]]
) -> None:
    disk = small_disk / "outputs"
    args = [*COMMAND, "eval", "babyai_oracle", "-n", str(EPISODES), "-w", "2"]
    proc = subprocess.Popen(
        args,
        cwd=small_disk,
        env=cli_env(small_disk),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        poll_until(lambda: recorded(small_disk) >= FILL_AFTER, "episodes to be recorded", 120.0)
        filler = fill(disk)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = err.decode(errors="replace")
    assert proc.returncode == exit_codes.RUN_FAILED, text[-3000:]
    assert "Traceback" not in text and "never retrieved" not in text, text[-3000:]
    assert "disk full" in text and "status aborted" in text, text[-3000:]
    run_dir = only_run(small_disk)
    summary = assert_ended_on_full_disk(run_dir, disk)
    assert summary["episodes_done"] < 2 * EPISODES
    assert not (run_dir / "_RESERVE").exists()  # given back when the run ended

    filler.unlink()
    backend = Backend(small_disk)
    try:
        run_id = run_dir.name
        assert backend.status(run_id)["status"] == "aborted"
        answer = backend.http.post(f"/api/eval/v2/resume/{run_id}")
        assert answer.status_code == 200, answer.text
        final = backend.wait_status(run_id, "completed")
    finally:
        backend.close()
    assert identities(final["episodes"]) == reference


def test_a_backend_run_on_a_full_disk_is_aborted_submits_get_507_and_resume_completes(
    small_disk: Path, reference: list[dict[str, Any]]
) -> None:
    disk = small_disk / "outputs"
    backend = Backend(small_disk)
    try:
        run_id = backend.start_run("babyai_oracle", EPISODES, 2)
        poll_until(lambda: recorded(small_disk) >= FILL_AFTER, "episodes to be recorded", 120.0)
        filler = fill(disk)
        summary = backend.wait_status(run_id, "aborted")
        assert "disk full" in summary["error"] and str(disk) in summary["error"]
        assert summary["health"]["verdict"] == "aborted"
        assert_ended_on_full_disk(backend.run_dir(run_id), disk)
        rows = backend.api("GET", "/api/eval/v2/runs")["runs"]
        assert [(r["run_id"], r["status"]) for r in rows] == [(run_id, "aborted")]

        # While the disk is full: a submit and a resume are 507s naming the disk, and
        # nothing is left behind; the backend keeps serving.
        body = {"graph_name": "babyai_oracle", "episode_count": 2, "name": "later"}
        refused = backend.http.post(START, json=body)
        assert refused.status_code == 507, refused.text
        assert "disk full" in refused.json()["detail"] and str(disk) in refused.json()["detail"]
        resumed = backend.http.post(f"/api/eval/v2/resume/{run_id}")
        assert resumed.status_code == 507, resumed.text
        assert [p.name for p in (disk / "eval_runs").iterdir()] == [run_id]
        for path in ("/api/graphs", "/api/eval/v2/queue", f"/api/eval/v2/status/{run_id}"):
            assert backend.http.get(path).status_code == 200, path
        assert backend.queue() == {"queued": [], "running": []}
        assert "tick failed" not in backend.log()

        filler.unlink()
        resumed = backend.http.post(f"/api/eval/v2/resume/{run_id}")
        assert resumed.status_code == 200, resumed.text
        final = backend.wait_status(run_id, "completed")
    finally:
        backend.close()
    assert identities(final["episodes"]) == reference


def test_an_end_the_disk_cannot_take_is_kept_in_memory_and_written_when_space_returns(
    small_disk: Path,
) -> None:
    """The eval process is killed on a full disk with no reserve left: nothing can be
    written, so the backend shows the run aborted from memory, then writes it."""
    disk = small_disk / "outputs"
    backend = Backend(small_disk)
    try:
        run_id = backend.start_run("babyai_oracle", 10 * EPISODES, 2)
        pid = backend.running_pid(run_id)
        poll_until(lambda: recorded(small_disk) >= FILL_AFTER, "episodes to be recorded", 120.0)
        os.kill(pid, signal.SIGSTOP)  # it never sees the full disk
        run_dir = backend.run_dir(run_id)
        (run_dir / "_RESERVE").unlink()  # nor could it write its last word
        filler = fill(disk)
        os.kill(pid, signal.SIGKILL)
        shown = backend.wait_status(run_id, "aborted")
        assert "disk full" in shown["error"] and str(disk) in shown["error"], shown["error"]
        on_disk = json.loads((run_dir / "summary.json").read_text())
        assert on_disk["status"] == "running"  # the disk took nothing
        rows = backend.api("GET", "/api/eval/v2/runs")["runs"]
        assert [(r["run_id"], r["status"]) for r in rows] == [(run_id, "aborted")]

        filler.unlink()
        poll_until(
            lambda: json.loads((run_dir / "summary.json").read_text())["status"] == "aborted",
            "the held end to be written",
            30.0,
        )
        written = assert_ended_on_full_disk(run_dir, disk)
        assert written["episodes_done"] == len(list(run_dir.glob("episodes/ep*/episode.json")))
        assert backend.status(run_id)["status"] == "aborted"
        assert f"run {run_id}: its end is written" in backend.log()
    finally:
        backend.close()
