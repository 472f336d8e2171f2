"""A Ray worker puts its episodes' logs into the run folder when it sees that folder (the
token the head wrote is there at the same path): staged under a temp name, renamed into
place by the head when it takes the attempt's record (`cluster.shared_folder`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcanvas.cluster.runner import ShippedFiles
from agentcanvas.cluster.shared_folder import SeenFolders, check_token, place_log, stage_log
from agentcanvas.cluster.worker_actor import EpisodeReply
from agentcanvas.errors import RunError
from agentcanvas.eval.recovery import remove_stale_temp_files
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


def test_a_staged_log_is_in_place_only_once_the_head_takes_its_attempt(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path / "run")
    path = run_dir.episode_log_path(7)
    first = stage_log(run_dir, 7, b'{"step":0}\n{"step":1}\n')
    assert first and first.startswith(".log.jsonl.") and not path.exists()  # not yet
    _record(run_dir, 7, first)  # the head took attempt 1
    assert path.read_bytes() == b'{"step":0}\n{"step":1}\n'
    lost = stage_log(run_dir, 7, b'{"step":0,"attempt":"lost"}\n')  # the head gave up on it
    retry = stage_log(run_dir, 7, b'{"step":0,"attempt":"retry"}\n')
    assert lost and retry and lost != retry
    _record(run_dir, 7, retry)
    assert path.read_bytes() == b'{"step":0,"attempt":"retry"}\n'  # never the lost one's
    assert remove_stale_temp_files(run_dir) == [f"episodes/ep0007/{lost}"]  # resume's sweep
    assert stage_log(run_dir, 7, b"") == ""  # fired nothing: nothing staged...
    _record(run_dir, 7, "")
    assert not path.exists()  # ...and no log, nor an earlier attempt's
    assert [p.name for p in run_dir.episode_dir(7).iterdir()] == []


def test_a_staged_name_is_only_ever_one_stage_log_gives(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path / "run")
    (run_dir.root / "spec.json").write_text("{}")
    for bad in ("../../spec.json", "episode.json", ".log.jsonl.zz.tmp", "x/.log.jsonl.ab.tmp"):
        with pytest.raises(RunError):
            place_log(run_dir, 1, bad)
    with pytest.raises(RunError, match=r"log\.jsonl"):  # staged, then gone: not acknowledged
        place_log(run_dir, 1, ".log.jsonl.abcdef.tmp")
    assert (run_dir.root / "spec.json").read_text() == "{}"


def test_a_log_that_cannot_be_staged_is_sent_instead(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path / "run")
    run_dir.episode_dir(3).write_text("a file where the episode's folder goes")
    assert stage_log(run_dir, 3, b'{"step":0}\n') is None
    assert run_dir.episode_dir(3).read_text() == "a file where the episode's folder goes"


def _record(run_dir: RunDir, index: int, staged: str) -> None:
    """What the head's recording thread does with an accepted reply's files."""
    run_dir.create_episode(index)
    reply = EpisodeReply({"index": index}, log_staged=staged)
    ShippedFiles(run_dir, index, reply, record_log=True).write_rest()
