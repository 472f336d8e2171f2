"""RunSpec reads spec.json as the code before it wrote it, names bad fields, round-trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.errors import ConfigError, UserInputError
from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.run_spec import SPEC_VERSION, RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.scheduler.calibration import CalibrationStore, graph_fingerprint
from agentcanvas.scheduler.job_scheduler import JobScheduler
from agentcanvas.server.registry import WorkspaceComponentRegistry


@pytest.fixture(scope="module")
def graph_json() -> dict[str, Any]:
    registry = WorkspaceComponentRegistry()
    registry.scan_all()
    return registry.load_graph("babyai_oracle").model_dump(mode="json")


def legacy_rest_spec(graph_json: dict[str, Any]) -> dict[str, Any]:
    """spec.json exactly as the REST submit path wrote it before RunSpec (after submit)."""
    config = EvalConfig(graph_name="babyai_oracle", episode_count=2, worker_count=3)
    return {
        "version": 1,
        "config": config.model_dump(mode="json"),
        "scheduling": {
            "marginal_vram_mb": 12.5,
            "exclusive_gpu": True,
            "priority": 4,
            "submitted_at": 1700000000.25,
        },
        "graph": graph_json,
        "shared_nodesets": ["policy_mlp"],
        "active_workspace_dir": None,
        "run_id": "20240101_000000",
    }


def legacy_foreground_spec(graph_json: dict[str, Any]) -> dict[str, Any]:
    """spec.json as the foreground eval wrote it: no shared_nodesets, submitted_at, resume."""
    config = EvalConfig(graph_name="babyai_oracle", episode_count=1)
    return {
        "version": 1,
        "run_id": "20240101_000001",
        "config": config.model_dump(mode="json"),
        "scheduling": {"marginal_vram_mb": 0, "exclusive_gpu": False, "priority": 0},
        "graph": graph_json,
        "active_workspace_dir": None,
    }


def write_raw(tmp_path: Path, data: Any) -> RunDir:
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    run_dir.spec_path.write_text(json.dumps(data))
    return run_dir


def test_a_legacy_rest_spec_reads_with_every_field(
    tmp_path: Path, graph_json: dict[str, Any]
) -> None:
    spec = RunSpec.read(write_raw(tmp_path, legacy_rest_spec(graph_json)))
    assert spec.spec_version == 1
    assert spec.config.worker_count == 3 and spec.config.episode_count == 2
    assert spec.scheduling.priority == 4 and spec.scheduling.exclusive_gpu is True
    assert spec.scheduling.marginal_vram_mb == 12.5
    assert spec.scheduling.submitted_at == 1700000000.25
    assert spec.shared_nodesets == ["policy_mlp"] and spec.resume is False
    assert spec.graph_model().model_dump(mode="json") == graph_json


def test_a_legacy_foreground_spec_gets_the_defaults(
    tmp_path: Path, graph_json: dict[str, Any]
) -> None:
    spec = RunSpec.read(write_raw(tmp_path, legacy_foreground_spec(graph_json)))
    assert spec.shared_nodesets == [] and spec.resume is False
    assert spec.scheduling.submitted_at is None


def test_a_rewrite_keeps_the_file_layout_and_unknown_fields(
    tmp_path: Path, graph_json: dict[str, Any]
) -> None:
    legacy = {**legacy_rest_spec(graph_json), "engine": "from-a-newer-version"}
    run_dir = write_raw(tmp_path, legacy)
    RunSpec.read(run_dir).write(run_dir)
    rewritten = json.loads(run_dir.spec_path.read_text())
    scheduling = {**legacy["scheduling"], "model_resources": {}}  # fields added since: defaults
    assert rewritten == {**legacy, "scheduling": scheduling, "resume": False}  # "version" kept
    # the calibration key of the frozen graph does not change through the model
    assert graph_fingerprint(rewritten["graph"]) == graph_fingerprint(graph_json)


@pytest.mark.parametrize(
    ("poison", "field"),
    [
        (lambda s: s["config"].update(episode_count=None), "config.episode_count"),
        (lambda s: s["scheduling"].update(priority=500), "scheduling.priority"),
        (lambda s: s.pop("config"), "config"),
        (lambda s: s.update(version=SPEC_VERSION + 1), "version"),
        (lambda s: s.update(shared_nodesets="policy_mlp"), "shared_nodesets"),
        (lambda s: s["graph"].update(nodes=[{"id": 3}]), "graph"),
    ],
)
def test_a_bad_field_is_named(
    tmp_path: Path, graph_json: dict[str, Any], poison: Any, field: str
) -> None:
    data = json.loads(json.dumps(legacy_rest_spec(graph_json)))
    poison(data)
    with pytest.raises(UserInputError, match=rf"spec\.json.*{field}"):  # graph: GraphFormatError
        RunSpec.read(write_raw(tmp_path, data))


def test_a_non_finite_number_is_named(tmp_path: Path, graph_json: dict[str, Any]) -> None:
    data = legacy_rest_spec(graph_json)
    data["scheduling"]["marginal_vram_mb"] = float("inf")
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    run_dir.spec_path.write_text(json.dumps(data))  # Python writes Infinity
    with pytest.raises(ConfigError, match=r"spec\.json\.scheduling\.marginal_vram_mb"):
        RunSpec.read(run_dir)


def test_recover_and_resume_read_a_legacy_spec(tmp_path: Path, graph_json: dict[str, Any]) -> None:
    """A queued run whose spec.json the previous version wrote is re-queued from it; a resume
    rewrites it through the model with the resume flag."""
    runs = tmp_path / "runs"
    run_dir = RunDir(runs / "20240101_000000")
    run_dir.create()
    legacy = legacy_rest_spec(graph_json)
    legacy.pop("shared_nodesets")
    run_dir.spec_path.write_text(json.dumps(legacy))
    calibration = CalibrationStore(tmp_path / "calibration.json")
    scheduler = JobScheduler(runs, "http://127.0.0.1:9", [], calibration)

    assert scheduler.recover() == [run_dir.root.name]  # no summary yet: submit died there
    job = scheduler.queue[0]
    assert (job.priority, job.worker_count, job.exclusive_gpu) == (4, 3, True)
    assert job.graph_key == graph_fingerprint(graph_json)
    assert job.seq == 1700000000.25

    scheduler.cancel(job.run_id)
    scheduler.resume(job.run_id, {"policy_mlp": "http://127.0.0.1:1"}, ["policy_mlp"])
    resumed = RunSpec.read(run_dir)
    assert resumed.resume is True and resumed.shared_nodesets == ["policy_mlp"]
    assert resumed.scheduling.submitted_at is not None
    assert resumed.scheduling.submitted_at > 1700000000.25
