"""A foreground run interrupted by Ctrl-C says so in a sentence: how far it got, how to resume.

The run is a real process (``asyncio.run(run_foreground(...))``, as the CLI runs it) on a
real env server, sent a real SIGINT once an episode is recorded; the folder it reserved
beforehand is read back with ``foreground.outcome``.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.foreground import interrupted_error, outcome, record_failure
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json
from agentcanvas.graph.model import Graph, parse_graph
from support.counting_env import TENV
from support.polling import poll_until
from support.workspace import home_workspace

EPISODES = 6
EXIT_DEADLINE_S = 60.0
RUN_ID = "20260101_000000"

RUN = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from agentcanvas.eval.config import EvalConfig
    from agentcanvas.eval.foreground import run_foreground
    from agentcanvas.eval.run_setup import run_registry
    from agentcanvas.eval.store import RunDir
    from agentcanvas.server.registry import WorkspaceComponentRegistry

    async def main(run_dir: RunDir) -> None:
        registry = WorkspaceComponentRegistry(workspace=Path(sys.argv[1]))
        registry.scan_all()
        config = EvalConfig(graph_name="slowg", episode_count=int(sys.argv[3]))
        await run_foreground(
            run_registry(registry.catalogue, run_dir), registry.load_graph("slowg"), config,
            run_dir=run_dir,
        )

    asyncio.run(main(RunDir(Path(sys.argv[2]))))
    """
)


def slow_graph() -> Graph:
    return parse_graph(
        {
            "version": 1,
            "name": "slowg",
            "env": {
                "nodeset": "tenv",
                "fields": {"step_latency_ms": 80.0, "base_length": 3},
                "tasks": ["t"],
            },
            "nodes": [
                {"id": "act", "type": "core.constant", "config": {"value": 1}},
                {"id": "env", "type": "tenv.step"},
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [
                {"source": "act.value", "target": "env.action"},
                {"source": "env.metrics", "target": "out.metrics"},
            ],
        }
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from home_workspace(tmp_path_factory, "interrupt_ws", {"tenv": TENV}, [slow_graph()])


def test_ctrl_c_ends_the_run_cancelled_with_a_sentence_naming_the_resume(
    workspace: Path, tmp_path: Path
) -> None:
    run_dir = RunDir(tmp_path / RUN_ID)
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN, str(workspace), str(run_dir.root), str(EPISODES)],
        env={**os.environ, "AGENTCANVAS_HOME": str(workspace)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def recorded() -> bool:
            index = run_dir.episodes_index_path
            return index.is_file() and index.read_bytes().count(b"\n") >= 1

        poll_until(recorded, "an episode recorded", 60.0)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        _, stderr = proc.communicate(timeout=EXIT_DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=EXIT_DEADLINE_S)
    assert proc.returncode != 0, "an interrupted run does not end as a success"
    assert "KeyboardInterrupt" in stderr  # asyncio.run's own: the CLI turns it into a line

    ran = outcome(run_dir)
    assert ran.run_id == RUN_ID and ran.run_dir == run_dir
    summary = ran.summary
    assert summary.status == "cancelled"
    assert summary.error is not None and "CancelledError" not in summary.error
    pattern = rf"interrupted \(Ctrl-C\) after (\d+) of {EPISODES} episodes; "
    pattern += rf"resume with agentcanvas resume {RUN_ID}"
    found = re.fullmatch(pattern, summary.error)
    assert found is not None, summary.error
    assert int(found.group(1)) == summary.episodes_done >= 1
    assert summary.episodes_done < EPISODES
    assert run_dir.done_path.exists()  # ended for good: resumable by the backend's resume


def test_an_interruption_before_the_first_episode_says_so(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / RUN_ID)
    run_dir.create()
    config = EvalConfig(graph_name="slowg", episode_count=EPISODES)
    record_failure(run_dir, None, config, asyncio.CancelledError())
    summary = EvalRun.model_validate(read_json(run_dir.summary_path))
    assert summary.status == "cancelled"
    assert summary.error == (
        "interrupted (Ctrl-C) while it was starting, before any episode ran; "
        f"resume with agentcanvas resume {RUN_ID}"
    )
    assert summary.error == interrupted_error(RUN_ID, "Ctrl-C", None)


def test_an_error_without_a_message_still_says_what_it_was(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / RUN_ID)
    run_dir.create()
    config = EvalConfig(graph_name="slowg", episode_count=EPISODES)
    record_failure(run_dir, None, config, TimeoutError())
    summary = EvalRun.model_validate(read_json(run_dir.summary_path))
    assert (summary.status, summary.error) == ("failed", "TimeoutError (raised without a message)")
