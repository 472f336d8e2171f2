"""Episode frames and videos from real runs, served by a real ``agentcanvas serve``.

Two real ``agentcanvas eval babyai_oracle --frames failures`` runs, at 1 and 3 workers, with
a step budget tight enough that some episodes fail: the records are identical, the same
episodes keep frames (exactly those that did not succeed), one ``env.mp4`` each, recorded
while the episode ran, with a frame per step >= 256 px. A failed episode's video is that
file, served at once (decoded here with imageio) and as an attachment; a successful one's
is a 404 saying it has no frames. The frame scrubber's routes list the frames and serve
frame k as PNG (the video's frame k). The 3-worker run is then rewritten as older runs
wrote frames (one PNG per step, no video) before the backend starts: its frames and videos
still play.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import numpy as np
import pytest
from PIL import Image

from agentcanvas.eval.config import EvalRun
from agentcanvas.eval.frame_reader import FrameReader
from agentcanvas.eval.invariance import diff_runs
from agentcanvas.eval.media import frame_views
from agentcanvas.nodes.frame_video import MIN_PSNR_DB
from support.backend import Backend
from support.cli import run_cli
from support.frames_env import psnr

API = "/api/eval/v2"
N_PER_TASK = 2  # babyai_oracle has 2 tasks; a budget of 5 steps fails some GoToLocal episodes
STEP_BUDGET = 5


@dataclass(frozen=True)
class Runs:
    workspace: Path
    one: dict[str, Any]  # summary of the 1-worker run
    three: dict[str, Any]  # summary of the 3-worker run, its frames as PNGs (older runs)

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


def _as_older_run(runs: Runs, summary: dict[str, Any]) -> None:
    """Each recorded view of the run becomes PNG frames (``step{step:04d}_{view}.png``)."""
    reader = FrameReader()
    for episode in summary["episodes"]:
        assets = runs.episode_dir(summary, episode["index"]) / "assets"
        for name, view in frame_views(assets).items():
            assert view.video is not None, "precondition: recorded as video"
            for position, step in enumerate(view.steps):
                png = reader.png(view, position, name)
                (assets / f"step{step:04d}_{name}.png").write_bytes(png)
            view.video.unlink()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    workspace = tmp_path_factory.mktemp("video")
    made = Runs(workspace, _eval(workspace, 1), _eval(workspace, 3))
    _as_older_run(made, made.three)
    return made


@pytest.fixture(scope="module")
def backend(runs: Runs) -> Iterator[Backend]:
    with Backend(runs.workspace) as server:
        yield server


def _succeeded(episode: dict[str, Any]) -> bool:
    return episode["status"] == "completed" and episode["metrics"].get("success") == 1


def _steps(runs: Runs, summary: dict[str, Any], index: int) -> tuple[int, ...]:
    """The steps of the episode's env frames, in either layout (none: no frames)."""
    view = frame_views(runs.episode_dir(summary, index) / "assets").get("env")
    return view.steps if view is not None else ()


def _decoded(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("RGB"))


def _video_frames(path: Path) -> list[np.ndarray]:
    with imageio.get_reader(path, format="FFMPEG") as reader:  # type: ignore[arg-type]
        return [frame for frame in reader]  # not list(reader): its len is infinite


def test_failures_keeps_frames_of_the_failed_episodes_only_at_any_worker_count(
    runs: Runs,
) -> None:
    assert runs.one["config"]["frames"] == "failures"
    one, three = EvalRun.model_validate(runs.one), EvalRun.model_validate(runs.three)
    assert diff_runs(one, three) == []  # what is kept of the frames changes no record
    failed = [e["index"] for e in runs.one["episodes"] if not _succeeded(e)]
    assert failed and len(failed) < len(runs.one["episodes"]), "need successes and failures"
    for summary in (runs.one, runs.three):
        kept = [e["index"] for e in summary["episodes"] if _steps(runs, summary, e["index"])]
        assert kept == failed
    for index in failed:
        assets = runs.episode_dir(runs.one, index) / "assets"
        assert [p.name for p in assets.iterdir()] == ["env.mp4"]  # one file: no PNGs
        view = frame_views(assets)["env"]
        assert view.steps == tuple(range(runs.one["episodes"][index]["steps"]))  # one a step
        assert view.index is not None and min(view.index.width, view.index.height) >= 256


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
    decoded = _video_frames(tmp_path / "played.mp4")
    assert len(decoded) == len(_steps(runs, runs.one, episode["index"]))
    assert min(decoded[0].shape[:2]) >= 256
    # The recorded file itself: nothing was encoded on request, nothing cached beside it.
    folder = runs.episode_dir(runs.one, episode["index"])
    assert played.content == (folder / "assets" / "env.mp4").read_bytes()
    assert not (folder / "video.mp4").exists()

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


def test_the_scrubber_lists_the_frames_and_serves_frame_k_of_the_video(
    runs: Runs, backend: Backend, tmp_path: Path
) -> None:
    run_id = runs.one["run_id"]
    episode = next(e for e in runs.one["episodes"] if not _succeeded(e))
    base = f"{API}/runs/{run_id}/episodes/{episode['index']}"
    listing = backend.http.get(f"{base}/frames").json()
    assert listing["main"] == "env"
    ((view,),) = [listing["views"]]
    steps = list(range(episode["steps"]))
    assert (view["view"], view["layout"], view["frames"], view["steps"]) == (
        "env", "video", len(steps), steps,
    )  # fmt: skip
    (tmp_path / "env.mp4").write_bytes(backend.http.get(f"{base}/video.mp4").content)
    video = _video_frames(tmp_path / "env.mp4")
    for k in steps:
        frame = backend.http.get(f"{base}/frames/env/{k}")
        assert frame.status_code == 200 and frame.headers["content-type"] == "image/png"
        got = _decoded(frame.content)
        assert got.shape == (view["height"], view["width"], 3)
        assert psnr(video[k], got) >= MIN_PSNR_DB  # the video's frame k
        others = [psnr(video[j], got) for j in steps if j != k]
        assert all(psnr(video[k], got) >= score for score in others)
    past = backend.http.get(f"{base}/frames/env/{len(steps)}")
    assert past.status_code == 404 and f"has {len(steps)} frame(s)" in past.json()["detail"]
    other = backend.http.get(f"{base}/frames/wrist/0")
    assert other.status_code == 404 and "views with frames: env" in other.json()["detail"]
    success = next(e for e in runs.one["episodes"] if _succeeded(e))
    none = backend.http.get(f"{API}/runs/{run_id}/episodes/{success['index']}/frames").json()
    assert (none["main"], none["views"]) == (None, [])


def test_an_older_runs_png_frames_still_list_scrub_and_play(
    runs: Runs, backend: Backend, tmp_path: Path
) -> None:
    run_id = runs.three["run_id"]
    failed = [e for e in runs.three["episodes"] if not _succeeded(e)]
    assert len(failed) >= 2, "precondition: the failure-videos test plays only the first"
    episode = failed[-1]
    folder = runs.episode_dir(runs.three, episode["index"])
    pngs = sorted((folder / "assets").glob("step*_env.png"))
    assert len(pngs) == episode["steps"] and not list(folder.rglob("*.mp4"))
    base = f"{API}/runs/{run_id}/episodes/{episode['index']}"
    (view,) = backend.http.get(f"{base}/frames").json()["views"]
    assert (view["layout"], view["steps"]) == ("png", list(range(episode["steps"])))
    last = backend.http.get(f"{base}/frames/env/{len(pngs) - 1}")
    assert last.status_code == 200 and last.content == pngs[-1].read_bytes()  # the file itself
    played = backend.http.get(f"{base}/video.mp4")
    assert played.status_code == 200, played.text
    assert (folder / "video.mp4").is_file()  # made on this first request, then cached
    (tmp_path / "old.mp4").write_bytes(played.content)
    decoded = _video_frames(tmp_path / "old.mp4")
    assert len(decoded) == len(pngs)
    assert psnr(_decoded(pngs[-1].read_bytes()), decoded[-1]) >= MIN_PSNR_DB
