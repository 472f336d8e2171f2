"""``submit`` is idempotent from the client's side: every start carries an Idempotency-Key
(a fresh UUID, or ``--idempotency-key``), and one that gets no answer is sent again, the
same body with the same key. The backend here is a real loopback HTTP server that drops the
connection of the first attempt(s) without a word."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from agentcanvas import exit_codes
from agentcanvas.cli.backend_client import RETRY_WAITS_S
from support.cli import run_cli
from support.recording_http import DROP, recording_server

CLI_TIMEOUT_S = 60.0
QUEUED = {"run_id": "20260101_000000", "status": "queued", "via_subprocess": True}
START = "/api/eval/v2/start"


def submit(tmp_path: Path, url: str, *args: str) -> tuple[int, str, str]:
    proc = run_cli(
        "submit", "walk", "-n", "2", "--url", url, *args, workspace=tmp_path,
        timeout_s=CLI_TIMEOUT_S,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def test_a_dropped_start_is_sent_again_with_the_same_key(tmp_path: Path) -> None:
    with recording_server([DROP, (200, QUEUED)]) as server:
        code, out, err = submit(tmp_path, server.url)
    assert code == exit_codes.OK, err
    assert json.loads(out) == QUEUED
    assert "no answer (RemoteProtocolError); sending it again (attempt 2 of 4)" in err
    first, second = server.requests
    assert first.path == second.path == START
    assert first.body == second.body == {"graph_name": "walk", "episode_count": 2, "priority": 0}
    key = first.headers["idempotency-key"]
    assert second.headers["idempotency-key"] == key
    assert uuid.UUID(key).version == 4


def test_each_submit_has_its_own_key_unless_given(tmp_path: Path) -> None:
    with recording_server([(200, QUEUED)]) as server:
        submit(tmp_path, server.url)
        submit(tmp_path, server.url)
        submit(tmp_path, server.url, "--idempotency-key", "nightly-2026-01-01")
    keys = [request.headers["idempotency-key"] for request in server.requests]
    assert keys[0] != keys[1] and keys[2] == "nightly-2026-01-01"


def test_no_answer_at_all_gives_up_naming_the_key(tmp_path: Path) -> None:
    with recording_server([DROP]) as server:
        code, out, err = submit(tmp_path, server.url, "--idempotency-key", "k-1")
    assert (code, out) == (exit_codes.USAGE, "")
    attempts = 1 + len(RETRY_WAITS_S)
    assert len(server.requests) == attempts
    assert {r.headers["idempotency-key"] for r in server.requests} == {"k-1"}
    assert f"no backend answers (RemoteProtocolError, {attempts} attempts)" in err
    assert "submitting again with --idempotency-key k-1 answers that run" in err


def test_a_refusal_is_not_retried(tmp_path: Path) -> None:
    refusal = (422, {"detail": "field 'graph_name': no such graph"})
    with recording_server([refusal]) as server:
        code, _, err = submit(tmp_path, server.url)
    assert code == exit_codes.USAGE and len(server.requests) == 1
    assert "backend answered 422: field 'graph_name': no such graph" in err


def test_a_bad_key_is_refused_before_any_request(tmp_path: Path) -> None:
    with recording_server([(200, QUEUED)]) as server:
        code, _, err = submit(tmp_path, server.url, "--idempotency-key", "two words")
    assert code == exit_codes.USAGE and "--idempotency-key" in err
    assert server.requests == []
