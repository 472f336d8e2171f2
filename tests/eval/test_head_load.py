"""The head under more load than it can record: dispatch waits, nothing is lost, and every
acknowledged episode survives a SIGKILL of the eval process right after its acknowledgement.

Synthetic workers (``support.synthetic_workers``) finish episodes instantly, so the real
recording path — RunRecorder, its group-commit writer, the dispatcher — is the bottleneck.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentcanvas.eval import record_writer
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.records import read_index
from agentcanvas.eval.store import RunDir
from support.synthetic_workers import SyntheticWorkers, synthetic_runner

pytestmark = pytest.mark.timeout(60)

EPISODES = 300
WORKERS = 8
MAX_PENDING = 4


def on_disk(run_dir: RunDir) -> dict[int, dict[str, object]]:
    return {
        int(path.parent.name[2:]): json.loads(path.read_text())
        for path in run_dir.episodes_dir.glob("ep*/episode.json")
    }


async def test_a_head_behind_slows_dispatch_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_writer, "MAX_PENDING", MAX_PENDING)  # a small queue: full at once
    workers = SyntheticWorkers(WORKERS)
    runner = synthetic_runner(tmp_path / "run", EPISODES, workers)
    summary = await runner.execute()

    # Dispatch waited for the head: a worker took an episode only while fewer than the
    # queue plus one in hand per worker were unrecorded — never the whole run at once.
    assert max(workers.gaps) <= MAX_PENDING + WORKERS
    assert runner.recorder.writer.pending == 0
    # Nothing dropped: every episode on disk, in the index and in the summary, in order.
    assert summary.status == "completed" and summary.episodes_done == EPISODES
    files = on_disk(runner.run_dir)
    assert sorted(files) == list(range(EPISODES))
    index = read_index(runner.run_dir)
    assert sorted(r["index"] for r in index.records) == list(range(EPISODES))
    assert [e.index for e in summary.episodes] == list(range(EPISODES))
    for episode in summary.episodes:
        assert EpisodeResult.model_validate(files[episode.index]) == episode
    assert all(runner.run_dir.episode_log_path(i).stat().st_size > 0 for i in range(EPISODES))


@pytest.mark.parametrize("kill_at", [1, 37])
def test_every_acknowledged_episode_survives_a_sigkill_right_after(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]], kill_at: int
) -> None:
    run_root = tmp_path / "run"
    tests = Path(__file__).resolve().parents[1]
    path = [str(tests), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "support.synthetic_workers", str(run_root), "200", str(kill_at)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    procs.append(proc)
    out, _ = proc.communicate(timeout=45)
    assert proc.returncode == -9  # it killed itself at the acknowledgement, mid-run
    acknowledged = [int(line) for line in out.split()]
    assert len(acknowledged) == kill_at

    run_dir = RunDir(run_root)
    files = on_disk(run_dir)
    indexed = {r["index"] for r in read_index(run_dir).records}
    for index in acknowledged:
        record = EpisodeResult.model_validate(files[index])
        assert record.index == index and record.status == "completed"
        assert index in indexed
        assert run_dir.episode_log_path(index).stat().st_size > 0
