"""The CLI explains itself: every option has help and shows its default, every command has
examples, the exit-code table is where it applies, ``--version``, ``AGENTCANVAS_URL``, and
``status`` in words (its JSON only with ``--json``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import pytest

import agentcanvas
from agentcanvas import exit_codes
from agentcanvas.cli.command import build_parser
from agentcanvas.cli.commands import COMMANDS
from agentcanvas.cli.status_text import counts_text, failures_text, status_text
from support.cli import run_cli
from support.recording_http import recording_server

CLI_TIMEOUT_S = 60.0
WITH_EXIT_CODES = {"eval", "play", "submit", "resume", "verify-invariance", "compare", "retry"}


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser(COMMANDS)
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@pytest.mark.parametrize("name", [command.name for command in COMMANDS])
def test_every_option_has_help_and_shows_its_default(name: str) -> None:
    parser = subparsers()[name]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        label = "/".join(action.option_strings) or action.dest
        assert action.help and action.help != argparse.SUPPRESS, f"{name} {label}: no help"
        if action.default not in (None, False):
            assert "default" in action.help.lower(), f"{name} {label}: default not shown"


@pytest.mark.parametrize("name", [command.name for command in COMMANDS])
def test_every_command_has_examples_and_the_exit_codes_only_where_they_apply(
    name: str,
) -> None:
    text = subparsers()[name].format_help()
    assert "\nexamples:\n  agentcanvas " + name in text
    assert ("exit codes:" in text) == (name in WITH_EXIT_CODES), name


def test_top_level_help_lists_every_command_and_code_without_markup(tmp_path: Path) -> None:
    proc = run_cli("--help", workspace=tmp_path, timeout_s=CLI_TIMEOUT_S)
    assert proc.returncode == 0
    assert "``" not in proc.stdout and ":class:" not in proc.stdout
    for command in COMMANDS:
        assert f"\n    {command.name}" in proc.stdout
    for row in exit_codes.TABLE:
        assert f"\n  {row.code}" in proc.stdout
    assert "status a run" not in proc.stdout


def test_version(tmp_path: Path) -> None:
    proc = run_cli("--version", workspace=tmp_path, timeout_s=CLI_TIMEOUT_S)
    assert (proc.returncode, proc.stdout) == (0, f"agentcanvas {agentcanvas.__version__}\n")


SUMMARY: dict[str, Any] = {
    "run_id": "20260101_000000",
    "graph_name": "walk",
    "status": "completed",
    "episodes_done": 24,
    "episodes_total": 24,
    "status_counts": {"completed": 18, "error": 6},
    "health": {"verdict": "errors", "error_count": 6, "reason": "6 of 24 episodes ended in error"},
    "aggregate_metrics": {
        "success": {
            "mean": 0.5,
            "lo": 0.29,
            "hi": 0.71,
            "method": "wilson",
            "method_name": "Wilson score interval",
            "n": 18,
            "n_planned": 24,
            "n_errors": 6,
            "errors_as_failures": 0.375,
        }
    },
    "determinism": {"level": "certified", "level_detail": "no batched function"},
    "error": None,
}


def test_status_counts_read_as_words() -> None:
    assert counts_text({"completed": 18, "error": 6}) == "completed 18 · error 6"
    text = status_text(SUMMARY)
    assert "completed 18 · error 6" in text and "{" not in text
    assert "completed, health errors (6 of 24 episodes ended in error)" in text
    assert "24/24 done" in text
    assert "0.500 [0.290, 0.710] 95 % (Wilson score interval), over 18 scored of 24" in text
    assert "6 errored, not scored (0.375 with errors as failures)" in text
    assert "determinism  certified - no batched function" in text


LISTED = {"total": 1, "runs": [{"run_id": "20260101_000000", "name": "flaky cli"}]}
FAILURES: dict[str, Any] = {
    "run_id": "20260101_000000",
    "episodes": 24,
    "succeeded": 9,
    "failed": 15,
    "errors": 6,
    "retryable_failures": 15,
    "groups": [
        {
            "kind": "budget_exhausted",
            "cause": "the step budget ran out before the env said done",
            "node": None,
            "count": 9,
            "episodes": [0, 2, 4, 6, 8, 10, 12, 14, 16],
            "tasks": ["walk"],
            "example": "the step budget ran out before the env said done",
            "label": "budget exhausted",
            "meaning": "the step budget ran out before the env said done, without success",
            "example_episode": 0,
            "example_traceback": None,
        },
        {
            "kind": "node_error",
            "cause": "RuntimeError: boom at step <n>",
            "node": "mid",
            "count": 6,
            "episodes": [1, 3, 5, 7, 9, 11],
            "tasks": ["walk"],
            "example": "RuntimeError: boom at step 3\nsecond line",
            "label": "exception in node mid",
            "meaning": "a node failed",
            "example_episode": 1,
            "example_traceback": "Traceback (most recent call last):\nRuntimeError: boom",
        },
    ],
}


def test_status_lists_the_failures_by_cause() -> None:
    text = failures_text(FAILURES)
    assert text.splitlines() == [
        "run 20260101_000000: 15 of 24 episode(s) did not succeed (6 error(s)), by cause:",
        "  9 × budget exhausted - task walk - episodes 0, 2, 4, 6, 8, 10, 12, 14, … (+1 more)",
        "      the step budget ran out before the env said done",
        "  6 × exception in node mid - task walk - episodes 1, 3, 5, 7, 9, 11",
        "      RuntimeError: boom at step 3",
        "  tracebacks: agentcanvas failures 20260101_000000 --verbose",
        "  run the errors again: agentcanvas retry 20260101_000000 --errors",
    ]
    assert "RuntimeError: boom\n" not in text and "Traceback" in failures_text(FAILURES, True)


def test_status_in_words_json_on_demand_from_agentcanvas_url(tmp_path: Path) -> None:
    replies = [(200, LISTED), (200, SUMMARY), (200, FAILURES), (200, LISTED), (200, SUMMARY)]
    with recording_server(replies) as server:
        env = {**os.environ, "AGENTCANVAS_URL": server.url}
        words = run_cli(
            "status", "20260101_000000", workspace=tmp_path, timeout_s=CLI_TIMEOUT_S, env=env
        )
        as_json = run_cli(
            "status",
            "20260101_000000",
            "--json",
            workspace=tmp_path,
            timeout_s=CLI_TIMEOUT_S,
            env=env,
        )
    assert words.returncode == as_json.returncode == 0, words.stderr + as_json.stderr
    assert words.stdout == f"{status_text(SUMMARY, 'flaky cli')}\n{failures_text(FAILURES)}\n"
    assert words.stdout.startswith('run 20260101_000000 "flaky cli" - graph walk')
    assert as_json.stdout.startswith("{") and '"status_counts"' in as_json.stdout
    listed, status = (
        "/api/eval/v2/runs?q=20260101_000000&limit=500&offset=0",
        "/api/eval/v2/status/20260101_000000?compact=true",
    )
    failures = "/api/eval/v2/runs/20260101_000000/failures"  # words only: errors to explain
    assert [r.path for r in server.requests] == [listed, status, failures, listed, status]


def test_a_bad_agentcanvas_url_is_named(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTCANVAS_URL": "localhost:8765"}
    proc = run_cli("runs", workspace=tmp_path, timeout_s=CLI_TIMEOUT_S, env=env)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: AGENTCANVAS_URL: 'localhost:8765' is not a backend URL")
