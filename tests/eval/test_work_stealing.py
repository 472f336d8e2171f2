"""Work stealing in a real run: unequal episode lengths make an idle worker steal, and the
per-episode records stay those of one worker.

The workload is ``babyai_oracle``'s planner on two MiniGrid levels with a simulated renderer
latency per action (the ``env_minigrid`` panel field ``step_latency_ms``): ``Empty-5x5``
ends in a handful of actions, ``Empty-8x8`` takes about twice as many (fixed start and goal,
whatever the seed), so at 2 workers the worker holding the 5x5 chunk runs dry well before the
other, and takes 8x8 episodes from the tail of its chunk.
"""

from __future__ import annotations

import json
from pathlib import Path

import agentcanvas.graphs
from agentcanvas.eval.config import EvalRun
from agentcanvas.fileio import read_json
from support.cli import run_cli

N_PER_TASK = "6"
LATENCY_MS = 50.0
CLI_TIMEOUT_S = 240.0


def run_summaries(workspace: Path) -> list[EvalRun]:
    runs = sorted((workspace / "outputs" / "eval_runs").iterdir())
    return [EvalRun.model_validate(read_json(r / "summary.json")) for r in runs]


def write_latency_graph(workspace: Path) -> str:
    source = Path(agentcanvas.graphs.__file__).parent / "babyai_oracle.json"
    graph = json.loads(source.read_text(encoding="utf-8"))
    graph["name"] = "oracle_latency"
    graph["env"]["fields"] = {
        "dataset": "minigrid",
        "split": "Empty",
        "step_latency_ms": LATENCY_MS,
    }
    graph["env"]["tasks"] = ["MiniGrid-Empty-5x5-v0", "MiniGrid-Empty-8x8-v0"]
    (workspace / "graphs").mkdir()
    (workspace / "graphs" / "oracle_latency.json").write_text(json.dumps(graph), "utf-8")
    return str(graph["name"])


def test_unequal_episode_lengths_make_a_worker_steal_and_records_do_not_change(
    tmp_path: Path,
) -> None:
    name = write_latency_graph(tmp_path)
    proc = run_cli(
        "verify-invariance",
        name,
        "-n",
        N_PER_TASK,
        "--workers",
        "1,2",
        workspace=tmp_path,
        timeout_s=CLI_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    assert "identical (workers 1 vs 2)" in proc.stdout
    one, two = run_summaries(tmp_path)
    assert (one.config.worker_count, two.config.worker_count) == (1, 2)
    assert two.status_counts == {"completed": two.episodes_total}
    assert one.aggregate_metrics["success"].mean == 1.0  # the planner reached every goal
    # One worker: its single chunk, in order, with the one switch from 5x5 to 8x8.
    assert [w.model_dump() for w in one.workers] == [
        {"worker_id": 0, "episodes": 12, "task_switches": 1, "steals": 0}
    ]
    steals = sum(w.steals for w in two.workers)
    assert steals > 0, two.workers
    assert sum(w.episodes for w in two.workers) == two.episodes_total == 12
    # The 5x5 worker is the one that runs dry; the 8x8 it steals are a task switch for it.
    assert two.workers[0].steals > 0 and two.workers[0].task_switches == 1, two.workers
    assert two.workers[1].steals == 0, two.workers
    assert [e.identity() for e in two.episodes] == [e.identity() for e in one.episodes]
