"""Real evals of user batched functions on a shared server: checked, audited, reported.

A workspace written here (not built-ins) holds a light replicated environment and a shared
model node set with three batched functions: ``steady`` (row by row: batch-invariant),
``centred`` (subtracts half the batch mean: batch-dependent, declares examples) and
``centred_unchecked`` (the same, no examples). Each run is the real console command, so the
shared server really coalesces the requests of several workers into batches.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from agentcanvas.eval.config import EvalRun
from agentcanvas.eval.store import read_json
from support.cli import run_cli
from support.workspace import write_files, write_nodeset

CLI_TIMEOUT_S = 180.0
N_EPISODES = "3"  # per task; two tasks

PROBE_ENV = textwrap.dedent(
    '''
    """probe_env: observations drawn from the episode seed; sums the values it is sent."""

    import numpy as np
    from pydantic import BaseModel, ConfigDict

    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec

    N_STEPS = 6


    class State:
        def __init__(self):
            self.seed, self.total = 0, 0.0


    class ProbePanel(Panel):
        spec = PanelSpec(fields=[FieldSpec(name="task_id", kind="choice", default="t0",
                                           choices=["t0", "t1"]),
                                 FieldSpec(name="episode_index", kind="int", default=0),
                                 FieldSpec(name="seed", kind="int", default=0)],
                         actions=["play"])

        def on_action(self, name):
            if name != "play":
                return super().on_action(name)
            self.state.seed, self.state.total = int(self.values["seed"]), 0.0
            return dict(self.values)

        def on_load(self):
            return LoadInfo(episode_id=f"{self.values['task_id']}/{self.values['episode_index']}",
                            step_budget=N_STEPS)


    NODESET = NodeSet(name="probe_env", parallelism="replicated", state_factory=State,
                      panel_class=ProbePanel)


    class StepConfig(BaseModel):
        model_config = ConfigDict(extra="forbid")


    @NODESET.node("step", inputs=[PortSpec(name="value", type="float", required=False)],
                  outputs=[PortSpec(name="obs", type="array"), PortSpec(name="done", type="bool"),
                           PortSpec(name="metrics", type="dict")],
                  done_port="done", config=StepConfig)
    def step(inputs, config, state, ctx):
        if inputs.get("value") is not None:
            state.total += inputs["value"]
        obs = np.random.default_rng([state.seed, ctx.step]).normal(size=4).astype(np.float32)
        return {"obs": obs, "done": ctx.step >= N_STEPS - 1, "metrics": {"total": state.total}}
    '''
)

PROBE_MODEL = textwrap.dedent(
    '''
    """probe_model: three batched scorers of an observation (shared)."""

    import numpy as np
    from pydantic import BaseModel, ConfigDict

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    NODESET = NodeSet(name="probe_model", parallelism="shared")
    W = np.linspace(-1.0, 1.0, 4)
    EXAMPLES = [{"obs": np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)},
                {"obs": np.array([-1.5, 0.75, 0.0, 1.0], dtype=np.float32)},
                {"obs": np.array([3.0, 0.5, -0.5, -2.0], dtype=np.float32)}]
    PORTS = dict(inputs=[PortSpec(name="obs", type="array")],
                 outputs=[PortSpec(name="value", type="float")])


    class ScoreConfig(BaseModel):
        model_config = ConfigDict(extra="forbid")  # a misspelt key is refused
        scale: float = 1.0


    def _rows(items):
        return np.stack([np.asarray(inputs["obs"], dtype=np.float64) for inputs, _ in items])


    @NODESET.batched_node("steady", config=ScoreConfig, examples=EXAMPLES, **PORTS)
    def steady(items, config, state):
        """Row by row: a request's value never sees the rest of its batch."""
        scale = ScoreConfig.model_validate(config).scale
        return [{"value": scale * float(row @ W)} for row in _rows(items)]


    def _centred(items, config):
        rows = _rows(items)
        mean = rows.mean(axis=0)  # the batch leaks into every row
        return [{"value": float((row - 0.5 * mean) @ W)} for row in rows]


    @NODESET.batched_node("centred", config=ScoreConfig, examples=EXAMPLES, **PORTS)
    def centred(items, config, state):
        """Subtracts half the batch mean: batch-dependent, with examples."""
        return _centred(items, config)


    @NODESET.batched_node("centred_unchecked", config=ScoreConfig, **PORTS)
    def centred_unchecked(items, config, state):
        """The same, declaring no examples: only the running audit can catch it."""
        return _centred(items, config)
    '''
)


def graph_json(function: str) -> str:
    return json.dumps(
        {
            "version": 1,
            "name": f"{function}_graph",
            "env": {"nodeset": "probe_env", "tasks": ["t0", "t1"]},
            "nodes": [
                {"id": "env", "type": "probe_env.step"},
                {"id": "model", "type": f"probe_model.{function}"},
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [
                {"source": "env.obs", "target": "model.obs"},
                {"source": "model.value", "target": "env.value", "next_iteration": True},
                {"source": "env.metrics", "target": "out.metrics"},
            ],
        }
    )


FUNCTIONS = ("steady", "centred", "centred_unchecked")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    write_nodeset(tmp_path, "probe_env", PROBE_ENV)
    write_nodeset(tmp_path, "probe_model", PROBE_MODEL)
    return write_files(tmp_path, {f"graphs/{f}_graph.json": graph_json(f) for f in FUNCTIONS})


def clean_env() -> dict[str, str]:
    """This process's environment without batcher settings another test may have left."""
    drop = (
        "AGENTCANVAS_FLUSH_POLICY",
        "AGENTCANVAS_MAX_BATCH",
        "AGENTCANVAS_AUDIT_RATE",
        "AGENTCANVAS_AUDIT_SEED",
    )
    return {k: v for k, v in os.environ.items() if k not in drop}


def eval_json(workspace: Path, function: str, workers: int) -> EvalRun:
    proc = run_cli(
        "eval",
        f"{function}_graph",
        "-n",
        N_EPISODES,
        "-w",
        str(workers),
        "--json",
        workspace=workspace,
        timeout_s=CLI_TIMEOUT_S,
        env=clean_env(),
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    run = EvalRun.model_validate_json(proc.stdout)
    assert run.status == "completed", (run.error, proc.stderr[-3000:])
    assert run.status_counts == {"completed": 6}, run.status_counts
    return run


def test_a_batch_dependent_function_with_examples_fails_its_start_up_check(
    workspace: Path,
) -> None:
    run = eval_json(workspace, "centred", workers=4)

    info = run.determinism
    assert info.guaranteed is False
    entry = info.batched_functions["probe_model.centred"]
    assert entry.mode == "per_request" and entry.verified is False
    assert entry.verified_by.startswith("start-up check failed"), entry.verified_by
    assert entry.mismatch is not None and entry.mismatch.startswith("start-up check: example")
    assert entry.batched_requests == 0  # per request from the start: no episode was batched
    assert entry.first_episode_affected is None
    [reason] = [r for r in info.reasons if "probe_model.centred" in r]
    assert "depend on the batch" in reason and "no episode of this run" in reason


def test_a_batch_dependent_function_without_examples_is_caught_by_the_audit(
    workspace: Path,
) -> None:
    """Run without --json: the result table shows the function; the summary has the block."""
    proc = run_cli(
        "eval",
        "centred_unchecked_graph",
        "-n",
        N_EPISODES,
        "-w",
        "4",
        workspace=workspace,
        timeout_s=CLI_TIMEOUT_S,
        env={**clean_env(), "COLUMNS": "400"},
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    [folder] = (workspace / "outputs" / "eval_runs").iterdir()
    run = EvalRun.model_validate(read_json(folder / "summary.json"))
    assert run.status_counts == {"completed": 6}, (run.error, proc.stderr[-3000:])

    info = run.determinism
    assert info.guaranteed is False
    entry = info.batched_functions["probe_model.centred_unchecked"]
    assert entry.verified_by.startswith("no start-up check"), entry.verified_by
    assert entry.mode == "per_request", entry  # the audit's mismatch ended batching
    assert entry.mismatch is not None and entry.mismatch.startswith("audit: position"), entry
    assert entry.batches_audited >= 1 and entry.batched_requests >= 2
    assert entry.mismatch_episode_key is not None
    assert entry.mismatch_episode_key.startswith(f"{run.run_id}:")
    assert entry.first_episode_affected in range(6)
    assert entry.first_episode_affected <= int(entry.mismatch_episode_key.rsplit(":", 1)[1])
    [reason] = [r for r in info.reasons if "probe_model.centred_unchecked" in r]
    assert f"from episode {entry.first_episode_affected} on" in reason
    table = proc.stderr
    assert "determinism: NOT guaranteed" in table
    [row] = [
        line
        for line in table.splitlines()
        if "probe_model.centred_unchecked" in line and "per_request" in line
    ]
    assert f"first episode affected: {entry.first_episode_affected}" in row


def test_a_batch_invariant_function_is_guaranteed_and_identical_at_1_3_and_4_workers(
    workspace: Path,
) -> None:
    proc = run_cli(
        "verify-invariance",
        "steady_graph",
        "-n",
        N_EPISODES,
        workspace=workspace,
        timeout_s=CLI_TIMEOUT_S * 2,
        env=clean_env(),
    )  # the default worker counts

    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    assert "identical (workers 1 vs 3)" in proc.stdout
    assert "identical (workers 1 vs 4)" in proc.stdout
    folders = sorted((workspace / "outputs" / "eval_runs").iterdir())
    runs = [EvalRun.model_validate(read_json(f / "summary.json")) for f in folders]
    assert [r.config.worker_count for r in runs] == [1, 3, 4]
    for run in runs:
        assert run.status_counts == {"completed": 6}
        assert run.determinism.guaranteed is True, run.determinism.reasons
        entry = run.determinism.batched_functions["probe_model.steady"]
        assert entry.verified and entry.mode == "batched" and entry.mismatch is None
        assert entry.verified_by.startswith("start-up check passed")
        assert [e.identity() for e in run.episodes] == [e.identity() for e in runs[0].episodes]
    assert runs[2].determinism.batched_functions["probe_model.steady"].batched_requests > 0


def test_max_batch_zero_is_refused_naming_the_variable(workspace: Path) -> None:
    env = {**clean_env(), "AGENTCANVAS_MAX_BATCH": "0"}
    proc = run_cli(
        "eval",
        "steady_graph",
        "-n",
        "1",
        "-w",
        "2",
        workspace=workspace,
        timeout_s=CLI_TIMEOUT_S,
        env=env,
    )

    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert "AGENTCANVAS_MAX_BATCH must be an integer from 1 to 1024, not '0'" in proc.stderr
