"""Which task ids a graph's env accepts, and the check every run start makes against them.

One rule for every way a run starts (``eval``, ``play``, ``verify-invariance``, ``submit``
and ``POST /api/eval/v2/start``): the tasks a run will use (those asked for, else the
graph's ``env.tasks``) are tried on the env's panel before anything starts; one it refuses
stops the run up front, naming the valid ones, instead of a run whose every episode fails.

The valid tasks (:func:`valid_tasks`) are those the panel accepts after the graph's env
fields: every ``task_id`` choice over the choices of the fields it depends on (a
``dataset → split → task_id`` cascade selects any dataset's task), each tried. Every message
that lists valid tasks, and ``agentcanvas tasks GRAPH``, lists this set: the graph's own
tasks first, then the panel's order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from agentcanvas.errors import ConfigError, NodeSetError, UserInputError
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.base import NodeSet, Panel

__all__ = ["check_tasks", "graph_task_problems", "tasks_text", "valid_tasks"]

MAX_NAMED = 25  # valid task ids named in a message (`agentcanvas tasks GRAPH` lists all)


class NodeSetSource(Protocol):
    """What the checks need of a registry (WorkspaceComponentRegistry has it)."""

    def nodeset(self, name: str) -> NodeSet: ...


@contextmanager
def _env_panel(registry: NodeSetSource, graph: Graph) -> Iterator[Panel | None]:
    """A fresh panel of the graph's env (None: no env, no panel with a ``task_id`` field, or
    a node set known only by URL, whose server checks each episode); closed afterwards."""
    if graph.env is None:
        yield None
        return
    try:
        nodeset = registry.nodeset(graph.env.nodeset)
    except NodeSetError:
        yield None
        return
    if nodeset.panel_class is None or nodeset.panel_class.spec.field("task_id") is None:
        yield None
        return
    state = nodeset.state_factory() if nodeset.state_factory else None
    try:
        yield nodeset.panel_class(state)
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


def _cascade(panel: Panel) -> list[str]:
    """The fields ``task_id``'s choices depend on, the first one's first."""
    chain: list[str] = []
    field = panel.spec.field("task_id")
    while field is not None and field.depends_on and field.depends_on not in chain:
        chain.insert(0, field.depends_on)
        field = panel.spec.field(field.depends_on)
    return chain


def _offered(panel: Panel, chain: Sequence[str]) -> list[str]:
    """Every ``task_id`` choice over every choice of the fields in ``chain``."""
    if not chain:
        return [str(t) for t in panel.choices("task_id") or []]
    offered: list[str] = []
    for value in panel.choices(chain[0]) or [panel.values.get(chain[0])]:
        saved = dict(panel.values)
        try:
            panel.on_field_change(chain[0], value)
            offered += [t for t in _offered(panel, chain[1:]) if t not in offered]
        except UserInputError:
            pass
        panel.values = saved
    return offered


def valid_tasks(registry: NodeSetSource, graph: Graph) -> list[str] | None:
    """The task ids the graph's env accepts (its own first); None when any id is taken
    (no env, a free-text ``task_id``, an env known only by URL)."""
    with _env_panel(registry, graph) as panel:
        if panel is None or graph.env is None:
            return None
        if not _cascade(panel) and panel.choices("task_id") is None:
            return None  # a free-text task id
        try:
            _with_graph_fields(panel, graph)
            offered = _offered(panel, _cascade(panel))
        except UserInputError:
            offered = []
        candidates = [*graph.env.tasks, *(t for t in offered if t not in graph.env.tasks)]
        return [task for task in candidates if _accepts(panel, graph, task)]


def tasks_text(valid: Sequence[str], graph: Graph) -> str:
    """``valid`` for a message: at most MAX_NAMED, then where to see the rest."""
    shown = ", ".join(valid[:MAX_NAMED]) or "none"
    if len(valid) > MAX_NAMED:
        shown += f", … ({len(valid)} in all: `agentcanvas tasks {graph.name}`)"
    return shown


def check_tasks(
    registry: NodeSetSource, graph: Graph, tasks: Sequence[str] | None, *, field: str = "tasks"
) -> None:
    """Raise ConfigError naming ``field`` and the valid task ids when the env refuses one of
    ``tasks`` — or, when ``tasks`` is None, the graph's own (``env.tasks``, which a run
    without tasks uses: :func:`graph_task_problems`). A graph without env takes any task id
    (a label)."""
    if graph.env is None:
        return
    valid = valid_tasks(registry, graph)
    if valid is None:
        return
    if not tasks:
        problems = _graph_problems(graph, valid)
        if problems:
            raise ConfigError("; ".join(problems))
        return
    unknown = [task for task in tasks if task not in valid]
    if unknown:
        names = ", ".join(repr(t) for t in unknown)
        raise ConfigError(
            f"{field}: unknown task {names} for env '{graph.env.nodeset}' "
            f"(valid: {tasks_text(valid, graph)})"
        )


def graph_task_problems(registry: NodeSetSource, graph: Graph) -> list[str]:
    """Why the graph's own tasks cannot run, each naming the field and the fix (``validate``):
    tasks its env does not have, no task at all, an env that offers none."""
    valid = valid_tasks(registry, graph)
    return [] if valid is None else _graph_problems(graph, valid)


def _graph_problems(graph: Graph, valid: Sequence[str]) -> list[str]:
    assert graph.env is not None
    env, fix = graph.env.nodeset, f"see `agentcanvas tasks {graph.name}`"
    if not valid:
        return [
            f"env.nodeset '{env}': its panel offers no task with the graph's env.fields, so "
            "no episode could start (give the panel's task_id choices, or change env.fields)"
        ]
    if not graph.env.tasks and "task_id" not in graph.env.fields:
        return [
            "env.tasks is empty and env.fields sets no task_id: a run would have no task "
            f'(set env.tasks, e.g. ["{valid[0]}"]; {fix})'
        ]
    return [
        f"env.tasks: env '{env}' has no task {task!r} (valid: {tasks_text(valid, graph)}); "
        f"remove it or pick a valid one ({fix})"
        for task in graph.default_tasks()
        if task not in valid
    ]
