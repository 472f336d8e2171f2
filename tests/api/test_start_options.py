"""Every run option of ``EvalConfig`` is a field of ``POST /api/eval/v2/start``, declared once:
the start body takes each under its own name, with the config's description and default, and
what a start sends reaches the run's spec.json config.

The schema checks need no backend. The round trip queues one run per option on a real backend
whose declared VRAM capacity (1 MB) keeps every such run waiting; the baseline run that
``until_decided_vs`` needs is run to completion first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.api.app import create_app
from agentcanvas.api.start_request import NOT_OPTIONS, RUN_OPTIONS
from agentcanvas.eval.config import EvalConfig
from support.backend import Backend

START = "/api/eval/v2/start"
TASK = "BabyAI-GoToObj-v0"
NEVER_ADMITTED = {"marginal_vram_mb": 1_000_000.0}  # the backend declares 1 MB of VRAM
BASELINE = "<baseline>"  # replaced by the baseline run's id
# A value other than the default for each option, and the fields it is sent with.
SAMPLES: dict[str, tuple[Any, dict[str, Any]]] = {
    "graph_name": ("babyai_oracle", {}),
    "episode_count": (3, {}),
    "worker_count": (2, {}),
    "tasks": ([TASK], {}),
    "start_index": (5, {}),
    "step_budget": (7, {}),
    "seed": (11, {}),
    "per_step_timeout_s": (2.5, {}),
    "episode_timeout_s": (30.0, {}),
    "max_errors": (0.25, {}),
    "max_attempts": (3, {}),
    "save_frames": (True, {}),
    "frames": ("failures", {}),
    "record_log": (False, {}),
    "certify": (True, {}),
    "binary_interval": ("clopper-pearson", {}),
    "until_halfwidth": (0.1, {}),
    "until_decided_vs": (BASELINE, {}),
    "stop_alpha": (0.1, {}),
    "engine": ("ray", {}),  # without a cluster address: a local Ray, admitted like any run
    "ray_address": ("127.0.0.1:6379", {}),
    # A retry: exactly these episodes, of a run with the same seed (tasks left to them).
    "episodes": ([{"task": TASK, "episode_index": 4}], {"tasks": None}),
    "retry_of": (BASELINE, {"episodes": [{"task": TASK, "episode_index": 0}], "tasks": None}),
}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    spec = create_app(Path("."), "http://127.0.0.1:0").openapi()
    body: dict[str, Any] = spec["components"]["schemas"]["StartRequest"]
    return body


def test_every_option_but_the_excluded_is_a_body_field(schema: dict[str, Any]) -> None:
    options = set(EvalConfig.model_fields) - set(NOT_OPTIONS)
    assert options == set(RUN_OPTIONS)
    assert options <= set(schema["properties"])
    assert set(NOT_OPTIONS) == {"version"}  # say why in NOT_OPTIONS when adding one
    assert "version" not in schema["properties"]


def test_each_field_has_the_configs_description_and_default(schema: dict[str, Any]) -> None:
    for name in RUN_OPTIONS:
        declared, served = EvalConfig.model_fields[name], schema["properties"][name]
        assert served.get("description") == declared.description, name
        if not declared.is_required():  # a null default is left out of the schema
            assert served.get("default") == declared.default, name
    assert schema["required"] == ["graph_name"]


def test_the_configs_ranges_hold_in_the_body(schema: dict[str, Any]) -> None:
    fields = schema["properties"]
    assert (fields["episode_count"]["minimum"], fields["episode_count"]["maximum"]) == (1, 1e6)
    assert (fields["worker_count"]["minimum"], fields["worker_count"]["maximum"]) == (1, 64)
    assert (fields["max_attempts"]["minimum"], fields["max_attempts"]["maximum"]) == (1, 5)
    assert fields["stop_alpha"]["exclusiveMaximum"] == 0.5
    budget = next(b for b in fields["step_budget"]["anyOf"] if b["type"] == "integer")
    assert (budget["minimum"], budget["maximum"]) == (1, 10_000_000)  # the config's, capped


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    with Backend(tmp_path_factory.mktemp("start-options"), "--vram-capacity-mb", "1") as server:
        yield server


@pytest.fixture(scope="module")
def baseline(backend: Backend) -> str:
    run_id = backend.start_run("babyai_oracle", 1, 1, tasks=[TASK])
    backend.wait_status(run_id, "completed")
    return run_id


def test_samples_cover_every_option() -> None:
    missing = sorted(set(RUN_OPTIONS) - set(SAMPLES))
    assert not missing, f"add a sample value for the new run option(s) {missing} to SAMPLES"


@pytest.mark.parametrize("option", sorted(SAMPLES))
def test_each_option_sent_to_start_reaches_the_runs_spec(
    backend: Backend, baseline: str, option: str
) -> None:
    if option not in RUN_OPTIONS:
        pytest.skip(f"{option} is no longer a run option")
    value, companions = SAMPLES[option]
    value = baseline if value == BASELINE else value
    assert value != EvalConfig.model_fields[option].default
    body = {"graph_name": "babyai_oracle", "tasks": [TASK], **NEVER_ADMITTED, **companions}
    body[option] = value

    answer = backend.http.post(START, json=body)

    assert answer.status_code == 200, answer.text
    run_id = answer.json()["run_id"]
    spec = json.loads((backend.run_dir(run_id) / "spec.json").read_text())
    assert spec["config"][option] == value
    assert spec["scheduling"]["marginal_vram_mb"] == NEVER_ADMITTED["marginal_vram_mb"]
    backend.cancel(run_id)
