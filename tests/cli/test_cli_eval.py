"""`agentcanvas eval` / `verify-invariance` at the command line: JSON on stdout, clean errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agentcanvas.cli import main
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.fileio import read_json
from support.cli import run_cli

CLI_TIMEOUT_S = 120.0
TASK = "BabyAI-GoToObj-v0"


def agentcanvas_cli(*args: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    """Run the installed console script with ``workspace`` as AGENTCANVAS_HOME and cwd."""
    return run_cli(*args, workspace=workspace, timeout_s=CLI_TIMEOUT_S)


def test_eval_json_prints_only_the_final_summary_on_stdout(tmp_path: Path) -> None:
    proc = agentcanvas_cli(
        "eval",
        "babyai_oracle",
        "-n",
        "2",
        "-w",
        "2",
        "--tasks",
        TASK,
        "--start-index",
        "5",
        "--seed",
        "7",
        "--step-budget",
        "40",
        "--json",
        workspace=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout)  # the whole of stdout is one JSON document
    assert summary["status"] == "completed"
    assert summary["episodes_done"] == summary["episodes_total"] == 2
    assert summary["config"]["worker_count"] == 2 and summary["config"]["seed"] == 7
    assert [
        (e["task"], e["episode_index"], e["seed"], e["step_budget"]) for e in summary["episodes"]
    ] == [(TASK, 5, episode_seed(7, TASK, 5), 40), (TASK, 6, episode_seed(7, TASK, 6), 40)]
    assert summary["aggregate_metrics"]["success"]["n"] == 2
    run_dir = tmp_path / "outputs" / "eval_runs" / summary["run_id"]
    assert read_json(run_dir / "summary.json") == summary
    assert (run_dir / "_DONE").exists()
    # env_minigrid is forkable: one template, and both servers forked from it, log here
    assert {p.name for p in (run_dir / "servers").iterdir()} == {
        "template_env_minigrid.log",
        "server_env_minigrid_0.log",
        "server_env_minigrid_1.log",
    }
    assert "2/2" in proc.stderr  # progress went to stderr
    assert "Traceback" not in proc.stderr


def run_main(argv: list[str], workspace: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """agentcanvas.cli.main in this process; an argparse exit counts as its exit code."""
    monkeypatch.setenv("AGENTCANVAS_HOME", str(workspace))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(workspace)
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "babyai_oracle", "-n", "0"], "'episode_count'"),
        (["eval", "babyai_oracle", "-n", "-3"], "'episode_count'"),
        (["eval", "babyai_oracle", "--step-budget", "0"], "'step_budget'"),
        (["eval", "babyai_oracle", "-w", "0"], "'worker_count'"),
        (["eval", "no_such_graph"], "unknown graph 'no_such_graph'"),
        (["eval", "../etc/passwd"], "graph"),
        (["verify-invariance", "babyai_oracle", "--workers", "x"], "--workers"),
        (["eval", "babyai_oracle", "--workers", "x"], "--workers"),
        (["verify-invariance", "babyai_oracle", "--workers", "1,0"], "--workers"),
    ],
)
def test_bad_flags_exit_1_with_a_message_and_no_traceback(
    argv: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = run_main(argv, tmp_path, monkeypatch)
    out, err = capsys.readouterr()
    assert "Traceback" not in err and out == ""
    assert message in err
    assert not (tmp_path / "outputs").exists(), "a refused run must not leave a run folder"
    assert code == 1, err
