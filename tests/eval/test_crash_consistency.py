"""SIGKILL of the run's writer at random points: summary.json and the episode folders agree
after recover, and a run resumed after each kill ends with the records of an unbroken run.

The writer is killed with its whole process group (a foreground ``agentcanvas eval`` first,
then the scheduler's eval process on each resume) at a random number of recorded episodes,
so that the kill lands anywhere between an episode.json write and the summary rewrite.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.runlock import is_locked
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json
from agentcanvas.scheduler.calibration import CalibrationStore
from agentcanvas.scheduler.job_scheduler import JobScheduler
from support.cli import COMMAND
from support.polling import poll_until

pytestmark = pytest.mark.timeout(180)

EPISODES_PER_TASK = 20  # babyai_oracle has two tasks: 40 episodes
TOTAL = 2 * EPISODES_PER_TASK
WORKERS = 2
DEADLINE_S = 60.0
SEED = int(os.environ.get("CRASH_TEST_SEED", time.time_ns() % 10_000))


def episode_files(run_dir: RunDir) -> dict[int, dict[str, Any]]:
    return {
        int(path.parent.name[2:]): json.loads(path.read_text())
        for path in run_dir.episodes_dir.glob("ep*/episode.json")
    }


def assert_summary_matches_folders(run_dir: RunDir) -> dict[str, Any]:
    summary: dict[str, Any] = read_json(run_dir.summary_path)
    on_disk = episode_files(run_dir)
    listed = {e["index"]: e for e in summary["episodes"]}
    assert sorted(listed) == sorted(on_disk), (summary["status"], sorted(listed), sorted(on_disk))
    for index, record in on_disk.items():
        assert EpisodeResult.model_validate(record) == EpisodeResult.model_validate(listed[index])
    finished = [e for e in listed.values() if e["status"] != "cancelled"]
    assert summary["episodes_done"] == len(finished)
    return summary


def kill_at_random_point(
    proc: subprocess.Popen[bytes], run_dir: RunDir, rng: random.Random, at_least: int
) -> None:
    """SIGKILL ``proc``'s group once ``at_least`` + a random number of episodes are on disk."""
    target = at_least + rng.randint(1, TOTAL // 4)
    poll_until(
        lambda: len(episode_files(run_dir)) >= target or proc.poll() is not None,
        f"{target} episodes on disk",
        DEADLINE_S,
    )
    time.sleep(rng.uniform(0.0, 0.05))
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # it had already ended (and poll reaped it): the run is over
        assert proc.poll() is not None
    proc.wait(30)
    assert not is_locked(run_dir)  # the kernel dropped the dead writer's lock


def spawn_eval_process(run_dir: RunDir, workspace: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentcanvas.eval_subprocess_main",
            "--run-dir",
            str(run_dir.root),
            "--backend-url",
            "http://127.0.0.1:9",
        ],
        cwd=workspace,
        env={**os.environ, "AGENTCANVAS_HOME": str(workspace)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def test_summary_equals_episode_folders_after_sigkill_at_random_points(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    rng = random.Random(SEED)
    print(f"CRASH_TEST_SEED={SEED}")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    runs_dir = workspace / "outputs" / "eval_runs"
    env = {**os.environ, "AGENTCANVAS_HOME": str(workspace)}
    base = ["eval", "babyai_oracle", "-n", str(EPISODES_PER_TASK), "--json"]
    # The same run unbroken, on one worker, in a workspace of its own (meanwhile).
    clean_ws = tmp_path / "clean"
    clean_ws.mkdir()
    clean = subprocess.Popen(
        [*COMMAND, *base, "-w", "1"],
        cwd=clean_ws,
        env={**os.environ, "AGENTCANVAS_HOME": str(clean_ws)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    procs.append(clean)
    cli = subprocess.Popen(
        [*COMMAND, *base, "-w", str(WORKERS)],
        cwd=workspace,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    procs.append(cli)
    run_dir = RunDir(
        poll_until(lambda: next(iter(runs_dir.glob("*/")), None), "the run folder", DEADLINE_S)
    )
    scheduler = JobScheduler(
        runs_dir, "http://127.0.0.1:9", [], CalibrationStore(workspace / "calibration.json")
    )

    kill_at_random_point(cli, run_dir, rng, at_least=0)
    scheduler.recover()
    assert assert_summary_matches_folders(run_dir)["status"] == "aborted"
    scheduler.resume(run_dir.root.name, {}, [])
    scheduler.queue.clear()  # this test is the scheduler: it spawns the process itself
    assert_summary_matches_folders(run_dir)
    resumed = spawn_eval_process(run_dir, workspace)
    procs.append(resumed)
    kill_at_random_point(resumed, run_dir, rng, at_least=len(episode_files(run_dir)))

    scheduler.recover()
    # On a loaded machine the resumed run can finish its last commit group before the kill
    # lands: a completed run is then what recovery must leave (and nothing to resume).
    if assert_summary_matches_folders(run_dir)["status"] != "completed":
        scheduler.resume(run_dir.root.name, {}, [])
        scheduler.queue.clear()
        last = spawn_eval_process(run_dir, workspace)
        procs.append(last)
        assert last.wait(DEADLINE_S * 2) == 0
    summary = assert_summary_matches_folders(run_dir)
    assert summary["status"] == "completed" and summary["episodes_done"] == TOTAL

    # Every record identical to the unbroken run's.
    out, _ = clean.communicate(timeout=DEADLINE_S * 2)
    reference = json.loads(out)
    assert [EpisodeResult.model_validate(e).identity() for e in summary["episodes"]] == [
        EpisodeResult.model_validate(e).identity() for e in reference["episodes"]
    ]
