"""Temp files of atomic writes (agentcanvas.fileio): names from a process-local generator,
reseeded in a forked child, and a name already taken is never overwritten."""

from __future__ import annotations

import multiprocessing
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from agentcanvas import fileio


def _next_bits(conn: Connection) -> None:
    conn.send(fileio._TEMP_NAMES.getrandbits(48))


def test_a_forked_child_draws_other_temp_names_than_its_parent() -> None:
    """Without the reseed a forked child would repeat its parent's names one for one (both
    writers of one folder colliding at every file)."""
    ctx = multiprocessing.get_context("fork")
    state = fileio._TEMP_NAMES.getstate()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_next_bits, args=(child,))
    proc.start()
    child.close()  # the child's end: a child that dies unheard ends the wait below
    assert parent.poll(30), "the forked child sent nothing"
    drawn_in_child = parent.recv()
    proc.join(10)
    fileio._TEMP_NAMES.setstate(state)  # what the child started from
    assert drawn_in_child != fileio._TEMP_NAMES.getrandbits(48)


def test_a_taken_temp_name_is_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "episode.json"
    taken = tmp_path / f".episode.json.{1:012x}.tmp"
    taken.write_bytes(b"a crashed writer's leftover")
    draws = iter([1, 2])
    monkeypatch.setattr(fileio._TEMP_NAMES, "getrandbits", lambda _bits: next(draws))
    fileio.atomic_write_bytes(target, b"{}", durable=False)
    assert target.read_bytes() == b"{}"
    assert taken.read_bytes() == b"a crashed writer's leftover"  # untouched
