"""Runs by id or by name: ``export``, ``compare`` and ``plan`` on the run folders, and
``runs_df``'s name, tags and note (real runs of the truth workspace; a name shared by two
runs is ambiguous, an unknown one is named)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

import agentcanvas
from agentcanvas import exit_codes
from agentcanvas.errors import RunNotFoundError, UserInputError
from agentcanvas.eval.run_lookup import local_run_id, pick_run
from agentcanvas.eval.run_meta import RunMeta, write_meta
from agentcanvas.fileio import atomic_write_json, read_json
from support.cli import run_cli
from support.truth_workspace import write_truth_workspace

CLI_TIMEOUT_S = 120.0
ROWS = [
    {"run_id": "20260101_000000", "name": "flaky cli"},
    {"run_id": "20260101_000001", "name": "twin"},
    {"run_id": "20260101_000002", "name": "twin"},
    {"run_id": "20260101_000003", "name": None},
]


def test_a_run_is_picked_by_id_or_unique_name() -> None:
    assert pick_run("20260101_000003", ROWS, "here") == "20260101_000003"
    assert pick_run("flaky cli", ROWS, "here") == "20260101_000000"
    with pytest.raises(UserInputError) as ambiguous:
        pick_run("twin", ROWS, "here")
    assert "run name 'twin' is ambiguous: 2 runs in here have it" in str(ambiguous.value)
    assert "(20260101_000001, 20260101_000002); give the run id" in str(ambiguous.value)
    with pytest.raises(RunNotFoundError, match="RUN: no run 'flaky' in here"):
        pick_run("flaky", ROWS, "here")  # names match exactly, not by word


@dataclass(frozen=True)
class NamedRuns:
    workspace: Path
    flaky: str  # named "flaky cli", tags a and b
    twins: tuple[str, str]  # both named "twin"


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> NamedRuns:
    """One real run of ``walk`` named "flaky cli", and two copies of it both named "twin"."""
    workspace = write_truth_workspace(tmp_path_factory.mktemp("names") / "ws")
    proc = run_cli(
        "eval", "walk", "-n", "3", "--json", "--name", "flaky cli", "--tag", "a", "--tag", "b",
        "--note", "first try", workspace=workspace, timeout_s=CLI_TIMEOUT_S,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    flaky = json.loads(proc.stdout)["run_id"]
    runs = workspace / "outputs" / "eval_runs"
    twins = ("20000101_000001", "20000101_000002")
    for twin in twins:
        shutil.copytree(runs / flaky, runs / twin)
        summary = read_json(runs / twin / "summary.json")
        atomic_write_json(runs / twin / "summary.json", {**summary, "run_id": twin})
        write_meta(runs / twin, RunMeta(name="twin"))
    return NamedRuns(workspace, flaky, twins)


def cli(named: NamedRuns, *args: str) -> tuple[int, str, str]:
    proc = run_cli(*args, workspace=named.workspace, timeout_s=CLI_TIMEOUT_S)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.returncode, proc.stdout, proc.stderr


def test_local_ids_and_names(named: NamedRuns) -> None:
    runs = named.workspace / "outputs" / "eval_runs"
    assert local_run_id(runs, named.flaky) == named.flaky
    assert local_run_id(runs, "flaky cli") == named.flaky


def test_export_and_compare_by_name(named: NamedRuns) -> None:
    code, out, err = cli(named, "export", "flaky cli", "-o", "-")
    assert code == 0, err
    assert len(out.strip().splitlines()) == 1 + 3  # header and one row per episode
    code, out, err = cli(named, "compare", "flaky cli", named.twins[0], "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["a"], result["b"], result["paired"]) == (named.flaky, named.twins[0], 3)


def test_an_ambiguous_name_lists_the_ids_and_an_unknown_one_is_named(named: NamedRuns) -> None:
    cases = [
        (["export", "twin"], "RUN"),
        (["compare", "flaky cli", "twin"], "RUN_B"),
        (["plan", "twin", "--delta", "0.1"], "RUN"),
    ]
    for argv, field in cases:
        code, out, err = cli(named, *argv)
        assert (code, out) == (exit_codes.USAGE, ""), err
        assert f"error: {field}: run name 'twin' is ambiguous" in err
        assert all(twin in err for twin in named.twins)
    code, _, err = cli(named, "export", "nobody here")
    assert code == exit_codes.USAGE
    assert "error: RUN: no run 'nobody here'" in err


def test_runs_df_has_name_tags_and_note(named: NamedRuns) -> None:
    frame = agentcanvas.runs_df(named.workspace)
    assert list(frame.columns[:5]) == ["run_id", "name", "tags", "note", "graph_name"]
    rows = {row.run_id: row for row in frame.itertuples()}
    assert (rows[named.flaky].name, rows[named.flaky].tags) == ("flaky cli", ["a", "b"])
    assert rows[named.flaky].note == "first try"
    assert rows[named.twins[0]].name == "twin" and rows[named.twins[0]].tags == []
