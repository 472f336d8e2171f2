"""The frame recorder's codec: frames piped to a real ffmpeg as they come, an mp4 at the end.

Frames are grid-world frames with caption text (``support.frames_env.render``), so the bound
checked is the one a researcher reads frames under: every frame decodes to the frame that was
rendered (nearest of its neighbours) with a PSNR above ``MIN_PSNR_DB``, at its exact size,
and the video's header says the frame rate and duration chosen at the end.
"""

from __future__ import annotations

from pathlib import Path

import imageio.v2 as imageio
import numpy as np
import psutil
import pytest

from agentcanvas.errors import RunError
from agentcanvas.nodes.frame_video import (
    KEYFRAME_EVERY,
    MIN_PSNR_DB,
    VideoEncoder,
    decode_frames,
    read_note,
    video_fps,
)
from support.frames_env import psnr, render
from support.polling import poll_until


def _encode(tmp_path: Path, frames: list[np.ndarray], fps: int, note: bytes = b"") -> Path:
    height, width = frames[0].shape[:2]
    encoder = VideoEncoder(tmp_path / ".env.partial.mp4", width, height)
    for frame in frames:
        encoder.add(frame)
    target = tmp_path / "env.mp4"
    encoder.finish(target, fps, note)
    return target


def _meta(path: Path) -> tuple[dict[str, object], list[np.ndarray]]:
    with imageio.get_reader(path, format="FFMPEG") as reader:  # type: ignore[arg-type]
        return reader.get_meta_data(), [frame for frame in reader]


@pytest.mark.parametrize("n_frames", [2, 9, 70])
def test_the_mp4_plays_each_frame_once_at_the_rate_set_at_the_end(
    tmp_path: Path, n_frames: int
) -> None:
    frames = [render(7, step) for step in range(n_frames)]
    fps = video_fps(n_frames)
    video = _encode(tmp_path, frames, fps, note=b'{"view": "env"}')
    meta, decoded = _meta(video)
    assert meta["fps"] == fps and meta["codec"] == "h264"
    assert meta["duration"] == pytest.approx(n_frames / fps, abs=0.01)
    assert len(decoded) == n_frames
    assert decoded[0].shape == frames[0].shape  # 256 wide, 256 + caption tall: even sides
    assert read_note(video) == b'{"view": "env"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["env.mp4"]  # no partial left


def test_any_frame_decodes_to_the_frame_rendered_within_the_bound(tmp_path: Path) -> None:
    n_frames = 2 * KEYFRAME_EVERY + 5
    frames = [render(3, step) for step in range(n_frames)]
    fps = video_fps(n_frames)
    video = _encode(tmp_path, frames, fps)
    height, width = frames[0].shape[:2]
    picks = [0, 1, KEYFRAME_EVERY - 1, KEYFRAME_EVERY, KEYFRAME_EVERY + 7, n_frames - 1]
    for k in picks:
        (got,) = decode_frames(video, k, 1, fps, (width, height))
        assert got.shape == frames[k].shape
        assert psnr(frames[k], got) >= MIN_PSNR_DB, k
        caption = slice(256, None)  # the text strip under the board
        assert psnr(frames[k][caption], got[caption]) >= MIN_PSNR_DB, k
        neighbours = [j for j in (k - 1, k + 1) if 0 <= j < n_frames]
        assert all(psnr(frames[k], got) > psnr(frames[j], got) for j in neighbours), k
    stretch = decode_frames(video, KEYFRAME_EVERY, KEYFRAME_EVERY, fps, (width, height))
    assert len(stretch) == KEYFRAME_EVERY
    assert all(psnr(frames[KEYFRAME_EVERY + i], f) >= MIN_PSNR_DB for i, f in enumerate(stretch))
    tail = decode_frames(video, 2 * KEYFRAME_EVERY, KEYFRAME_EVERY, fps, (width, height))
    assert len(tail) == 5  # fewer at the end


@pytest.mark.parametrize(("width", "height"), [(5, 3), (1, 1), (4, 4)])
def test_odd_and_tiny_frames_keep_their_size_and_flat_colours(
    tmp_path: Path, width: int, height: int
) -> None:
    frames = [np.full((height, width, 3), v, np.uint8) for v in (10, 200, 37)]
    video = _encode(tmp_path, frames, 4)
    decoded = decode_frames(video, 0, 10, 4, (width, height))
    assert [f.shape for f in decoded] == [(height, width, 3)] * 3
    for frame, got in zip(frames, decoded, strict=True):
        assert int(np.abs(got.astype(int) - frame).max()) <= 2


def test_a_frame_of_another_size_is_cropped_or_padded_and_rgba_loses_alpha(
    tmp_path: Path,
) -> None:
    first = render(1, 0)
    height, width = first.shape[:2]
    smaller = render(1, 1)[: height - 40, : width - 30]
    rgba = np.dstack([render(1, 2), np.full((height, width), 9, np.uint8)])
    larger = np.pad(render(1, 3), ((0, 12), (0, 8), (0, 0)))
    video = _encode(tmp_path, [first, smaller, rgba, larger], 4)
    decoded = decode_frames(video, 0, 4, 4, (width, height))
    assert [f.shape for f in decoded] == [first.shape] * 4
    assert (
        psnr(render(1, 1)[: height - 40, : width - 30], decoded[1][: height - 40, : width - 30])
        > 30
    )
    assert int(decoded[1][height - 20 :, :].max()) <= 16  # the missing part is black
    assert psnr(render(1, 2), decoded[2]) >= MIN_PSNR_DB
    assert psnr(render(1, 3), decoded[3]) >= MIN_PSNR_DB


def test_abort_stops_ffmpeg_and_leaves_nothing(tmp_path: Path) -> None:
    encoder = VideoEncoder(tmp_path / ".env.partial.mp4", 256, 306)
    for step in range(5):
        encoder.add(render(2, step))
    process = poll_until(lambda: encoder._process, "ffmpeg to start", 30)
    poll_until(lambda: (tmp_path / ".env.partial.mp4").exists(), "ffmpeg to open its file", 30)
    encoder.abort()
    assert process.poll() is not None  # killed and reaped, not left running
    assert list(tmp_path.iterdir()) == []
    # Aborted before its thread started ffmpeg: ffmpeg never starts, nothing is written.
    early = VideoEncoder(tmp_path / ".cam.partial.mp4", 8, 8)
    early.add(np.zeros((8, 8, 3), np.uint8))
    early.abort()
    assert early._process is None or early._process.poll() is not None
    assert list(tmp_path.iterdir()) == []
    assert not [p for p in psutil.Process().children(recursive=True) if "ffmpeg" in p.name()]


def test_a_video_that_cannot_be_made_is_a_run_error_and_leaves_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no such folder" / ".env.partial.mp4"
    encoder = VideoEncoder(missing, 8, 8)
    encoder.add(np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(RunError, match="ffmpeg"):
        encoder.finish(tmp_path / "env.mp4", 4)
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_an_mp4_has_no_note_and_does_not_decode(tmp_path: Path) -> None:
    junk = tmp_path / "env.mp4"
    junk.write_bytes(b"\x00\x00\x00\x10notanmp4" + bytes(64))
    assert read_note(junk) is None
    with pytest.raises(RunError, match=r"cannot decode env\.mp4"):
        decode_frames(junk, 0, 1, 4, (8, 8))


def test_video_fps_plays_an_episode_in_about_ten_seconds() -> None:
    assert [video_fps(n) for n in (1, 40, 100, 250, 300, 5000)] == [4, 4, 10, 25, 30, 30]
