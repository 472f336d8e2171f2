"""Recording an attempt's frames (``eval.media.recorded_frames``) and reading both layouts back.

Frames go through the node API's ``save_frame`` as the executor calls it, into a real ffmpeg;
what a finished recording leaves is one ``{view}.mp4`` per view; a dropped or failed one
leaves nothing (no file, no folder, no ffmpeg); a new attempt deletes what the last one left.
An older run's folder (PNG frames) still lists, plays and serves its frames.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import psutil
import pytest
from PIL import Image

from agentcanvas.errors import AssetNotFoundError, DamagedRunError, StateError
from agentcanvas.eval.frame_reader import FrameReader
from agentcanvas.eval.media import episode_video, frame_views, has_frames, recorded_frames
from agentcanvas.nodes import CallContext, save_frame
from agentcanvas.nodes.frame_video import MIN_PSNR_DB, VideoEncoder
from support.frames_env import psnr, render

pytestmark = pytest.mark.asyncio


def _save(assets: Path, view: str, step: int, seed: int = 5) -> str:
    ctx = CallContext(node_id=view, step=step, asset_dir=str(assets))
    return save_frame(render(seed, step), ctx)


def _ffmpeg_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if "ffmpeg" in p.name()]


def _decoded(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("RGB"))


async def test_a_finished_recording_is_one_mp4_per_view_with_its_steps(tmp_path: Path) -> None:
    assets = tmp_path / "ep0000" / "assets"
    async with recorded_frames(str(assets)) as frames:
        for step in range(6):
            assert _save(assets, "env", step) == "env.mp4"
            if step % 2:
                _save(assets, "cam", step, seed=9)
        await frames.finish(keep=True)
    assert sorted(p.name for p in assets.iterdir()) == ["cam.mp4", "env.mp4"]
    views = frame_views(assets)
    assert views["env"].steps == (0, 1, 2, 3, 4, 5) and views["cam"].steps == (1, 3, 5)
    assert views["env"].layout == "video" and views["env"].index is not None
    assert (views["env"].index.width, views["env"].index.height) == (256, render(5, 0).shape[0])
    reader = FrameReader()
    for position, step in enumerate(views["cam"].steps):
        got = _decoded(reader.png(views["cam"], position, "cam"))
        assert psnr(render(9, step), got) >= MIN_PSNR_DB
    with pytest.raises(AssetNotFoundError, match="has 3 frame"):
        reader.png(views["cam"], 3, "cam")
    assert not _ffmpeg_children()


async def test_stepping_through_frames_decodes_once_per_keyframe_stretch(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    async with recorded_frames(str(assets)) as frames:
        for step in range(40):
            _save(assets, "env", step)
        await frames.finish(keep=True)
    view = frame_views(assets)["env"]
    reader = FrameReader()
    shown = [_decoded(reader.png(view, k, "env")) for k in range(40)]
    assert reader.decodes == 2  # frames 0-31, then 32-39
    assert all(psnr(render(5, k), frame) >= MIN_PSNR_DB for k, frame in enumerate(shown))


async def test_a_recording_not_kept_or_cut_short_leaves_nothing(tmp_path: Path) -> None:
    dropped = tmp_path / "dropped" / "assets"
    async with recorded_frames(str(dropped)) as frames:
        for step in range(4):
            _save(dropped, "env", step)
        await frames.finish(keep=False)  # frames failures: this episode succeeded
    assert not dropped.exists()

    failed = tmp_path / "failed" / "assets"
    with pytest.raises(RuntimeError, match="the episode's task failed"):
        async with recorded_frames(str(failed)):
            for step in range(4):
                _save(failed, "env", step)
            raise RuntimeError("the episode's task failed")
    assert not failed.exists()
    assert not _ffmpeg_children()
    # Once the recording is closed, a frame saved there is no longer recorded as video.
    assert _save(failed, "env", 0) == "step0000_env.png"


async def test_a_new_attempt_leaves_only_its_own_frames(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    async with recorded_frames(str(assets)) as first:
        for step in range(8):
            _save(assets, "env", step, seed=1)
            _save(assets, "cam", step, seed=1)
        await first.finish(keep=True)
    (assets / "step0009_env.png").write_bytes(b"\x89PNG left by an older run")
    (assets / ".env.partial.mp4").write_bytes(b"left by a crashed attempt")
    async with recorded_frames(str(assets)) as second:
        for step in range(3):
            _save(assets, "env", step, seed=2)
        await second.finish(keep=True)
    assert sorted(p.name for p in assets.iterdir()) == ["env.mp4"]
    view = frame_views(assets)["env"]
    assert view.steps == (0, 1, 2)
    got = _decoded(FrameReader().png(view, 2, "env"))
    assert psnr(render(2, 2), got) >= MIN_PSNR_DB  # the second attempt's frame
    assert psnr(render(2, 2), got) > psnr(render(1, 2), got)


def _old_layout_episode(root: Path, n_frames: int) -> Path:
    """An episode folder as runs wrote it before frames were video: one PNG per step."""
    episode = root / "ep0000"
    for step in range(n_frames):  # with no recording open, save_frame writes the old layout
        assert _save(episode / "assets", "env", step, seed=4) == f"step{step:04d}_env.png"
    (episode / "episode.json").write_text(json.dumps({"index": 0}))
    return episode


async def test_an_old_png_folder_lists_plays_and_serves_its_frames(tmp_path: Path) -> None:
    episode = _old_layout_episode(tmp_path, 6)
    view = frame_views(episode / "assets")["env"]
    assert view.layout == "png" and view.steps == tuple(range(6))
    png = FrameReader().png(view, 3, "env")
    assert png == (episode / "assets" / "step0003_env.png").read_bytes()  # the file itself
    assert np.array_equal(_decoded(png), render(4, 3))

    video = episode_video(episode, "episode 0")
    assert video == episode / "video.mp4"  # made on request, cached beside episode.json
    with imageio.get_reader(video, format="FFMPEG") as reader:  # type: ignore[arg-type]
        decoded = [frame for frame in reader]
        assert reader.get_meta_data()["fps"] == 4
    assert len(decoded) == 6 and psnr(render(4, 5), decoded[5]) >= MIN_PSNR_DB
    made = video.stat().st_mtime_ns
    assert episode_video(episode, "episode 0").stat().st_mtime_ns == made  # not made again


async def test_episode_video_says_why_there_is_none(tmp_path: Path) -> None:
    running = tmp_path / "running"
    (running / "assets").mkdir(parents=True)
    with pytest.raises(StateError, match="has not ended yet"):
        episode_video(running, "episode 1")
    ended = tmp_path / "ended"
    ended.mkdir()
    (ended / "episode.json").write_text("{}")
    with pytest.raises(AssetNotFoundError, match=r"has no frames.*--frames"):
        episode_video(ended, "episode 2")


async def test_a_damaged_frames_index_is_named_and_shows_no_frames(tmp_path: Path) -> None:
    assets = tmp_path / "ep0003" / "assets"
    assets.mkdir(parents=True)
    encoder = VideoEncoder(assets / ".env.partial.mp4", 8, 8)
    encoder.add(np.zeros((8, 8, 3), np.uint8))
    encoder.finish(assets / "env.mp4", 4, note=b'{"view": "env", "frames": "many"}')
    with pytest.raises(DamagedRunError, match=r"ep0003/assets/env\.mp4: its frames index"):
        frame_views(assets)
    assert not has_frames(assets)
    (assets / "env.mp4").unlink()
    (assets / "clip.mp4").write_bytes(b"\x00\x00\x00\x08free")  # an mp4 that is no recording
    assert frame_views(assets) == {}
