"""The run's settings reach every server call, and a server's exception reaches the record.

Real ``agentcanvas eval`` subprocesses over a workspace under ``tmp_path`` with two replicated
node sets served by auto_host children:

- ``hangenv``: its ``step`` sleeps 600 s inside the server (the event loop blocked, the
  server deaf even to SIGTERM) for task ``hang``. With ``--per-step-timeout 2`` the episode
  must end as a ``timeout`` about 2 s later, not after a fixed 60 s proxy deadline.
- ``badenv``: its panel's ``reset`` raises ValueError. The episode record must name the
  exception's type and message, not ``HTTP 500: Internal Server Error``.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.errors import RemoteError
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.server.deadlines import call_deadline
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.cli import run_cli
from support.registry import scanned
from support.workspace import write_graph, write_nodeset

PER_STEP_TIMEOUT_S = 2.0
SLACK_S = 4.0  # server answer, bookkeeping and a loaded machine
CLI_TIMEOUT_S = 150.0
RUN_WALL_S = 100.0  # two attempts at 2 s + three server starts; 2 × 60 s deadlines exceed it

ENV_TEMPLATE = '''
"""{name}: a replicated env for deadline and error tests."""

import time

from agentcanvas.nodes.base import NodeSet, Panel
from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec


class EnvPanel(Panel):
    spec = PanelSpec(fields=[FieldSpec(name="task_id", kind="str", default="ok"),
                             FieldSpec(name="episode_index", kind="int", default=0),
                             FieldSpec(name="seed", kind="int", default=0)])

    def on_action(self, name):
        if name == "reset" and {broken}:
            raise ValueError("reset refused: this panel is broken on purpose")
        if name == "play":
            self.state["task"] = self.values["task_id"]
            return dict(self.values)
        return super().on_action(name)

    def on_load(self):
        return LoadInfo(episode_id=str(self.values["episode_index"]))


NODESET = NodeSet(name="{name}", parallelism="replicated", state_factory=dict,
                  panel_class=EnvPanel)


@NODESET.node("step", inputs=[PortSpec(name="action", required=False)],
              outputs=[PortSpec(name="obs", type="int"), PortSpec(name="done", type="bool"),
                       PortSpec(name="metrics", type="dict")], done_port="done")
def step(inputs, config, state, ctx):
    if state.get("task") == "hang" and inputs.get("action") is not None:
        time.sleep(600)  # blocks the server's event loop: only SIGKILL ends it
    done = ctx.step >= 2
    return {{"obs": ctx.step, "done": done, "metrics": {{"success": int(done)}}}}
'''

GLUE = """
from agentcanvas.nodes.base import NodeSet
from agentcanvas.nodes.manifest import PortSpec

NODESET = NodeSet(name="dglue", parallelism="local")


@NODESET.node("act", inputs=[PortSpec(name="obs")], outputs=[PortSpec(name="action", type="int")])
def act(inputs, config, state, ctx):
    return {"action": 1}
"""


def make_graph(name: str, env: str, tasks: list[str]) -> Graph:
    nodes: list[dict[str, Any]] = [
        {"id": "env", "type": f"{env}.step"},
        {"id": "policy", "type": "dglue.act"},
        {"id": "out", "type": "core.graphOut"},
    ]
    edges = [
        {"source": "env.obs", "target": "policy.obs"},
        {"source": "policy.action", "target": "env.action", "next_iteration": True},
        {"source": "env.metrics", "target": "out.metrics"},
    ]
    binding = {"nodeset": env, "fields": {}, "tasks": tasks}
    return parse_graph({"version": 1, "name": name, "env": binding, "nodes": nodes, "edges": edges})


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("deadlines_ws")
    write_nodeset(
        root, "hangenv", textwrap.dedent(ENV_TEMPLATE.format(name="hangenv", broken="False"))
    )
    write_nodeset(
        root, "badenv", textwrap.dedent(ENV_TEMPLATE.format(name="badenv", broken="True"))
    )
    write_nodeset(root, "dglue", textwrap.dedent(GLUE))
    write_graph(root, make_graph("hangs", "hangenv", ["ok", "hang"]))
    write_graph(root, make_graph("broken", "badenv", ["ok"]))
    return root


def eval_json(workspace: Path, *args: str) -> dict[str, Any]:
    proc = run_cli("eval", *args, "--json", workspace=workspace, timeout_s=CLI_TIMEOUT_S)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    summary: dict[str, Any] = json.loads(proc.stdout)
    return summary


def test_per_step_timeout_is_the_deadline_of_a_hung_server_call(workspace: Path) -> None:
    started = time.monotonic()
    summary = eval_json(
        workspace,
        "hangs",
        "-n",
        "1",
        "--step-budget",
        "50",
        "--per-step-timeout",
        f"{PER_STEP_TIMEOUT_S:g}",
    )
    wall_s = time.monotonic() - started
    ok, hung = summary["episodes"]
    assert (ok["task"], ok["status"]) == ("ok", "completed"), ok
    assert (hung["task"], hung["status"]) == ("hang", "timeout"), hung
    assert hung["error"] == "a node-set call hit its wall-clock deadline: env"
    assert "ServerTimeoutError" in hung["node_errors"]["env"]
    assert f"within {PER_STEP_TIMEOUT_S:g} s" in hung["node_errors"]["env"]
    assert "hangenv#0 at http://127.0.0.1:" in hung["node_errors"]["env"]  # names the server
    # The call deadline ended it, not the episode's safety net of 50 × 2 s or a 60 s default.
    assert hung["duration_s"] < PER_STEP_TIMEOUT_S + SLACK_S
    assert wall_s < RUN_WALL_S  # the whole CLI run, hung servers killed and reaped included


def test_a_server_side_exception_reaches_the_episode_record(workspace: Path) -> None:
    summary = eval_json(workspace, "broken", "-n", "2")
    assert [ep["status"] for ep in summary["episodes"]] == ["exception", "exception"]
    for ep in summary["episodes"]:
        error = ep["error"]
        assert "RemoteError" in error and "/panel/episode" in error, error
        assert "ValueError: reset refused: this panel is broken on purpose" in error, error
        assert "badenv#0 at http://127.0.0.1:" in error, error
        assert "Internal Server Error" not in error


@pytest.mark.asyncio
async def test_remote_error_carries_type_and_message(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTCANVAS_HOME", str(workspace))
    reg: WorkspaceComponentRegistry = scanned(workspace)
    try:
        await reg.ensure_nodesets_for_graph(reg.load_graph("broken"), worker_count=1)
        handle = reg.get_env_panel("badenv#0")
        with call_deadline(5.0), pytest.raises(RemoteError) as caught:
            await handle.panel_action("reset")
        assert caught.value.exc_type == "ValueError"
        assert caught.value.exc_message == "reset refused: this panel is broken on purpose"
        # The server lives on: the next request is answered.
        assert (await handle.panel_action("play"))["task_id"] == "ok"
    finally:
        await reg.shutdown_all()
