"""``agentcanvas eval --name/--tag/--note`` (a real subprocess): the run folder's meta.json
holds them from the start; a bad value exits 1 naming the flag, before any run folder."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run_cli
from support.truth_workspace import write_truth_workspace

CLI_TIMEOUT_S = 120.0


def _run_folders(workspace: Path) -> list[Path]:
    runs = workspace / "outputs" / "eval_runs"
    return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []


def test_eval_writes_name_tags_and_note_to_the_run_folder(tmp_path: Path) -> None:
    workspace = write_truth_workspace(tmp_path)
    result = run_cli(
        "eval",
        "walk",
        "-n",
        "2",
        "--json",
        "--name",
        "walk, first",
        "--tag",
        "a",
        "--tag",
        "b",
        "--tag",
        "a",
        "--note",
        "line one\nline two",
        workspace=workspace,
        timeout_s=CLI_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    (folder,) = _run_folders(workspace)
    assert folder.name == summary["run_id"]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta == {"name": "walk, first", "tags": ["a", "b"], "note": "line one\nline two"}


def test_eval_without_meta_flags_writes_no_meta_file(tmp_path: Path) -> None:
    workspace = write_truth_workspace(tmp_path)
    result = run_cli(
        "eval", "walk", "-n", "1", "--json", workspace=workspace, timeout_s=CLI_TIMEOUT_S
    )
    assert result.returncode == 0, result.stderr
    (folder,) = _run_folders(workspace)
    assert not (folder / "meta.json").exists()


def test_a_bad_tag_or_name_exits_1_naming_the_flag(tmp_path: Path) -> None:
    workspace = write_truth_workspace(tmp_path)
    for flags, named in ((["--tag", "two words"], "--tag"), (["--name", ""], "--name")):
        result = run_cli(
            "eval", "walk", "-n", "1", *flags, workspace=workspace, timeout_s=CLI_TIMEOUT_S
        )
        assert result.returncode == 1, result.stderr
        assert named in result.stderr and "Traceback" not in result.stderr
    assert _run_folders(workspace) == []
    offline = run_cli(
        "submit",
        "walk",
        "--url",
        "http://127.0.0.1:9",
        "--tag",
        "bad tag",
        workspace=workspace,
        timeout_s=CLI_TIMEOUT_S,
    )
    assert offline.returncode == 1 and "--tag" in offline.stderr  # refused before any request
