"""`agentcanvas verify-invariance` on every built-in graph, and on one that is not invariant.

The built-in graphs are found by listing ``src/agentcanvas/graphs/*.json``, so a new graph is
covered the day it lands. Each is run through the real console command at 1, 2 and 4 workers
with few, short episodes (the command starts its own servers for every worker count);
``babyai_oracle`` at 1, 2, 3, 4 and 8, where idle workers steal episodes from the others'
chunks (work-stealing dispatch): which worker runs an episode never changes its record.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

import agentcanvas.graphs
from agentcanvas.eval.config import EvalRun
from agentcanvas.fileio import read_json
from agentcanvas.graph.model import load_graph_file
from support.cli import run_cli

BUILTIN_GRAPHS = sorted(Path(agentcanvas.graphs.__file__).parent.glob("*.json"))
N_EPISODES = "2"  # per task
STEP_BUDGET = "24"  # caps long episodes (CartPole runs 500 steps) so the check stays fast
CLI_TIMEOUT_S = 240.0
FAILED_STATUSES = {"error", "exception", "timeout", "cancelled"}


def agentcanvas_cli(*args: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    """Run the installed console script with ``workspace`` as AGENTCANVAS_HOME and cwd."""
    return run_cli(*args, workspace=workspace, timeout_s=CLI_TIMEOUT_S)


def run_summaries(workspace: Path) -> list[EvalRun]:
    runs = sorted((workspace / "outputs" / "eval_runs").iterdir())
    return [EvalRun.model_validate(read_json(r / "summary.json")) for r in runs]


def test_the_builtin_graphs_are_found() -> None:
    names = [p.stem for p in BUILTIN_GRAPHS]
    assert "babyai_oracle" in names
    for path in BUILTIN_GRAPHS:
        assert load_graph_file(path).name == path.stem


WORKER_COUNTS = {"babyai_oracle": [1, 2, 3, 4, 8]}  # default [1, 2, 4]
# Graphs whose policy is a server outside the run, checked where one is started for them.
NEEDS_A_SERVER = {
    "libero_policy_server": "its policy is a server at ws://127.0.0.1:8000: "
    "tests/integration/test_libero.py runs it against one, records and every request "
    "compared at -w 1 and -w 2",
}
EPISODES = {"babyai_oracle": "6"}  # per task: 12 episodes, so 3 workers have some to steal


@pytest.mark.parametrize("graph_file", BUILTIN_GRAPHS, ids=lambda p: p.stem)
def test_builtin_graph_is_invariant_at_several_worker_counts(
    graph_file: Path, tmp_path: Path
) -> None:
    name = graph_file.stem
    if name in NEEDS_A_SERVER:
        pytest.skip(NEEDS_A_SERVER[name])
    counts = WORKER_COUNTS.get(name, [1, 2, 4])
    n_episodes = EPISODES.get(name, N_EPISODES)
    proc = agentcanvas_cli(
        "verify-invariance",
        name,
        "-n",
        n_episodes,
        "--step-budget",
        STEP_BUDGET,
        "--workers",
        ",".join(map(str, counts)),
        workspace=tmp_path,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    for count in counts[1:]:
        assert f"identical (workers 1 vs {count})" in proc.stdout
    summaries = run_summaries(tmp_path)
    assert [s.config.worker_count for s in summaries] == counts
    base = summaries[0]
    assert base.episodes_done == base.episodes_total >= int(n_episodes)
    for summary in summaries:
        # Every worker reported, and together they ran each episode once.
        assert [w.worker_id for w in summary.workers] == list(range(summary.config.worker_count))
        assert sum(w.episodes for w in summary.workers) == summary.episodes_total
        assert summary.graph_name == name and summary.status == "completed"
        # Runs that only failed would be trivially "identical"; these really ran.
        assert not FAILED_STATUSES & set(summary.status_counts), summary.status_counts
        assert summary.aggregate_metrics, "no metrics: nothing was compared"
        assert [e.identity() for e in summary.episodes] == [e.identity() for e in base.episodes]
    # A shared node set (a model) started once, in the first run's folder, and every worker
    # count borrowed it (its batch modes are in each run's determinism block).
    shared = {key.split(".", 1)[0] for key in base.determinism.shared_server_modes}
    for nodeset in sorted(shared):
        logs = sorted(tmp_path.glob(f"outputs/eval_runs/*/servers/server_{nodeset}.log"))
        first = tmp_path / "outputs" / "eval_runs" / base.run_id / "servers"
        assert [log.parent for log in logs] == [first], logs
        for summary in summaries:
            assert set(summary.determinism.shared_server_modes) == set(
                base.determinism.shared_server_modes
            )


LEAKY_ENV = textwrap.dedent(
    '''
    """leaky: a replicated env whose `served` node counts the episodes its process has run."""

    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec


    class State:
        def __init__(self):
            self.served = 0


    class LeakyPanel(Panel):
        spec = PanelSpec(fields=[FieldSpec(name="task_id", kind="str", default="ok"),
                                 FieldSpec(name="episode_index", kind="int", default=0),
                                 FieldSpec(name="seed", kind="int", default=0)],
                         actions=["play"])

        def on_action(self, name):
            if name != "play":
                return super().on_action(name)
            self.state.served += 1  # process-global: depends on which worker ran what
            return dict(self.values)

        def on_load(self):
            return LoadInfo(episode_id=f"ok/{self.values['episode_index']}")


    NODESET = NodeSet(name="leaky", parallelism="replicated", state_factory=State,
                      panel_class=LeakyPanel)


    @NODESET.node("served", outputs=[PortSpec(name="count", type="int"),
                                     PortSpec(name="done", type="bool")], done_port="done")
    def served(inputs, config, state, ctx):
        return {"count": state.served, "done": True}
    '''
)

LEAKY_GRAPH = textwrap.dedent(
    """
    {
      "version": 1, "name": "leaky_graph",
      "env": {"nodeset": "leaky", "tasks": ["ok"]},
      "nodes": [{"id": "env", "type": "leaky.served"}, {"id": "out", "type": "core.graphOut"}],
      "edges": [{"source": "env.count", "target": "out.served"}]
    }
    """
)


def test_a_worker_dependent_graph_fails_verify_invariance_with_a_diff(tmp_path: Path) -> None:
    (tmp_path / "graph_nodes" / "leaky").mkdir(parents=True)
    (tmp_path / "graph_nodes" / "leaky" / "__init__.py").write_text(LEAKY_ENV, encoding="utf-8")
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "leaky_graph.json").write_text(LEAKY_GRAPH, encoding="utf-8")

    proc = agentcanvas_cli(
        "verify-invariance", "leaky_graph", "-n", "4", "--workers", "1,2", workspace=tmp_path
    )

    assert proc.returncode == 4, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"  # differ
    assert "Traceback" not in proc.stderr
    assert "DIFFER (workers 1 vs 2)" in proc.stdout
    # One worker served episodes 0-3 as its 1st-4th; with two, worker 1 starts again at 1
    # on episode 2 (the head of its chunk) and worker 0 on episode 0. Which of them runs
    # episodes 1 and 3 depends on who is idle first (work stealing): 3 differs either way.
    assert "episode 2 metrics: {'served': 3} != {'served': 1}" in proc.stdout
    assert "episode 3 metrics: {'served': 4} != {'served': " in proc.stdout
    assert "episode 0 metrics" not in proc.stdout
    assert "aggregate_metrics differ" in proc.stdout
