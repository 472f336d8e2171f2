"""Run folders to export: a real finished run, and a live copy of it stopped mid-way."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcanvas.eval.records import read_index
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_bytes, atomic_write_json, encode_jsonl_line, read_json
from support.cli import run_cli

EPISODES_PER_TASK = 3  # babyai_oracle has two tasks: 6 episodes
LIVE_DONE = 4  # the live copy has the first 4 records in its index and no final summary
LIVE_ID = "20000101_000000"  # older than any run made now, so it lists first


@dataclass(frozen=True)
class ExportRuns:
    workspace: Path
    done_id: str
    live_id: str

    def summary(self, run_id: str) -> dict[str, Any]:
        summary: dict[str, Any] = read_json(self.runs / run_id / "summary.json")
        return summary

    @property
    def runs(self) -> Path:
        return self.workspace / "outputs" / "eval_runs"


def make_runs(workspace: Path) -> ExportRuns:
    """Run ``babyai_oracle`` for real in ``workspace``; copy it as a live run."""
    done = run_cli(
        "eval",
        "babyai_oracle",
        "-n",
        str(EPISODES_PER_TASK),
        "-w",
        "1",
        workspace=workspace,
        timeout_s=240,
    )
    assert done.returncode == 0, done.stderr
    runs = workspace / "outputs" / "eval_runs"
    (done_id,) = [p.name for p in runs.iterdir()]
    _live_copy(RunDir(runs / done_id), RunDir(runs / LIVE_ID))
    return ExportRuns(workspace, done_id, LIVE_ID)


def _live_copy(source: RunDir, live: RunDir) -> None:
    """A copy of ``source`` as its writer left it mid-run: counts only in summary.json, the
    first LIVE_DONE records in episodes.jsonl and episode folders, no _DONE. A backend
    started on it sees a live run only while someone holds its lock (`hold`); else it
    recovers it as aborted, its summary rebuilt with every record."""
    shutil.copytree(source.root, live.root)
    live.done_path.unlink()
    records = read_index(live).records[:LIVE_DONE]
    for folder in sorted(live.episodes_dir.glob("ep*"))[LIVE_DONE:]:  # not written yet
        shutil.rmtree(folder)
    path = live.episodes_index_path
    atomic_write_bytes(path, b"".join(encode_jsonl_line(path, r) for r in records))
    summary = read_json(live.summary_path)
    summary.update(
        run_id=live.root.name,
        status="running",
        episodes=[],
        episodes_complete=False,
        episodes_done=LIVE_DONE,
        status_counts={"completed": LIVE_DONE},
    )
    atomic_write_json(live.summary_path, summary)
