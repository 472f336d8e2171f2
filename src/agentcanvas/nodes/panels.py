"""TaskPanel: the ``dataset → split → task_id`` cascade of an environment's panel.

An env node set that offers tasks grouped into datasets and splits subclasses
:class:`TaskPanel`, sets ``tasks`` (``{dataset: {split: [task_id, ...]}}``), and puts
:func:`task_fields` first in its ``PanelSpec``. The panel then offers each field's choices
given the fields above it, and a ``task_id`` set on its own (as a batch run does) selects its
dataset and split; an unknown one is a UserInputError naming the known tasks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agentcanvas.errors import UserInputError
from agentcanvas.nodes.base import Panel
from agentcanvas.nodes.manifest import FieldSpec

__all__ = ["TaskPanel", "Tasks", "find_task", "task_fields"]

Tasks = Mapping[str, Mapping[str, Sequence[str]]]
"""``{dataset: {split: [task_id, ...]}}``."""


def find_task(tasks: Tasks, task_id: str, noun: str = "task") -> tuple[str, str]:
    """The (dataset, split) holding ``task_id``; UserInputError naming the known ones."""
    for dataset, splits in tasks.items():
        for split, ids in splits.items():
            if task_id in ids:
                return dataset, split
    known = [t for splits in tasks.values() for ids in splits.values() for t in ids]
    raise UserInputError(f"panel field 'task_id': unknown {noun} {task_id!r} (known: {known})")


def task_fields(tasks: Tasks, default_task: str) -> list[FieldSpec]:
    """The cascade's three fields, defaulting to ``default_task`` and its dataset and split."""
    dataset, split = find_task(tasks, default_task)
    return [
        FieldSpec(name="dataset", kind="choice", default=dataset, choices=sorted(tasks)),
        FieldSpec(name="split", kind="choice", default=split, depends_on="dataset"),
        FieldSpec(name="task_id", kind="choice", default=default_task, depends_on="split"),
    ]


class TaskPanel(Panel):
    """A panel whose first fields are the ``dataset → split → task_id`` cascade."""

    tasks: ClassVar[Tasks] = {}
    task_noun: ClassVar[str] = "task"
    """How an unknown ``task_id`` is named in the error (e.g. ``level``)."""

    def choices(self, name: str) -> list[Any] | None:
        dataset = self.tasks.get(str(self.values.get("dataset")), {})
        if name == "split":
            return sorted(dataset)
        if name == "task_id":
            return list(dataset.get(str(self.values.get("split")), []))
        return super().choices(name)

    def on_field_change(self, name: str, value: Any) -> dict[str, Any]:
        if name == "task_id" and value not in (self.choices("task_id") or []):
            # a task id alone selects its dataset and split
            dataset, split = find_task(self.tasks, str(value), self.task_noun)
            self.values.update(dataset=dataset, split=split, task_id=value)
            return dict(self.values)
        return super().on_field_change(name, value)
