"""Frames of real episodes through BatchEvalRunner: recorded as video while the episodes run.

The env ``fenv`` (``support.frames_env``) renders grid-world frames with a caption strip that
the test renders again, pixel for pixel (:func:`support.frames_env.render`), so every frame
served is checked against the frame the node returned at its step: the frame scrubber shows
frame k (nearest of its neighbours, above ``MIN_PSNR_DB``). What an episode leaves is one
``env.mp4``, its video at once (nothing is encoded on request); under ``failures`` only the
failed episodes (odd seeds) keep it; a cancelled run leaves no partial file and no ffmpeg.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
import pytest_asyncio
from PIL import Image

from agentcanvas.eval.config import EvalConfig, EvalRun, FramesMode
from agentcanvas.eval.frame_reader import FrameReader
from agentcanvas.eval.media import episode_video, frame_views
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.graph.model import parse_graph
from agentcanvas.nodes.frame_video import MIN_PSNR_DB
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.eval_runs import wait_for_firings
from support.frames_env import FENV, fenv_graph, psnr, render
from support.polling import poll_until
from support.registry import started_registry
from support.workspace import home_workspace

pytestmark = pytest.mark.asyncio(loop_scope="module")

RUN_DEADLINE_S = 60.0
N_EPISODES = 4


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    graphs = [parse_graph(fenv_graph()), parse_graph(fenv_graph("fslow", latency_ms=300.0))]
    yield from home_workspace(tmp_path_factory, "frames_ws", {"fenv": FENV}, graphs)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def registry(workspace: Path) -> AsyncIterator[WorkspaceComponentRegistry]:
    async with started_registry(workspace, "fgraph", worker_count=2) as reg:
        yield reg


def _runner(
    registry: WorkspaceComponentRegistry, root: Path, graph: str, frames: FramesMode
) -> BatchEvalRunner:
    config = EvalConfig(graph_name=graph, episode_count=N_EPISODES, worker_count=2, frames=frames)
    context = RunContext(
        registry, registry.load_graph(graph), config, RunDir(root), run_id="20260101_000000"
    )
    return BatchEvalRunner(context)


async def _run(
    registry: WorkspaceComponentRegistry, root: Path, frames: FramesMode
) -> tuple[EvalRun, RunDir]:
    runner = _runner(registry, root, "fgraph", frames)
    summary = await asyncio.wait_for(runner.execute(), RUN_DEADLINE_S)
    assert summary.status_counts == {"completed": N_EPISODES}
    return summary, runner.run_dir


def _ffmpeg_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if "ffmpeg" in p.name()]


def _decoded(png: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(png)) as image:
        return np.asarray(image.convert("RGB"))


async def test_each_episode_records_one_video_whose_frame_k_is_the_frame_of_step_k(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    summary, run_dir = await _run(registry, tmp_path / "every", "every")
    reader = FrameReader()
    for record in summary.episodes:
        episode = run_dir.episode_dir(record.index)
        assert [p.name for p in (episode / "assets").iterdir()] == ["env.mp4"]
        view = frame_views(episode / "assets")["env"]
        assert view.steps == tuple(range(record.steps))  # one frame per loop step
        assert view.index is not None and view.index.width == 256
        # The env's state after loop step k's action, as rendered: render(seed, k + 1).
        rendered = [render(record.seed, j) for j in range(record.steps + 1)]
        for k in range(record.steps):
            got = _decoded(reader.png(view, k, "env"))
            scores = [psnr(frame, got) for frame in rendered]
            assert scores[k + 1] >= MIN_PSNR_DB, (record.index, k)
            assert max(range(len(scores)), key=scores.__getitem__) == k + 1  # no other frame
        # The episode's video is the recorded file itself: nothing encoded on request.
        assert episode_video(episode, f"episode {record.index}") == episode / "assets/env.mp4"
        assert not (episode / "video.mp4").exists()
    assert not _ffmpeg_children()


async def test_frames_failures_keeps_the_videos_of_failed_episodes_only(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    summary, run_dir = await _run(registry, tmp_path / "failures", "failures")
    failed = [e.index for e in summary.episodes if e.metrics["success"] == 0]
    assert failed and len(failed) < N_EPISODES, "need successes and failures"
    for record in summary.episodes:
        assets = run_dir.episode_assets_dir(record.index)
        kept = sorted(p.name for p in assets.iterdir()) if assets.exists() else []
        assert kept == (["env.mp4"] if record.index in failed else []), record.index
    assert not _ffmpeg_children()


async def test_a_run_cancelled_mid_episode_leaves_no_partial_video_and_no_ffmpeg(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    runner = _runner(registry, tmp_path / "cancelled", "fslow", "every")
    running = asyncio.create_task(runner.execute())
    try:
        await wait_for_firings(runner.run_dir.episode_log_path(0), 2, RUN_DEADLINE_S, 0.02)
        await asyncio.to_thread(poll_until, _ffmpeg_children, "a recording to be open", 30)
    finally:
        runner.cancel()
        summary = await asyncio.wait_for(running, RUN_DEADLINE_S)
    assert summary.status == "cancelled"
    leftovers = sorted(p.name for p in runner.run_dir.root.rglob("*partial*"))
    assert leftovers == []
    # The episodes cut short keep what they recorded (frames every), as a finished video.
    assert summary.episodes and {e.status for e in summary.episodes} == {"cancelled"}
    for record in summary.episodes:
        view = frame_views(runner.run_dir.episode_assets_dir(record.index))["env"]
        assert view.steps == tuple(range(record.steps))
    assert not _ffmpeg_children()
