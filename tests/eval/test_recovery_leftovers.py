"""What a writer killed at the wrong moment leaves behind, cleaned up by the next writer:
temp files of an atomic write it never finished, and a run killed between its final summary
and ``_DONE`` (it had ended: not ``aborted``)."""

from __future__ import annotations

from pathlib import Path

from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.recovery import reconcile_summary
from agentcanvas.eval.runlock import hold
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json, read_json
from agentcanvas.scheduler.restart import settle_exited

N = 3


def _run_folder(root: Path, status: str, complete: bool) -> RunDir:
    run_dir = RunDir(root / "20260101_000000")
    run_dir.create()
    config = EvalConfig(graph_name="babyai_oracle", episode_count=N, tasks=["t"])
    records = [
        EpisodeResult(index=i, episode_index=i, seed=i, status="completed", task="t",
                      metrics={"success": 1})
        for i in range(N)
    ]  # fmt: skip
    for record in records:
        run_dir.episode_dir(record.index).mkdir(parents=True)
        atomic_write_json(run_dir.episode_json_path(record.index), record.model_dump(mode="json"))
    run = EvalRun(
        run_id=run_dir.root.name,
        status=status,  # type: ignore[arg-type]
        graph_name="babyai_oracle",
        config=config,
        episodes_total=N,
        episodes_done=N,
        episodes=records if complete else [],
        episodes_complete=complete,
    )
    atomic_write_json(run_dir.summary_path, run.model_dump(mode="json"))
    return run_dir


def test_stale_temp_files_are_removed_when_the_summary_is_rebuilt(
    tmp_path: Path,
) -> None:
    run_dir = _run_folder(tmp_path, "running", complete=False)
    stale = [
        run_dir.root / ".summary.json.0123456789ab.tmp",
        run_dir.episode_dir(1) / ".episode.json.ba9876543210.tmp",
    ]
    for path in stale:
        path.write_text('{"half": ')  # a write killed before its rename
    with hold(run_dir):
        run = reconcile_summary(run_dir)
    assert not any(path.exists() for path in stale)
    assert [e.index for e in run.episodes] == list(range(N))
    assert run.episodes_aggregated == N
    assert run.episodes_complete is True  # it holds every record the folders hold


def test_a_rebuilt_summary_on_disk_says_it_holds_every_record(tmp_path: Path) -> None:
    run_dir = _run_folder(tmp_path, "running", complete=False)
    with hold(run_dir):
        status = settle_exited(run_dir, cancelled=False, returncode=-9)
    summary = read_json(run_dir.summary_path)
    assert status == summary["status"] == "aborted"
    assert summary["episodes_complete"] is True
    assert [e["index"] for e in summary["episodes"]] == list(range(N))


def test_a_run_killed_after_its_final_summary_keeps_its_status(tmp_path: Path) -> None:
    run_dir = _run_folder(tmp_path, "completed", complete=True)
    assert not run_dir.is_done()
    with hold(run_dir):
        status = settle_exited(run_dir, cancelled=False, returncode=-9)
    assert status == "completed" and run_dir.is_done()
    assert read_json(run_dir.summary_path)["status"] == "completed"


def test_a_run_killed_before_its_final_summary_is_aborted(tmp_path: Path) -> None:
    run_dir = _run_folder(tmp_path, "running", complete=False)
    with hold(run_dir):
        status = settle_exited(run_dir, cancelled=False, returncode=-9)
    assert status == "aborted" and not run_dir.is_done()
