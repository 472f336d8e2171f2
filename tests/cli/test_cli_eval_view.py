"""What ``agentcanvas eval`` shows while and after it runs (a real subprocess): the bar's
errors and final success rate are the final summary's, counts read as words, and Ctrl-C
says where the run is and how to finish it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from agentcanvas import exit_codes
from support.cli import COMMAND, run_cli
from support.polling import poll_until
from support.truth_workspace import graph, write_truth_workspace
from support.workspace import write_files

CLI_TIMEOUT_S = 120.0
NAP_S = 0.2  # each step of a `napping` episode; 3 steps an episode

NAP = textwrap.dedent(
    '''
    """nap: a local node that takes a while, so a run is still going when interrupted."""

    import time

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    NODESET = NodeSet(name="nap", parallelism="local")


    @NODESET.node("nap", outputs=[PortSpec(name="value")], blocking=True)
    def nap(inputs, config, state, ctx):
        time.sleep(NAP_S)
        return {"value": 1}
    '''
).replace("NAP_S", str(NAP_S))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_truth_workspace(tmp_path_factory.mktemp("view") / "ws")
    napping = graph(
        "napping",
        [{"id": "n", "type": "nap.nap"}],
        [{"source": "n.value", "target": "out.success"}],
    )
    return write_files(
        root,
        {"graph_nodes/nap/__init__.py": NAP, "graphs/napping.json": json.dumps(napping)},
    )


def test_the_bar_ends_on_the_final_summary_and_counts_read_as_words(workspace: Path) -> None:
    proc = run_cli("eval", "clean", "-n", "3", workspace=workspace, timeout_s=CLI_TIMEOUT_S)
    assert proc.returncode == exit_codes.OK, proc.stderr[-3000:]
    assert "SR 1.000 of 3 scored (final)" in proc.stderr
    assert "0 errors" in proc.stderr
    assert "status counts: completed 3" in proc.stderr and "{'" not in proc.stderr


def test_the_bar_counts_errors(workspace: Path) -> None:
    proc = run_cli("eval", "raises", "-n", "2", workspace=workspace, timeout_s=CLI_TIMEOUT_S)
    assert proc.returncode == exit_codes.EPISODE_ERRORS, proc.stderr[-3000:]
    assert "2 error(s), not scored" in proc.stderr
    assert "status counts: error 2" in proc.stderr


def test_ctrl_c_names_the_run_folder_and_how_to_finish_it(workspace: Path) -> None:
    runs = workspace / "outputs" / "eval_runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    env = {**os.environ, "AGENTCANVAS_HOME": str(workspace)}
    argv = ["eval", "napping", "-n", "100", "--name", "nap time"]
    proc = subprocess.Popen(
        [*COMMAND, *argv], cwd=workspace, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:

        def going() -> Path | None:
            for folder in (set(runs.iterdir()) if runs.exists() else set()) - before:
                summary = folder / "summary.json"
                if summary.exists() and json.loads(summary.read_text())["episodes_done"] >= 1:
                    return folder
            assert proc.poll() is None, proc.communicate()
            return None

        folder = poll_until(going, "the run's first episode", CLI_TIMEOUT_S)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        proc.kill()
    text = " ".join(err.decode(errors="replace").split())
    assert proc.returncode == exit_codes.INTERRUPTED, text[-3000:]
    run_id = folder.name
    assert f"interrupted: run {run_id} is cancelled with " in text
    assert " of 100 episodes done; its folder: " + str(folder) in text
    assert f"agentcanvas resume {run_id} --follow" in text
    assert "agentcanvas eval napping -n 100 --name 'nap time'" in text
    assert "Traceback" not in text


def test_a_placement_wait_is_said_on_the_progress_view() -> None:
    """The Ray engine's EvalWaiting events reach the user: a line above the bar with the
    reason, how long the run has waited and its deadline."""
    import io

    from agentcanvas.cli.commands.evaluate import ProgressView
    from agentcanvas.eval.events import EvalWaiting

    view = ProgressView(10, "eval w=2")
    out = io.StringIO()
    view.progress.console.file = out
    reason = "ray placement group: 40 CPU, 0 GPU; cluster has 3 CPU, 0 GPU free"
    with view.progress:
        view(EvalWaiting(run_id="r1", reason=reason, waited_s=6.2, deadline_s=300.0))
    text = out.getvalue()
    assert f"waiting for Ray to place the run's actors (6 s of 300 s): {reason}" in text
