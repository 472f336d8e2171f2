"""A Ray worker writes its episodes' logs into the run folder when it sees that folder: the
token the head wrote is there at the same path (`cluster.shared_folder`)."""

from __future__ import annotations

from pathlib import Path

from agentcanvas.cluster.shared_folder import SeenFolders, check_token, write_log
from agentcanvas.eval.store import RunDir


def _run_dir(root: Path) -> RunDir:
    run_dir = RunDir(root)
    run_dir.create()
    return run_dir


def test_a_worker_writes_only_where_it_reads_the_heads_token(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path / "run")
    token = check_token(run_dir)
    assert len(token) == 32 and run_dir.storage_check_path.read_text() == token
    assert check_token(run_dir) != token  # a new run, a new token
    token = run_dir.storage_check_path.read_text()
    seen = SeenFolders()
    assert seen.run_dir(str(run_dir.root), token) == run_dir
    assert seen.run_dir(str(run_dir.root), "another run's token") is None
    assert seen.run_dir(str(tmp_path / "elsewhere"), token) is None  # not at that path here
    assert seen.run_dir("", token) is None and seen.run_dir(str(run_dir.root), "") is None


def test_no_token_where_the_run_folder_cannot_take_one(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path / "run")
    run_dir.storage_check_path.mkdir()  # a folder in its place: nothing can be written
    assert check_token(run_dir) == ""


def test_a_log_replaces_an_earlier_attempts_and_an_empty_one_leaves_none(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path / "run")
    path = run_dir.episode_log_path(7)
    assert write_log(run_dir, 7, b'{"step":0}\n{"step":1}\n')
    assert path.read_bytes() == b'{"step":0}\n{"step":1}\n'
    assert write_log(run_dir, 7, b'{"step":0}\n')  # a retry: its own lines only
    assert path.read_bytes() == b'{"step":0}\n'
    assert write_log(run_dir, 7, b"") and not path.exists()  # fired nothing: no log
    assert [p.name for p in run_dir.episode_dir(7).iterdir()] == []  # no temp file left


def test_a_log_that_cannot_be_written_is_sent_instead(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path / "run")
    run_dir.episode_dir(3).write_text("a file where the episode's folder goes")
    assert not write_log(run_dir, 3, b'{"step":0}\n')
    assert run_dir.episode_dir(3).read_text() == "a file where the episode's folder goes"
