"""A run's name, tags and note: what tells runs apart, kept in the run folder's ``meta.json``.

They are set at submit (CLI ``--name/--tag/--note``, the REST start body, the web form) and
edited later (``PATCH /api/eval/v2/runs/{run_id}/meta``). The file is separate from
``spec.json`` and ``summary.json`` and written atomically, so editing never rewrites the
run's input contract nor races the runner's summary writes; a run without it has no name,
no tags and no note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentcanvas.errors import ConfigError, RunError
from agentcanvas.fileio import atomic_write_json, read_json

__all__ = [
    "MAX_TAGS",
    "META_FILE",
    "TAG_PATTERN",
    "MetaPatch",
    "RunMeta",
    "RunName",
    "RunNote",
    "RunTags",
    "meta_from_flags",
    "read_meta",
    "update_meta",
    "write_meta",
]

META_FILE: Final = "meta.json"
MAX_TAGS: Final = 32
TAG_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.:+=-]{0,39}$"
_NAME_PATTERN: Final = r"^[^\x00-\x1f\x7f]+$"  # one line, no control characters
_NOTE_PATTERN: Final = r"^[^\x00-\x08\x0b-\x1f\x7f]*$"  # newlines and tabs allowed

Tag = Annotated[str, Field(pattern=TAG_PATTERN, description="e.g. baseline, lr=3e-4")]
RunName = Annotated[str, Field(min_length=1, max_length=120, pattern=_NAME_PATTERN)]
RunNote = Annotated[str, Field(max_length=4000, pattern=_NOTE_PATTERN)]
RunTags = Annotated[list[Tag], Field(max_length=MAX_TAGS, json_schema_extra={"uniqueItems": True})]


class RunMeta(BaseModel):
    """What a person says about a run; every field optional."""

    model_config = ConfigDict(
        strict=True, extra="forbid", frozen=True, use_attribute_docstrings=True
    )

    name: RunName | None = None
    """A short human name shown instead of the timestamp id."""
    tags: RunTags = Field(default_factory=list)
    """Labels to filter the runs list by (letters, digits, ``_.:+=-``; 40 characters)."""
    note: RunNote | None = None
    """Free text: why the run was made, what changed."""


class MetaPatch(BaseModel):
    """A partial edit: the fields given replace the stored ones; ``null`` clears a field."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    name: RunName | None = None
    tags: RunTags | None = None
    note: RunNote | None = None


def _path(run_root: Path) -> Path:
    return run_root / META_FILE


def read_meta(run_root: Path) -> RunMeta:
    """The run's meta; an empty one when the file is missing or unreadable."""
    path = _path(run_root)
    if not path.exists():
        return RunMeta()
    try:
        return RunMeta.model_validate(read_json(path))
    except (ValueError, RunError):  # a damaged meta.json hides nothing else of the run
        return RunMeta()


def write_meta(run_root: Path, meta: RunMeta) -> None:
    """Write ``meta.json`` atomically (tags deduplicated, order kept)."""
    tags = list(dict.fromkeys(meta.tags))
    atomic_write_json(_path(run_root), meta.model_copy(update={"tags": tags}).model_dump())


def update_meta(run_root: Path, patch: MetaPatch) -> RunMeta:
    """Apply ``patch`` to the stored meta, write it, and return the result."""
    current = read_meta(run_root).model_dump()
    for field in patch.model_fields_set:
        value = getattr(patch, field)
        current[field] = [] if field == "tags" and value is None else value
    meta = RunMeta.model_validate(current)
    write_meta(run_root, meta)
    return read_meta(run_root)


def meta_from_flags(name: str | None, tags: list[str] | None, note: str | None) -> RunMeta:
    """RunMeta from the CLI's ``--name/--tag/--note``; ConfigError naming the flag."""
    flags = {"name": "--name", "tags": "--tag", "note": "--note"}
    try:
        return RunMeta(name=name, tags=list(dict.fromkeys(tags or [])), note=note)
    except ValidationError as exc:
        item = exc.errors()[0]
        flag = flags.get(str(item["loc"][0]), str(item["loc"][0]))
        raise ConfigError(f"{flag} {item['input']!r}: {item['msg']}") from exc
