"""``compare --fail-on-regression`` as a CI gate and ``leaderboard``, on real runs: A always
succeeds, B always errors (its episodes count as failures), so B regresses from A."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentcanvas import exit_codes
from agentcanvas.eval.comparison import RANK_RULE
from support.cli import run_cli
from support.truth_workspace import write_truth_workspace

CLI_TIMEOUT_S = 120.0
EPISODES = 8  # all 8 discordant pairs one way: exact McNemar p = 2 * 0.5**8 < 0.01


@dataclass(frozen=True)
class Runs:
    workspace: Path
    good: str
    bad: str


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    workspace = write_truth_workspace(tmp_path_factory.mktemp("gate") / "ws")
    ids = []
    for graph, name in (("clean", "good"), ("raises", "bad")):
        proc = run_cli(
            "eval", graph, "-n", str(EPISODES), "--json", "--name", name,
            workspace=workspace, timeout_s=CLI_TIMEOUT_S,
        )  # fmt: skip
        assert proc.returncode in (exit_codes.OK, exit_codes.EPISODE_ERRORS), proc.stderr
        ids.append(json.loads(proc.stdout)["run_id"])
    return Runs(workspace, *ids)


def cli(runs: Runs, *args: str) -> tuple[int, str, str]:
    proc = run_cli(*args, workspace=runs.workspace, timeout_s=CLI_TIMEOUT_S)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, proc.stdout, proc.stderr


def test_a_significantly_worse_b_fails_the_gate(runs: Runs) -> None:
    code, out, err = cli(runs, "compare", "good", "bad", "--fail-on-regression")
    assert code == exit_codes.REGRESSION == 5, err
    assert "gate: REGRESSION: McNemar p = 0.00781 (alpha 0.05) on 8 pairs" in out
    code, out, _ = cli(runs, "compare", "good", "bad", "--fail-on-regression", "--json")
    gate = json.loads(out)["gate"]
    assert code == exit_codes.REGRESSION
    assert gate["regression"] and gate["b_worse"] and gate["p_value"] == 2 * 0.5**EPISODES


def test_no_regression_exits_0(runs: Runs) -> None:
    better, out, _ = cli(runs, "compare", "bad", "good", "--fail-on-regression")
    assert better == exit_codes.OK and "gate: no regression" in out  # B is better
    same, _, _ = cli(runs, "compare", runs.good, runs.good, "--fail-on-regression")
    assert same == exit_codes.OK
    strict, out, _ = cli(runs, "compare", "good", "bad", "--fail-on-regression", "--alpha", "1e-3")
    assert strict == exit_codes.OK and "gate: no regression" in out  # p = 0.0078 > 0.001
    plain, out, _ = cli(runs, "compare", "good", "bad")
    assert plain == exit_codes.OK and "gate" not in out  # no gate asked for


def test_a_bad_alpha_is_refused(runs: Runs) -> None:
    code, _, err = cli(runs, "compare", "good", "bad", "--fail-on-regression", "--alpha", "2")
    assert code == exit_codes.USAGE and "--alpha" in err


def test_leaderboard_ranks_by_name_or_id(runs: Runs) -> None:
    code, out, err = cli(runs, "leaderboard", "bad", runs.good, "--json")
    assert code == 0, err
    board = json.loads(out)
    assert [(r["rank"], r["run_id"], r["name"]) for r in board["runs"]] == [
        (1, runs.good, "good"),
        (2, runs.bad, "bad"),
    ]
    assert board["rank_rule"] == RANK_RULE
    assert board["runs"][1]["errors"] == EPISODES
    code, out, err = cli(runs, "leaderboard", "good", "bad")
    assert code == 0, err
    lines = out.splitlines()
    (good_line,) = [line for line in lines if runs.good in line]
    assert "1.000 [0.676, 1.000] of 8" in good_line
    assert f"ranking: {RANK_RULE}"[:60] in out
