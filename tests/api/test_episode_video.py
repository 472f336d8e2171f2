"""Episode frames and videos from real runs, served by a real ``agentcanvas serve``.

Two real ``agentcanvas eval babyai_oracle --frames failures`` runs, at 1 and 3 workers, with
a step budget tight enough that some episodes fail: the records are identical, the same
episodes keep frames (exactly those that did not succeed), frames are >= 256 px, and a
failed episode's video plays (decoded here with imageio) and downloads as an attachment,
while a successful one's is a 404 saying it has no frames.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import pytest
from PIL import Image

from agentcanvas.eval.config import EvalRun
from agentcanvas.eval.invariance import diff_runs
from support.backend import Backend
from support.cli import run_cli

API = "/api/eval/v2"
N_PER_TASK = 2  # babyai_oracle has 2 tasks; a budget of 5 steps fails some GoToLocal episodes
STEP_BUDGET = 5


@dataclass(frozen=True)
class Runs:
    workspace: Path
    one: dict[str, Any]  # summary of the 1-worker run
    three: dict[str, Any]  # summary of the 3-worker run

    def episode_dir(self, summary: dict[str, Any], index: int) -> Path:
        return self.workspace / "outputs/eval_runs" / summary["run_id"] / f"episodes/ep{index:04d}"


def _eval(workspace: Path, workers: int) -> dict[str, Any]:
    done = run_cli(
        "eval", "babyai_oracle", "-n", str(N_PER_TASK), "-w", str(workers),
        "--step-budget", str(STEP_BUDGET), "--frames", "failures", "--json",
        workspace=workspace, timeout_s=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    workspace = tmp_path_factory.mktemp("video")
    return Runs(workspace, _eval(workspace, 1), _eval(workspace, 3))


@pytest.fixture(scope="module")
def backend(runs: Runs) -> Iterator[Backend]:
    server = Backend(runs.workspace)
    try:
        yield server
    finally:
        server.close()


def _succeeded(episode: dict[str, Any]) -> bool:
    return episode["status"] == "completed" and episode["metrics"].get("success") == 1


def _frames(runs: Runs, summary: dict[str, Any], index: int) -> list[Path]:
    return sorted((runs.episode_dir(summary, index) / "assets").glob("step*_env.png"))


def test_failures_keeps_frames_of_the_failed_episodes_only_at_any_worker_count(
    runs: Runs,
) -> None:
    assert runs.one["config"]["frames"] == "failures"
    one, three = EvalRun.model_validate(runs.one), EvalRun.model_validate(runs.three)
    assert diff_runs(one, three) == []  # what is kept of the frames changes no record
    failed = [e["index"] for e in runs.one["episodes"] if not _succeeded(e)]
    assert failed and len(failed) < len(runs.one["episodes"]), "need successes and failures"
    for summary in (runs.one, runs.three):
        kept = [e["index"] for e in summary["episodes"] if _frames(runs, summary, e["index"])]
        assert kept == failed
    record = runs.one["episodes"][failed[0]]
    frames = _frames(runs, runs.one, failed[0])
    assert len(frames) == record["steps"]  # one frame per loop step (the first observes)
    with Image.open(frames[-1]) as image:
        assert min(image.size) >= 256


def test_a_failed_episode_video_plays_and_downloads(
    runs: Runs, backend: Backend, tmp_path: Path
) -> None:
    episode = next(e for e in runs.one["episodes"] if not _succeeded(e))
    url = f"{API}/runs/{runs.one['run_id']}/episodes/{episode['index']}/video.mp4"
    played = backend.http.get(url)
    assert played.status_code == 200, played.text
    assert played.headers["content-type"] == "video/mp4"
    assert played.headers["content-disposition"].startswith("inline")
    (tmp_path / "played.mp4").write_bytes(played.content)
    with imageio.get_reader(tmp_path / "played.mp4", format="FFMPEG") as reader:  # type: ignore[arg-type]
        decoded = [frame for frame in reader]  # not list(reader): its len is infinite
    assert len(decoded) == len(_frames(runs, runs.one, episode["index"]))
    assert min(decoded[0].shape[:2]) >= 256
    assert (runs.episode_dir(runs.one, episode["index"]) / "video.mp4").is_file()  # cached

    saved = backend.http.get(url, params={"download": "true"})
    assert saved.status_code == 200 and saved.content == played.content
    expected = f"{runs.one['run_id']}_ep{episode['index']:04d}.mp4"
    assert saved.headers["content-disposition"] == f'attachment; filename="{expected}"'


def test_a_successful_episode_has_no_video_and_says_why(runs: Runs, backend: Backend) -> None:
    episode = next(e for e in runs.one["episodes"] if _succeeded(e))
    url = f"{API}/runs/{runs.one['run_id']}/episodes/{episode['index']}/video.mp4"
    response = backend.http.get(url)
    assert response.status_code == 404
    assert "has no frames" in response.json()["detail"]
    assert "--frames" in response.json()["detail"]


def test_failure_videos_lists_the_first_failed_episodes(runs: Runs, backend: Backend) -> None:
    response = backend.http.get(f"{API}/runs/{runs.three['run_id']}/failure_videos?limit=1")
    assert response.status_code == 200, response.text
    body = response.json()
    failed = [e for e in runs.three["episodes"] if not _succeeded(e)]
    assert body["frames"] == "failures" and body["failed"] == len(failed)
    assert [v["index"] for v in body["videos"]] == [failed[0]["index"]]
    assert backend.http.get(body["videos"][0]["video"]).status_code == 200
