"""Frames and videos in the dashboard (real Chromium, real backend, runs queued by the CLI).

Two runs of ``babyai_oracle`` are queued with ``agentcanvas submit`` (a step budget of 5
fails some episodes): one with ``--save-frames``, one with ``--frames failures``. The
episode page plays the video and downloads it (decoded here with imageio); the run page
shows a grid of failure videos; a successful episode of the failures run has no video and
says why. Screenshots: test-artifacts/screenshots/media_*.png.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import imageio.v2 as imageio
import pytest

from support.backend import Backend
from support.browser import CHROMIUM, NO_CHROMIUM, shot
from support.cli import run_cli

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)
pytest.importorskip("playwright.sync_api")

API = "/api/eval/v2"
RUN_DEADLINE_S = 180.0
MEDIA_READY = (
    "v => v.readyState >= 1 && v.videoWidth >= 256 && v.videoHeight >= 256 && v.duration > 0"
)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    server = Backend(tmp_path_factory.mktemp("media"))
    try:
        yield server
    finally:
        server.close()


def _submit(backend: Backend, *flags: str) -> dict[str, Any]:
    done = run_cli(
        "submit", "babyai_oracle", "-n", "2", "-w", "2", "--step-budget", "5", *flags,
        "--url", backend.url, workspace=backend.workspace, timeout_s=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    return backend.wait_status(run_id, "completed", RUN_DEADLINE_S)


@pytest.fixture(scope="module")
def runs(backend: Backend) -> dict[str, dict[str, Any]]:
    return {
        "every": _submit(backend, "--save-frames"),
        "failures": _submit(backend, "--frames", "failures"),
    }


def _failed(summary: dict[str, Any]) -> list[int]:
    return [
        e["index"]
        for e in summary["episodes"]
        if e["status"] != "completed" or e["metrics"].get("success") != 1
    ]


def _frames(backend: Backend, run_id: str, index: int) -> list[int]:
    """The steps of the episode's env frames, as the frame scrubber lists them."""
    listing = backend.http.get(f"{API}/runs/{run_id}/episodes/{index}/frames").json()
    return next((v["steps"] for v in listing["views"] if v["view"] == "env"), [])


def test_a_cli_run_with_save_frames_plays_and_downloads_its_video(
    backend: Backend, runs: dict[str, dict[str, Any]], page: Any, tmp_path: Path
) -> None:
    summary = runs["every"]
    run_id = summary["run_id"]
    assert summary["config"]["frames"] == "every"
    assert all(_frames(backend, run_id, e["index"]) for e in summary["episodes"])
    index = _failed(summary)[0]
    frames = _frames(backend, run_id, index)
    page.goto(f"{backend.url}/#/run/{run_id}/episode/{index}")
    video = page.locator("video#episode-video")
    video.wait_for()
    page.wait_for_function(f"() => ({MEDIA_READY})(document.querySelector('#episode-video'))")
    page.wait_for_function("document.querySelector('img#frame').naturalWidth >= 256")
    assert page.locator("#frame-label").inner_text().startswith(f"frame 1/{len(frames)}")
    # The controls sit under the video: none cover the caption strip at the frames' bottom.
    assert video.get_attribute("controls") is None
    controls = page.locator("#episode-video-box .video-controls")
    video_box, controls_box = video.bounding_box(), controls.bounding_box()
    assert video_box is not None and controls_box is not None
    assert controls_box["y"] >= video_box["y"] + video_box["height"]
    page.click("#episode-video-box .video-play")
    page.wait_for_function("document.querySelector('#episode-video').currentTime > 0")
    shot(page, "media_01_episode_video")

    with page.expect_download() as download:
        page.click("#video-download")
    assert download.value.suggested_filename == f"{run_id}_ep{index:04d}.mp4"
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    with imageio.get_reader(saved, format="FFMPEG") as reader:  # type: ignore[arg-type]
        decoded = [frame for frame in reader]  # not list(reader): its len is infinite
    assert len(decoded) == len(frames)
    assert min(decoded[0].shape[:2]) >= 256
    # The video recorded while the episode ran: nothing was encoded for this request.
    episode = backend.run_dir(run_id) / f"episodes/ep{index:04d}"
    assert saved.read_bytes() == (episode / "assets" / "env.mp4").read_bytes()
    assert not (episode / "video.mp4").exists()


def test_frames_failures_keeps_failures_and_the_run_page_shows_their_videos(
    backend: Backend, runs: dict[str, dict[str, Any]], page: Any
) -> None:
    summary = runs["failures"]
    run_id = summary["run_id"]
    failed = _failed(summary)
    assert failed and len(failed) < len(summary["episodes"])
    kept = [e["index"] for e in summary["episodes"] if _frames(backend, run_id, e["index"])]
    assert kept == failed

    page.goto(f"{backend.url}/#/run/{run_id}")
    cards = page.locator("#failure-video-grid figure.video-card")
    cards.first.wait_for()
    assert [int(i) for i in cards.evaluate_all("cs => cs.map(c => c.dataset.index)")] == failed[:6]
    page.wait_for_function(
        f"() => [...document.querySelectorAll('#failure-video-grid video')].every({MEDIA_READY})"
    )
    assert cards.first.locator("video").get_attribute("controls") is None
    assert cards.first.locator(".video-controls .video-seek").count() == 1
    shot(page, "media_02_failure_video_grid")

    success = next(e["index"] for e in summary["episodes"] if e["index"] not in failed)
    page.goto(f"{backend.url}/#/run/{run_id}/episode/{success}")
    note = page.locator("#video-panel .notice")
    note.wait_for()
    assert "kept no frames" in note.inner_text()
    response = backend.http.get(f"{API}/runs/{run_id}/episodes/{success}/video.mp4")
    assert response.status_code == 404 and "has no frames" in response.json()["detail"]
