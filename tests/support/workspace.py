"""Writing files, node sets and graphs into a workspace under tmp_path."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.graph.model import Graph, parse_graph


def write_files(root: Path, files: Mapping[str, str]) -> Path:
    """Write each ``relative path: text`` under ``root``, creating folders; ``root``."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def write_nodeset(workspace: Path, name: str, source: str) -> Path:
    """A node set ``name`` in ``workspace/graph_nodes`` (the folder must not exist yet)."""
    folder = workspace / "graph_nodes" / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(source, encoding="utf-8")
    return folder


def write_graph(workspace: Path, graph: Graph) -> Path:
    """``graph`` as ``workspace/graphs/<name>.json``."""
    path = workspace / "graphs" / f"{graph.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(graph.to_json(), encoding="utf-8")
    return path


def home_workspace(
    tmp_path_factory: pytest.TempPathFactory,
    basename: str,
    nodesets: Mapping[str, str],
    graphs: Iterable[Graph] = (),
) -> Iterator[Path]:
    """For a module-scoped fixture: a fresh workspace holding ``nodesets`` (name: source) and
    ``graphs``, set as AGENTCANVAS_HOME while it is in use (so that auto_host servers find
    it)."""
    root = tmp_path_factory.mktemp(basename)
    for name, source in nodesets.items():
        write_nodeset(root, name, source)
    for graph in graphs:
        write_graph(root, graph)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AGENTCANVAS_HOME", str(root))
        yield root


def cartpole_graph(name: str, policy_type: str, config: dict[str, Any] | None = None) -> Graph:
    """CartPole (the built-in replicated ``env_gym``) driven by the node ``policy_type``
    (its ``obs`` in, its ``action`` into the next step), the env's metrics to graphOut."""
    policy: dict[str, Any] = {"id": "policy", "type": policy_type}
    if config is not None:
        policy["config"] = config
    return parse_graph(
        {
            "version": 1,
            "name": name,
            "env": {
                "nodeset": "env_gym",
                "fields": {"dataset": "classic_control", "split": "discrete"},
                "tasks": ["CartPole-v1"],
            },
            "nodes": [
                {"id": "env", "type": "env_gym.step"},
                policy,
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [
                {"source": "env.obs", "target": "policy.obs"},
                {"source": "policy.action", "target": "env.action", "next_iteration": True},
                {"source": "env.metrics", "target": "out.metrics"},
            ],
        }
    )
