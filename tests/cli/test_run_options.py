"""Run options are EvalConfig's fields: every field (but NOT_FLAGS) is a flag of ``eval`` and
``submit``, and the value given reaches the config (``eval``) and the JSON body ``submit``
sends (to a real loopback HTTP server that records it)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import annotated_types
import pytest

from agentcanvas.cli.command import build_parser
from agentcanvas.cli.commands import COMMANDS
from agentcanvas.cli.commands.evaluate import demo_arguments
from agentcanvas.cli.run_options import NOT_FLAGS, RunFlag, build_config, run_flags
from agentcanvas.eval.config import EvalConfig
from support.cli import run_cli
from support.recording_http import recording_server

CLI_TIMEOUT_S = 60.0
QUEUED = {"run_id": "20260101_000000", "status": "queued", "via_subprocess": True}

# Values the type alone cannot pick: a pattern to match, or a text form of its own.
SAMPLES: dict[str, tuple[list[str], Any]] = {
    "tasks": (["a", " b"], ["a", "b"]),  # given as "a, b"
    "max_errors": (["0.25"], 0.25),
    "until_decided_vs": (["20240101_000000"], "20240101_000000"),
    "ray_address": (["auto"], "auto"),
}


def _bounds(field: str) -> tuple[float, float]:
    lo, hi = -math.inf, math.inf
    for item in EvalConfig.model_fields[field].metadata:
        if isinstance(item, annotated_types.Ge):
            lo = float(item.ge)  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Gt):
            lo = float(item.gt) + 0.01  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Le):
            hi = float(item.le)  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Lt):
            hi = float(item.lt) - 0.01  # type: ignore[arg-type]
    return lo, hi


def _kind(field: str) -> Any:
    annotation = EvalConfig.model_fields[field].annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


def sample(flag: RunFlag) -> tuple[list[str], Any]:
    """Command-line words that set ``flag`` to a value other than its default, and it."""
    field, info = flag.field, EvalConfig.model_fields[flag.field]
    name = flag.names[-1]
    if field in SAMPLES:
        words, value = SAMPLES[field]
        return [name, ",".join(words)], value
    if flag.switch:
        return ([f"--no-{name[2:]}"], False) if info.default else ([name], True)
    kind = _kind(field)
    if get_origin(kind) is Literal:
        value = next(v for v in get_args(kind) if v != info.default)
        return [name, str(value)], value
    lo, hi = _bounds(field)
    if kind is int:
        value = next(v for v in (3, 2, 1, 0) if lo <= v <= hi and v != info.default)
        return [name, str(value)], value
    if kind is float:
        value = next(v for v in (0.3, 0.2, 7.5) if lo <= v <= hi and v != info.default)
        return [name, str(value)], value
    raise AssertionError(f"add a sample value for EvalConfig field {field!r} to SAMPLES")


def every_option() -> tuple[list[str], dict[str, Any]]:
    words: list[str] = []
    expected: dict[str, Any] = {}
    for flag in run_flags():
        flag_words, value = sample(flag)
        words += flag_words
        expected[flag.field] = value
    return words, expected


def parse(*argv: str) -> argparse.Namespace:
    return build_parser(COMMANDS).parse_args(list(argv))


def test_every_field_is_a_flag_or_said_why_not() -> None:
    flags = {flag.field for flag in run_flags()}
    for field in EvalConfig.model_fields:
        assert (field in flags) != (field in NOT_FLAGS), field
    assert {"version", "graph_name"} <= set(NOT_FLAGS)
    assert all(NOT_FLAGS.values())  # each says why


def test_every_option_reaches_the_eval_config() -> None:
    words, expected = every_option()
    config = build_config(parse("eval", "g", *words), "g")
    assert {field: getattr(config, field) for field in expected} == expected
    defaults = build_config(parse("eval", "g"), "g")
    assert defaults == EvalConfig(graph_name="g")  # nothing given: EvalConfig's defaults


def test_todays_names_still_work() -> None:
    args = parse("eval", "g", "-n", "4", "-w", "2", "--tasks", "x,y", "--max-errors", "3")
    config = build_config(args, "g")
    assert (config.episode_count, config.worker_count, config.tasks) == (4, 2, ["x", "y"])
    assert config.max_errors == 3 and isinstance(config.max_errors, int)
    args = parse("eval", "g", "--episodes", "5", "--workers", "3", "--per-step-timeout", "2")
    config = build_config(args, "g")
    assert (config.episode_count, config.worker_count, config.per_step_timeout_s) == (5, 3, 2.0)


def test_demo_is_eval_through_its_own_parser() -> None:
    args = demo_arguments()
    config = build_config(args, "babyai_oracle")
    assert (config.episode_count, config.worker_count, config.save_frames) == (10, 2, True)
    assert args.json is False and args.name is None


def test_play_takes_the_episode_options_of_the_config() -> None:
    args = parse("play", "g", "--seed", "4", "--per-step-timeout", "2.5", "--step-budget", "9")
    config = build_config(args, "g")
    assert (config.seed, config.per_step_timeout_s, config.step_budget) == (4, 2.5, 9)


def test_every_option_reaches_the_body_submit_sends(tmp_path: Path) -> None:
    words, expected = every_option()
    with recording_server([(200, QUEUED)]) as server:
        proc = run_cli(
            "submit", "g", *words, "--url", server.url, "--name", "all of them",
            workspace=tmp_path, timeout_s=CLI_TIMEOUT_S,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/api/eval/v2/start")
    body = request.body
    assert {field: body[field] for field in expected} == expected
    assert body["graph_name"] == "g" and body["name"] == "all of them"
    assert body["priority"] == 0


def test_submit_sends_only_what_was_given(tmp_path: Path) -> None:
    with recording_server([(200, QUEUED)]) as server:
        proc = run_cli(
            "submit", "g", "-n", "3", "--per-step-timeout", "5", "--engine", "local",
            "--url", server.url, workspace=tmp_path, timeout_s=CLI_TIMEOUT_S,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (request,) = server.requests
    assert request.body == {
        "graph_name": "g",
        "episode_count": 3,
        "per_step_timeout_s": 5.0,
        "engine": "local",
        "priority": 0,
    }


@pytest.mark.parametrize(
    ("words", "named"),
    [
        (["--per-step-timeout", "0"], "--per-step-timeout"),
        (["--stop-alpha", "0.7"], "--stop-alpha"),
        (["--max-attempts", "9"], "--max-attempts"),
        (["--frames", "some"], "--frames"),
        (["--until-decided-vs", "yesterday"], "--until-decided-vs"),
    ],
)
def test_a_bad_option_exits_1_naming_its_flag_before_any_request(
    tmp_path: Path, words: list[str], named: str
) -> None:
    with recording_server([(200, QUEUED)]) as server:
        proc = run_cli(
            "submit", "g", *words, "--url", server.url, workspace=tmp_path,
            timeout_s=CLI_TIMEOUT_S,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert named in proc.stderr and "Traceback" not in proc.stderr
    assert server.requests == []
