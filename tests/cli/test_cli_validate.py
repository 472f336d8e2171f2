"""``validate`` refuses graphs that cannot run (tasks the env lacks, a panel without task_id
or without tasks, a required input no edge feeds), each message naming the node or field and
the fix; ``tasks GRAPH`` lists the valid tasks, the same set every message lists."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from agentcanvas import exit_codes
from agentcanvas.eval.tasks import valid_tasks
from agentcanvas.nodesets.env_minigrid import LEVELS
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.cli import run_cli
from support.truth_workspace import env_graph, graph, write_truth_workspace
from support.workspace import write_files

CLI_TIMEOUT_S = 120.0

# Two envs whose panels cannot give an episode its task: no task_id field; no task offered.
ODD_ENVS = textwrap.dedent(
    '''
    """oddenv: panels that cannot start an episode."""

    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec


    def fields(*extra):
        return [*extra, FieldSpec(name="episode_index", kind="int", default=0),
                FieldSpec(name="seed", kind="int", default=0)]


    class NoTaskField(Panel):
        spec = PanelSpec(fields=fields())

        def on_load(self):
            return LoadInfo(episode_id="x")


    class NoTasks(Panel):
        spec = PanelSpec(fields=fields(FieldSpec(name="task_id", kind="choice", choices=[])))

        def on_load(self):
            return LoadInfo(episode_id="x")


    def step(inputs, config, state, ctx):
        return {"done": True}
    '''
)


def _odd(name: str, panel: str) -> str:
    return ODD_ENVS + textwrap.dedent(
        f"""

        NODESET = NodeSet(name="{name}", parallelism="replicated", panel_class={panel})
        NODESET.node("step", inputs=[PortSpec(name="action", required=False)],
                     outputs=[PortSpec(name="done", type="bool")], done_port="done")(step)
        """
    )


def _env_graph(name: str, env: str) -> dict[str, object]:
    return graph(name, [{"id": "env", "type": f"{env}.step"}], [], env={"nodeset": env})


UNRUNNABLE = [
    env_graph("ghost_task", {}, ["walk", "nosuch"]),
    env_graph("no_task", {}, []),
    _env_graph("no_task_field", "notaskfield"),
    _env_graph("no_tasks", "notasks"),
    graph(
        "unfed",
        [{"id": "c", "type": "core.constant"}, {"id": "p", "type": "core.arith"}],
        [{"source": "c.value", "target": "p.a"}, {"source": "p.out", "target": "out.success"}],
    ),
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_truth_workspace(tmp_path_factory.mktemp("validate") / "ws")
    files = {f"graphs/{g['name']}.json": json.dumps(g) for g in UNRUNNABLE}
    files["graph_nodes/notaskfield/__init__.py"] = _odd("notaskfield", "NoTaskField")
    files["graph_nodes/notasks/__init__.py"] = _odd("notasks", "NoTasks")
    return write_files(root, files)


def refused(workspace: Path, *args: str) -> str:
    proc = run_cli(*args, workspace=workspace, timeout_s=CLI_TIMEOUT_S)
    assert (proc.returncode, proc.stdout) == (exit_codes.USAGE, ""), proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    return " ".join(proc.stderr.split())


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "ghost_task",
            "env.tasks: env 'tenv' has no task 'nosuch' (valid: walk, explode); remove it or "
            "pick a valid one (see `agentcanvas tasks ghost_task`)",
        ),
        (
            "no_task",
            "env.tasks is empty and env.fields sets no task_id: a run would have no task (set "
            'env.tasks, e.g. ["walk"]; see `agentcanvas tasks no_task`)',
        ),
        (
            "no_task_field",
            "env.nodeset 'notaskfield': its panel has no task_id field, which every episode "
            "sets, so no episode could start (add them to the node set's PanelSpec, e.g. "
            'FieldSpec(name="task_id", ...))',
        ),
        (
            "no_tasks",
            "env.nodeset 'notasks': its panel offers no task with the graph's env.fields, so "
            "no episode could start",
        ),
        (
            "unfed",
            "node 'p' (core.arith): required input 'b' has no edge, so the node would never "
            "fire (connect an output to p.b, or remove the node)",
        ),
    ],
)
def test_validate_refuses_a_graph_that_cannot_run(workspace: Path, name: str, message: str) -> None:
    text = refused(workspace, "validate", name)
    assert f"graph '{name}' is not runnable" in text
    assert message in text


@pytest.mark.parametrize("name", ["ghost_task", "no_task"])
def test_eval_and_play_refuse_the_graphs_tasks_before_a_run(workspace: Path, name: str) -> None:
    runs = workspace / "outputs" / "eval_runs"
    before = set(runs.iterdir()) if runs.exists() else set()
    assert "env.tasks" in refused(workspace, "eval", name, "-n", "1")
    assert "env.tasks" in refused(workspace, "play", name)
    assert (set(runs.iterdir()) if runs.exists() else set()) == before
    # Tasks given on the command line are what the run uses: the graph's do not matter then.
    ok = run_cli("play", name, "--task", "walk", workspace=workspace, timeout_s=CLI_TIMEOUT_S)
    assert ok.returncode == exit_codes.OK, ok.stderr


def test_tasks_lists_the_valid_tasks_of_built_in_graphs(tmp_path: Path) -> None:
    proc = run_cli("tasks", "babyai_oracle", "--json", workspace=tmp_path, timeout_s=60)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    every_level = [t for splits in LEVELS.values() for ids in splits.values() for t in ids]
    assert listed["tasks"] == ["BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0"]
    assert listed["valid"][:2] == listed["tasks"]  # the graph's own first
    assert sorted(listed["valid"]) == sorted(every_level)  # what the env's panel accepts
    text = run_cli("tasks", "cartpole_mlp", workspace=tmp_path, timeout_s=60).stdout
    assert text.splitlines()[0].startswith("cartpole_mlp: env env_gym, 4 valid task(s)")
    assert "  * CartPole-v1" in text and "    Pendulum-v1" in text


def test_every_message_lists_the_same_valid_tasks(tmp_path: Path) -> None:
    """The unknown-task message of eval names what `tasks` lists, which is every task the
    env's own panel message knows (env_minigrid: all of LEVELS, not one split's)."""
    message = refused(tmp_path, "eval", "babyai_oracle", "--tasks", "nosuch")
    named = message.split("(valid: ", 1)[1].rstrip(")").split(", ")
    registry = WorkspaceComponentRegistry(tmp_path)
    registry.scan_all()
    valid = valid_tasks(registry, registry.load_graph("babyai_oracle"))
    assert named == valid
    every_level = [t for splits in LEVELS.values() for ids in splits.values() for t in ids]
    assert valid is not None and sorted(valid) == sorted(every_level)
