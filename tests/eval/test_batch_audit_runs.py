"""Real evals of user batched functions on a shared server: checked, audited, reported.

A workspace written here (not built-ins, ``support.batched_nodesets``) holds a light
replicated environment and a shared model node set with four batched functions: ``steady``
(row by row: batch-invariant), ``centred`` (subtracts half the batch mean: batch-dependent,
declares examples), ``centred_unchecked`` (the same, no examples) and ``sneaky`` (passes its
examples, batch-dependent on every input the env draws). Each run is the real console
command, so the shared server really coalesces the requests of several workers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentcanvas.eval.config import EvalRun
from agentcanvas.fileio import read_json
from support.batched_nodesets import write_batched_workspace
from support.cli import run_cli

CLI_TIMEOUT_S = 180.0
N_EPISODES = "3"  # per task; two tasks


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return write_batched_workspace(tmp_path)


def clean_env() -> dict[str, str]:
    """This process's environment without batcher settings another test may have left."""
    drop = (
        "AGENTCANVAS_FLUSH_POLICY",
        "AGENTCANVAS_MAX_BATCH",
        "AGENTCANVAS_AUDIT_RATE",
        "AGENTCANVAS_AUDIT_SEED",
    )
    return {k: v for k, v in os.environ.items() if k not in drop}


def eval_json(
    workspace: Path, function: str, workers: int, *args: str, env: dict[str, str] | None = None
) -> EvalRun:
    proc = run_cli(
        "eval",
        f"{function}_graph",
        "-n",
        N_EPISODES,
        "-w",
        str(workers),
        "--json",
        *args,
        workspace=workspace,
        timeout_s=CLI_TIMEOUT_S,
        env={**clean_env(), **(env or {})},
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
    assert info.guaranteed is False and info.level == "broken"
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
    assert info.guaranteed is False and info.level == "broken"
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
    assert "determinism: BROKEN" in table
    [row] = [
        line
        for line in table.splitlines()
        if "probe_model.centred_unchecked" in line and "per_request" in line
    ]
    assert f"first episode affected: {entry.first_episode_affected}" in row


def test_a_batch_invariant_function_is_identical_at_1_3_and_4_workers(
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
    assert runs[0].determinism.level == "certified", runs[0].determinism  # -w 1: alone
    for run in runs:
        assert run.status_counts == {"completed": 6}
        entry = run.determinism.batched_functions["probe_model.steady"]
        # Batched without --certify: its examples passed, a sample, which proves nothing.
        level = "sampled" if entry.batched_requests else "certified"
        assert run.determinism.level == level, run.determinism
        assert run.determinism.guaranteed is (level == "certified")
        assert entry.verified and entry.mode == "batched" and entry.mismatch is None
        assert entry.verified_by.startswith("start-up check passed")
        assert [e.identity() for e in run.episodes] == [e.identity() for e in runs[0].episodes]
    assert runs[2].determinism.batched_functions["probe_model.steady"].batched_requests > 0


# -- levels: what a claim rests on ------------------------------------------------------------
def test_a_function_that_passes_its_examples_but_depends_on_the_batch_is_never_certified(
    workspace: Path,
) -> None:
    """The reported case: examples pass, outputs depend on the batch for other inputs."""
    off = eval_json(workspace, "sneaky", 4, env={"AGENTCANVAS_AUDIT_RATE": "0"})
    sampled = eval_json(workspace, "sneaky", 4)
    alone = eval_json(workspace, "sneaky", 1)

    entry = off.determinism.batched_functions["probe_model.sneaky"]
    assert entry.batched_requests > 0 and entry.run_batches > 0  # it really batched
    assert entry.level == off.determinism.level == "sampled" and not off.determinism.guaranteed
    assert entry.run_batches_audited == 0 and entry.audit_rate == 0
    assert "the audit was off (AGENTCANVAS_AUDIT_RATE=0)" in entry.level_detail
    assert "start-up check passed" in entry.level_detail and "--certify" in entry.level_detail
    assert [e.identity() for e in off.episodes] != [e.identity() for e in alone.episodes]
    # The default audit catches it in its first shared batch; never certified either way.
    assert sampled.determinism.level in {"sampled", "broken"}
    assert alone.determinism.level == "certified" and alone.determinism.guaranteed
    assert alone.determinism.batched_functions["probe_model.sneaky"].batched_requests == 0


def test_certify_finds_the_dependence_and_serves_every_row_its_alone_result(
    workspace: Path,
) -> None:
    certified = eval_json(workspace, "sneaky", 4, "--certify")
    alone = eval_json(workspace, "sneaky", 1)

    info = certified.determinism
    assert info.certify and info.level == "broken" and not info.guaranteed
    entry = info.batched_functions["probe_model.sneaky"]
    assert entry.mode == "per_request" and entry.mismatch is not None
    assert entry.certify and entry.rows_alone >= 2
    assert entry.batched_requests == 0 and entry.first_episode_affected is None
    assert "no episode of this run was served an output computed in a shared batch" in (
        entry.level_detail
    )
    # Alone results from the first batched row on: the records are the -w 1 records.
    assert [e.identity() for e in certified.episodes] == [e.identity() for e in alone.episodes]


def test_certify_certifies_a_batch_invariant_function(workspace: Path) -> None:
    certified = eval_json(workspace, "steady", 4, "--certify")

    info = certified.determinism
    assert info.level == "certified" and info.guaranteed and info.reasons == []
    entry = info.batched_functions["probe_model.steady"]
    assert entry.certify and entry.rows_alone >= 2 and entry.batched_requests == 0
    assert entry.mode == "batched" and entry.mismatch is None
    assert "recomputed alone and matched bit for bit" in entry.level_detail


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
