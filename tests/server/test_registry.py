"""WorkspaceComponentRegistry, the facade: its catalogue operations are its catalogue's, and
its in-process handles run the worked example of ``docs/nodesets.md`` (episodes, the panel,
eviction of keyed state).

What the catalogue itself does (discovery, overlays, validation) is
tests/catalogue/test_catalogue.py; servers started through the registry are
tests/integration/test_servers.py.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from agentcanvas.catalogue import ACTIVE_WORKSPACE_ENV, NodeSetCatalogue
from agentcanvas.errors import UserInputError
from agentcanvas.eval.episode import EpisodeOptions, EpisodeSpec, EpisodeWiring, run_episode
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.nodes.base import CallContext
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.doc_example import write_doc_example

EPISODE_TIMEOUT_S = 20.0


def _registry(workspace: Path) -> WorkspaceComponentRegistry:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    assert registry.load_errors == {}, registry.load_errors
    return registry


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(ACTIVE_WORKSPACE_ENV, raising=False)
    return write_doc_example(tmp_path / "workspace")


def test_the_registry_answers_from_the_catalogue_it_is_given(workspace: Path) -> None:
    catalogue = NodeSetCatalogue(workspace=workspace)
    registry = WorkspaceComponentRegistry(catalogue=catalogue)
    registry.scan_all()
    assert registry.catalogue is catalogue and registry.workspace == workspace
    assert registry.load_errors is catalogue.load_errors
    assert registry.nodeset_names() == catalogue.nodeset_names()
    assert "line_world" in catalogue.nodeset_names()  # the registry's scan was the catalogue's
    assert registry.load_graph("line_walk") == catalogue.load_graph("line_walk")
    assert registry.manifest("line_world") is catalogue.manifest("line_world")


def test_handles_are_in_process_until_one_is_bound(workspace: Path) -> None:
    registry = _registry(workspace)
    local = registry.local_instance("line_world")
    assert registry.handle_for("line_world") is local  # one instance per process
    assert registry.bound("line_world") is None
    other = _registry(workspace).local_instance("line_world")
    registry.bind_handle("line_world", other)
    assert registry.handle_for("line_world") is other
    assert registry.bound("line_world") is other


async def test_the_doc_example_graph_runs_episodes(workspace: Path) -> None:
    registry = _registry(workspace)
    graph = registry.load_graph("line_walk")
    env = registry.local_instance("line_world")
    wiring = EpisodeWiring(resolver=registry, env=env)
    for task in ("line-5", "line-9"):
        for index in range(3):
            seed = episode_seed(0, task, index)
            spec = EpisodeSpec(index, task, index, seed, key=f"{task}:{index}")
            result = await asyncio.wait_for(
                run_episode(graph, spec, wiring, EpisodeOptions()), EPISODE_TIMEOUT_S
            )
            goal = int(result.instruction.rsplit(" ", 1)[1])
            assert result.status == "completed", result.error
            assert result.episode_id == f"{task}/{index}"
            assert result.step_budget == 2 * int(task.split("-")[1])  # from on_load
            assert result.metrics == {
                "success": 1,
                "moves": math.ceil(goal / 2),
                "cells_visited": math.ceil(goal / 2) + 1,
            }
            assert result.steps == math.ceil(goal / 2) + 1  # iteration 0 only observes
    assert env.state.visited == {}  # every episode's keyed entries were evicted
    await registry.close_locals()


async def test_the_doc_example_panel_cascade(workspace: Path) -> None:
    env = _registry(workspace).local_instance("line_world")
    assert (await env.panel_change("task_id", "line-9"))["task_id"] == "line-9"
    values = await env.panel_change("track", "hard")
    assert values["task_id"] == "line-21"  # reset to the first allowed value
    with pytest.raises(UserInputError, match="'task_id'"):
        await env.panel_change("task_id", "line-5")
    with pytest.raises(UserInputError, match="no action 'rewind'"):
        await env.panel_action("rewind")
    defaults = await env.panel_action("reset")  # every panel can return to its defaults
    assert defaults["track"] != "hard" and defaults["task_id"] != "line-21"


def test_the_doc_example_evicts_keyed_state(workspace: Path) -> None:
    env = _registry(workspace).local_instance("line_world")
    env.state.start("line-9", seed=3)
    for key in ("a", "b"):
        env.call_sync("step", {}, {}, CallContext(node_id="env", step=0, episode_key=key))
    assert set(env.state.visited) == {"a", "b"}
    asyncio.run(env.evict("a"))
    assert set(env.state.visited) == {"b"}
