"""One writer per run folder: the flock held by real processes.

- the lock has one holder, names it, and is free the moment its holder is SIGKILLed;
- a second eval process on a held folder exits 1 at once without writing anything, and the
  scheduler's resume and recover refuse or leave that folder alone while it is held;
- a foreground ``agentcanvas eval`` holds its folder for its whole life.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentcanvas.errors import RunLockedError, StateError
from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.runlock import RunLock, hold, holder_pid, is_locked
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json
from agentcanvas.scheduler import restart
from agentcanvas.scheduler.calibration import CalibrationStore
from agentcanvas.scheduler.job_scheduler import JobScheduler
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.cli import COMMAND
from support.polling import poll_until

pytestmark = pytest.mark.timeout(120)

HOLD = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from agentcanvas.eval.runlock import RunLock\n"
    "from agentcanvas.eval.store import RunDir\n"
    "RunLock(RunDir(Path(sys.argv[1]))).acquire()\n"
    "time.sleep(120)\n"
)
DEADLINE_S = 60.0


def scheduler_for(runs_dir: Path) -> JobScheduler:
    calibration = CalibrationStore(runs_dir.parent / "calibration.json")
    return JobScheduler(runs_dir, "http://127.0.0.1:9", [], calibration)


def submit_oracle(scheduler: JobScheduler, workspace: Path, episodes: int) -> str:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    graph = registry.load_graph("babyai_oracle")
    config = EvalConfig(graph_name="babyai_oracle", episode_count=episodes)
    spec = RunSpec(config=config, graph=graph.model_dump(mode="json"))
    return scheduler.submit(spec, {})


def test_the_lock_has_one_holder_and_dies_with_it(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir.root)])
    procs.append(holder)
    poll_until(lambda: is_locked(run_dir), "the holder to take the lock", DEADLINE_S)

    assert holder_pid(run_dir) == holder.pid
    with pytest.raises(RunLockedError, match=f"written by process {holder.pid}"):
        RunLock(run_dir).acquire(wait_s=0.2)
    # Unlinking the pid file takes nothing from the holder: the lock is on the folder itself
    # (a new _LOCK would be a new inode that anyone could lock).
    (run_dir.root / "_LOCK").unlink()
    assert is_locked(run_dir)
    with pytest.raises(RunLockedError, match="written by another process"):
        RunLock(run_dir).acquire(wait_s=0.2)
    assert not (run_dir.root / "_LOCK").exists()  # a refused writer wrote nothing
    (run_dir.root / "_LOCK").write_text(f"{holder.pid}\n")  # as before, for the checks below

    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    # The kernel dropped the dead holder's lock: its pid is still in the file, but stale.
    assert (run_dir.root / "_LOCK").read_text().strip() == str(holder.pid)
    assert not is_locked(run_dir) and holder_pid(run_dir) is None
    with hold(run_dir) as lock:  # no wait needed
        assert lock.held
        with pytest.raises(RunLockedError):  # not re-entrant: one writer, even in-process
            RunLock(run_dir).acquire()


def test_a_held_folder_is_refused_by_a_second_eval_resume_and_recover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    runs_dir = workspace / "outputs" / "eval_runs"
    run_id = submit_oracle(scheduler_for(runs_dir), workspace, episodes=2)
    run_dir = RunDir(runs_dir / run_id)
    before = {p.name: p.read_bytes() for p in run_dir.root.iterdir() if p.is_file()}
    lock = RunLock(run_dir).acquire()  # this test process is the writer now
    try:
        second = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentcanvas.eval_subprocess_main",
                "--run-dir",
                str(run_dir.root),
                "--backend-url",
                "http://127.0.0.1:9",
            ],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
            cwd=workspace,
            check=False,
            env={**os.environ, "AGENTCANVAS_HOME": str(workspace)},
        )
        assert second.returncode == 1, second.stderr
        assert f"being written by process {os.getpid()}" in second.stderr
        after = {p.name: p.read_bytes() for p in run_dir.root.iterdir() if p.is_file()}
        assert after == before  # it wrote nothing at all
        assert not any(run_dir.episodes_dir.iterdir())

        fresh = scheduler_for(runs_dir)  # a restarted backend: nothing queued in memory
        with pytest.raises(StateError, match="being written by process"):
            fresh.resume(run_id, {}, [])
        monkeypatch.setattr(restart, "RECOVER_LOCK_WAIT_S", 0.3)
        assert fresh.recover() == []  # left alone while held
        assert not fresh.queue
        assert read_json(run_dir.summary_path)["status"] == "queued"
    finally:
        lock.release()
    assert fresh.recover() == [run_id]


def test_a_foreground_eval_holds_its_folder_for_its_whole_life(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runs_dir = workspace / "outputs" / "eval_runs"
    cli = subprocess.Popen(
        [*COMMAND, "eval", "babyai_oracle", "-n", "3000", "-w", "2", "--json"],
        cwd=workspace,
        env={**os.environ, "AGENTCANVAS_HOME": str(workspace)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    procs.append(cli)

    def running_folder() -> RunDir | None:
        for folder in runs_dir.glob("*/summary.json"):
            summary = read_json(folder)
            if summary.get("status") == "running" and summary.get("episodes_done", 0) >= 3:
                return RunDir(folder.parent)
        return None

    run_dir = poll_until(running_folder, "the foreground run to record episodes", DEADLINE_S)
    assert holder_pid(run_dir) == cli.pid
    # A backend starting now must not take the living run for a dead one, even with the
    # folder's _LOCK file deleted under it.
    (run_dir.root / "_LOCK").unlink()
    monkeypatch.setattr(restart, "RECOVER_LOCK_WAIT_S", 0.3)
    scheduler = scheduler_for(runs_dir)
    assert scheduler.recover() == []
    assert read_json(run_dir.summary_path)["status"] == "running"
    with pytest.raises(StateError, match="being written by"):
        scheduler.resume(run_dir.root.name, {}, [])

    os.killpg(cli.pid, signal.SIGKILL)
    cli.wait(30)
    assert not is_locked(run_dir)
    scheduler.recover()
    summary = read_json(run_dir.summary_path)
    assert summary["status"] == "aborted", summary["status"]
    on_disk = {int(p.parent.name[2:]) for p in run_dir.episodes_dir.glob("ep*/episode.json")}
    assert [e["index"] for e in summary["episodes"]] == sorted(on_disk)
