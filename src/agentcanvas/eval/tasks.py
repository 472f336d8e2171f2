"""Which task ids a run may ask for: checked against the graph's env panel before it starts.

One check for every way a run starts (``eval``, ``play``, ``verify-invariance``, ``submit``
and ``POST /api/eval/v2/start``): a task the env cannot start is refused up front, naming the
valid ones, instead of a run whose every episode fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agentcanvas.errors import ConfigError, NodeSetError, UserInputError
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.base import NodeSet, Panel

__all__ = ["check_tasks"]

MAX_NAMED = 25  # valid task ids named in the message


class NodeSetSource(Protocol):
    """What check_tasks needs of a registry (WorkspaceComponentRegistry has it)."""

    def nodeset(self, name: str) -> NodeSet: ...


def check_tasks(
    registry: NodeSetSource, graph: Graph, tasks: Sequence[str] | None, *, field: str = "tasks"
) -> None:
    """Raise ConfigError naming ``field`` and the valid task ids when the graph's env panel
    refuses one of ``tasks``. A graph without env takes any task id (a label)."""
    if not tasks or graph.env is None:
        return
    try:
        nodeset = registry.nodeset(graph.env.nodeset)
    except NodeSetError:  # known only by URL: its server checks each episode
        return
    if nodeset.panel_class is None or nodeset.panel_class.spec.field("task_id") is None:
        return
    state = nodeset.state_factory() if nodeset.state_factory else None
    try:
        panel = nodeset.panel_class(state)
        unknown = [task for task in tasks if not _accepts(panel, graph, task)]
        if unknown:
            valid = _valid_tasks(panel, graph)
            shown = ", ".join(valid[:MAX_NAMED]) + (" …" if len(valid) > MAX_NAMED else "")
            names = ", ".join(repr(t) for t in unknown)
            raise ConfigError(
                f"{field}: unknown task {names} for env '{graph.env.nodeset}' "
                f"(valid: {shown or 'none listed'})"
            )
    finally:
        closer = getattr(state, "close", None)
        if callable(closer):
            closer()


def _with_graph_fields(panel: Panel, graph: Graph) -> None:
    """The panel as an episode of ``graph`` starts: reset, then the graph's env fields."""
    assert graph.env is not None
    panel.on_action("reset")
    for name, value in graph.env.fields.items():
        if name != "task_id":
            panel.on_field_change(name, value)


def _accepts(panel: Panel, graph: Graph, task: str) -> bool:
    try:
        _with_graph_fields(panel, graph)
        panel.on_field_change("task_id", task)
    except UserInputError:
        return False
    return True


def _valid_tasks(panel: Panel, graph: Graph) -> list[str]:
    """The graph's own tasks, then the task ids the panel offers with the graph's fields."""
    assert graph.env is not None
    valid = list(graph.env.tasks)
    try:
        _with_graph_fields(panel, graph)
        offered = panel.choices("task_id") or []
    except UserInputError:
        offered = []
    valid += [str(t) for t in offered if str(t) not in valid]
    return valid
