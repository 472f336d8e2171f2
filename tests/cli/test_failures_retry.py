"""The researcher's loop at the command line, on real runs of ``support.failure_workspace``'s
``mixed`` graph (two kinds of error, and successes): ``failures`` groups them by cause,
``retry`` reruns exactly the chosen episodes with the same seeds as a run linked to the
original (which is never rewritten), a bad selection names its flag, and ``compare`` says
what the page says (caveats, graph differences)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentcanvas import exit_codes
from support.cli import run_cli
from support.failure_workspace import mixed_graph, write_failure_workspace

CLI_TIMEOUT_S = 120.0
SEED = "5"
ERRORED = [("walk", 1), ("walk", 3), ("explode", 0), ("explode", 1), ("explode", 2), ("explode", 3)]


@dataclass(frozen=True)
class Original:
    workspace: Path
    run_id: str
    summary: dict[str, Any]

    @property
    def folder(self) -> Path:
        return self.workspace / "outputs" / "eval_runs" / self.run_id

    def seeds(self) -> dict[tuple[str, int], int]:
        return {(e["task"], e["episode_index"]): e["seed"] for e in self.summary["episodes"]}


def cli(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = run_cli(*args, workspace=workspace, timeout_s=CLI_TIMEOUT_S)
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    return proc


def folder_digest(folder: Path) -> str:
    """Every file of a run folder, hashed: equal before and after means never rewritten."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> Original:
    """``mixed`` over 4 episodes per task: walk #1, #3 node errors in ``mid``, every explode
    an exception, walk #0, #2 successes."""
    workspace = write_failure_workspace(tmp_path_factory.mktemp("failures") / "ws")
    proc = cli(workspace, "eval", "mixed", "-n", "4", "--seed", SEED, "--name", "mixed-1", "--json")
    assert proc.returncode == exit_codes.EPISODE_ERRORS, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    return Original(workspace, summary["run_id"], summary)


def test_failures_groups_the_errors_by_cause_largest_first(original: Original) -> None:
    proc = cli(original.workspace, "failures", "mixed-1", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["episodes"], report["succeeded"], report["failed"]) == (8, 2, 6)
    assert report["errors"] == report["retryable_failures"] == 6
    shape = [
        (g["kind"], g["node"], g["count"], g["episodes"], g["tasks"]) for g in report["groups"]
    ]
    assert shape == [
        ("exception", None, 4, [4, 5, 6, 7], ["explode"]),
        ("node_error", "mid", 2, [1, 3], ["walk"]),
    ]
    exception, node = report["groups"]
    assert node["label"] == "exception in node mid"
    assert node["cause"] == "fglue.mid: RuntimeError: mid failed on episode <n>"
    assert "RuntimeError: mid failed on episode 1" in node["example_traceback"]
    assert "explode cannot start" in exception["example_traceback"]

    text = cli(original.workspace, "failures", original.run_id).stdout
    assert "6 of 8 episode(s) did not succeed (6 error(s))" in text
    assert "4 × exception outside the nodes - task explode - episodes 4, 5, 6, 7" in text
    assert "2 × exception in node mid - task walk - episodes 1, 3" in text
    assert "fglue.mid: RuntimeError: mid failed on episode 1" in text
    assert "Traceback (most recent call last)" not in text
    assert f"agentcanvas retry {original.run_id} --errors" in text
    verbose = cli(original.workspace, "failures", original.run_id, "--verbose").stdout
    assert "traceback of episode 1:" in verbose and "Traceback (most recent call last)" in verbose


def test_eval_lists_each_errors_own_message_and_end_reason(original: Original) -> None:
    """Not "node errors in: mid": the node's own message (the original run's stderr is gone,
    so a second, smaller run shows it)."""
    proc = cli(original.workspace, "eval", "mixed", "-n", "2", "--seed", SEED)
    assert proc.returncode == exit_codes.EPISODE_ERRORS
    err = " ".join(proc.stderr.split())  # rich wraps long lines
    assert "episode 1 (walk #1): error: node mid: fglue.mid: RuntimeError: mid failed on" in err
    assert "node errors in" not in err
    assert "episode 2 (explode #0): exception: UserInputError:" in err
    assert "grouped by cause: agentcanvas failures" in err


def test_retry_errors_reruns_exactly_them_with_the_same_seeds(original: Original) -> None:
    before = folder_digest(original.folder)
    proc = cli(original.workspace, "retry", "mixed-1", "--errors", "--json")
    assert proc.returncode == exit_codes.EPISODE_ERRORS, proc.stderr[-3000:]
    retry = json.loads(proc.stdout)
    config = retry["config"]
    assert config["retry_of"] == original.run_id
    assert [(e["task"], e["episode_index"]) for e in config["episodes"]] == ERRORED
    got = [(e["task"], e["episode_index"], e["seed"]) for e in retry["episodes"]]
    assert got == [(task, index, original.seeds()[task, index]) for task, index in ERRORED]
    assert [e["index"] for e in retry["episodes"]] == list(range(6))
    assert retry["episodes_total"] == 6
    assert "6/6" in proc.stderr  # the bar's total is the plan's, not episode_count x tasks
    new = retry["run_id"]
    assert f"compare them: agentcanvas compare {original.run_id} {new}" in proc.stderr
    assert folder_digest(original.folder) == before  # the original keeps its records
    compared = cli(original.workspace, "compare", original.run_id, new, "--json")
    assert json.loads(compared.stdout)["paired"] == 6


def test_retry_of_run_indices_and_a_worker_count(original: Original) -> None:
    proc = cli(original.workspace, "retry", original.run_id, "--episodes", "0,2-3", "-w", "2")
    assert proc.returncode == exit_codes.EPISODE_ERRORS, proc.stderr[-3000:]  # walk #3 errs
    first, second = proc.stdout.splitlines()[:2]
    assert first.startswith("retry run ") and first.endswith(
        f" of {original.run_id}: 3 episode(s), the original's seeds"
    )
    new = first.split()[2]
    assert second == f"compare them: agentcanvas compare {original.run_id} {new}"
    summary = json.loads((original.folder.parent / new / "summary.json").read_text())
    assert summary["config"]["worker_count"] == 2
    assert [(e["task"], e["episode_index"], e["status"]) for e in summary["episodes"]] == [
        ("walk", 0, "completed"),
        ("walk", 2, "completed"),
        ("walk", 3, "error"),
    ]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--episodes", "1,x"], "--episodes: selection '1,x': 'x' is not a run index"),
        (["--episodes", "99"], "has no episode 99 (its run indices are 0-7)"),
        (["--errors", "--failures"], "not allowed with argument"),
    ],
)
def test_a_bad_selection_exits_1_naming_it(original: Original, args: list[str], named: str) -> None:
    runs = set((original.workspace / "outputs" / "eval_runs").iterdir())
    proc = cli(original.workspace, "retry", original.run_id, *args)
    assert proc.returncode == exit_codes.USAGE, proc.stderr
    assert named in proc.stderr
    assert set((original.workspace / "outputs" / "eval_runs").iterdir()) == runs  # no run made


def test_compare_prints_the_caveats_and_the_graph_differences(original: Original) -> None:
    other = {**mixed_graph(), "name": "mixed_b", "step_budget": 4}
    (original.workspace / "graphs" / "mixed_b.json").write_text(json.dumps(other))
    proc = cli(original.workspace, "eval", "mixed_b", "-n", "4", "--seed", "9", "--json")
    run_b = json.loads(proc.stdout)["run_id"]
    text = cli(original.workspace, "compare", "mixed-1", run_b).stdout
    assert "caveat: The runs used different seeds (A: 5, B: 9)" in text
    assert "the graphs differ (A -> B):" in text
    assert "    graph step_budget: 3 -> 4" in text
    assert '    graph name: "mixed" -> "mixed_b"' in text
