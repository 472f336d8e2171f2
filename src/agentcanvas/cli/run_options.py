"""The run options of ``eval``, ``submit``, ``verify-invariance``, ``demo`` and ``play``,
derived from :class:`~agentcanvas.eval.config.EvalConfig`'s fields, so they cannot drift.

Each field is a flag: its name (``per_step_timeout_s`` → ``--per-step-timeout``: dashes, no
``_s``), its type (``int``, a finite number, text, ``on``/``--no-`` for a bool, a
comma-separated list for a list of text, one of a Literal's values, else JSON), its help
(the field's description, field names in it written as flags), its range and its default. A
new field gets a flag without code. What is written by hand is small and explicit:

- :data:`ALIASES`: today's names kept beside the derived ones (``-n``/``--episodes``,
  ``-w``/``--workers``);
- :data:`PARSERS`: a field whose text form is its own (``--max-errors N|FRACTION``);
- :data:`NOT_FLAGS`: fields that are no option, and why.

Flags left out default to None, so a config is built from the flags given only: the
defaults stay EvalConfig's (and the backend's, for ``submit``).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import types
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from agentcanvas.errors import ConfigError
from agentcanvas.eval.config import EvalConfig

__all__ = [
    "ALIASES",
    "METAVARS",
    "NOT_FLAGS",
    "PARSERS",
    "RunFlag",
    "add_run_options",
    "build_config",
    "given_options",
    "parse_max_errors",
    "run_flags",
]

Parse = Callable[[str], Any]


def parse_max_errors(text: str) -> int | float:
    """``--max-errors``: a whole number is a count, a decimal a fraction."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError as exc:
        raise ConfigError(
            f"--max-errors: expected a count (e.g. 3) or a fraction (e.g. 0.2), got {text!r}"
        ) from exc


ALIASES: Final[Mapping[str, tuple[str, ...]]] = {
    "episode_count": ("-n", "--episodes"),
    "worker_count": ("-w", "--workers"),
}
"""Field → the names it had before its flag was derived (shown first, kept working)."""

PARSERS: Final[Mapping[str, tuple[Parse, str]]] = {
    "max_errors": (parse_max_errors, "N|FRACTION"),
}
"""Field → (text parser, metavar) where the derived one would not do."""

METAVARS: Final[Mapping[str, str]] = {"until_decided_vs": "RUN", "until_halfwidth": "H"}
"""Field → a metavar that says more than the derived one."""

NOT_FLAGS: Final[Mapping[str, str]] = {
    "version": "the config's format version: fixed, not a choice",
    "graph_name": "the GRAPH argument of every run command",
    # Fields the retry work adds: the episodes to run again are picked from a run's records
    # by `agentcanvas retry RUN`, not typed by hand.
    "episodes": "set by `agentcanvas retry RUN` from the run's records",
    "retry_of": "set by `agentcanvas retry RUN`",
}
"""Fields that are no option, and why (a name that is no field yet is allowed)."""


@dataclass(frozen=True)
class RunFlag:
    """One field of EvalConfig as an option: its names and how argparse reads it."""

    field: str
    names: tuple[str, ...]
    help: str
    parse: Parse | None = None
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    switch: bool = False  # a bool: --flag / --no-flag

    def add_to(self, parser: argparse._ActionsContainer) -> None:
        if self.switch:
            parser.add_argument(
                *self.names,
                dest=self.field,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=self.help,
            )
            return
        parser.add_argument(
            *self.names,
            dest=self.field,
            type=self.parse or str,
            metavar=self.metavar,
            choices=self.choices,
            default=None,
            help=self.help,
        )


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


_number.__name__ = "finite number"


def _comma_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",")]


_comma_list.__name__ = "comma-separated list"


def _json_value(text: str) -> Any:
    return json.loads(text)


_json_value.__name__ = "JSON"


def flag_name(field: str) -> str:
    """``per_step_timeout_s`` → ``--per-step-timeout``: a unit suffix is the help's job."""
    return "--" + field.removesuffix("_s").replace("_", "-")


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else Union[tuple(rest)]  # noqa: UP007
    return annotation


def _reader(field: str, info: FieldInfo) -> tuple[Parse | None, str | None, tuple[Any, ...] | None]:
    """(parser, metavar, choices) of a non-bool field, from its type."""
    if field in PARSERS:
        parse, metavar = PARSERS[field]
        return parse, metavar, None
    kind = _without_none(info.annotation)
    if get_origin(kind) is Literal:
        values = get_args(kind)
        return type(values[0]), None, values
    if kind is int:
        return int, "N", None
    if kind is float:
        return _number, "SECONDS" if field.endswith("_s") else "X", None
    if kind is str:
        return str, field.split("_")[-1].upper(), None
    if get_origin(kind) is list and get_args(kind) == (str,):
        return _comma_list, "A,B", None
    return _json_value, "JSON", None


def _range(info: FieldInfo) -> str:
    bounds = []
    for item in info.metadata:
        if isinstance(item, annotated_types.Ge):
            bounds.append(f">= {item.ge}")
        elif isinstance(item, annotated_types.Gt):
            bounds.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Le):
            bounds.append(f"<= {item.le}")
        elif isinstance(item, annotated_types.Lt):
            bounds.append(f"< {item.lt}")
    return f" Range: {', '.join(bounds)}." if bounds else ""


def _default(info: FieldInfo, description: str) -> str:
    if isinstance(info.default, bool):
        return f" (default: {'on' if info.default else 'off'})"
    if info.default is None:
        return "" if "default" in description.lower() else " (default: none)"
    return f" (default: {info.default})"


def _help(info: FieldInfo, names: Mapping[str, str]) -> str:
    """The field's description, its field names written as flags, its range and default."""
    text = (info.description or "").strip()
    for field, flag in names.items():
        if "_" in field:  # plain words ("tasks", "seed") stay words
            text = re.sub(rf"\b{field}\b", flag, text)
    text = text + _range(info) + _default(info, text)
    return text.replace("%", "%%")


def run_flags(exclude: Collection[str] = ()) -> list[RunFlag]:
    """Every field of EvalConfig as a flag (but those of NOT_FLAGS and ``exclude``)."""
    fields = {n: i for n, i in EvalConfig.model_fields.items() if n not in NOT_FLAGS}
    names = {field: flag_name(field) for field in fields}
    flags = []
    for field, info in fields.items():
        if field in exclude:
            continue
        help_text = _help(info, names)
        option_strings = (*ALIASES.get(field, ()), names[field])
        if _without_none(info.annotation) is bool:
            flags.append(RunFlag(field, option_strings, help_text, switch=True))
            continue
        parse, metavar, choices = _reader(field, info)
        metavar = METAVARS.get(field, metavar)
        flags.append(RunFlag(field, option_strings, help_text, parse, metavar, choices))
    return flags


def add_run_options(
    parser: argparse.ArgumentParser,
    exclude: Collection[str] = (),
    only: Collection[str] | None = None,
) -> None:
    """Add the run options (``only`` those fields, when given) as one group of ``parser``."""
    group = parser.add_argument_group(
        "run options (the run config: each is also a field of POST /api/eval/v2/start)"
    )
    for flag in run_flags(exclude):
        if only is None or flag.field in only:
            flag.add_to(group)


def given_options(args: argparse.Namespace) -> dict[str, Any]:
    """The run options given on the command line, by field name."""
    return {
        field: getattr(args, field)
        for field in EvalConfig.model_fields
        if getattr(args, field, None) is not None
    }


def _flags_of(field: str) -> str:
    if field in NOT_FLAGS or field not in EvalConfig.model_fields:
        return field
    return "/".join((*ALIASES.get(field, ()), flag_name(field)))


def build_config(args: argparse.Namespace, graph_name: str, **fixed: Any) -> EvalConfig:
    """EvalConfig of the run options given (and ``fixed``); a bad value is a ConfigError
    naming the field and its flag."""
    try:
        return EvalConfig(graph_name=graph_name, **{**given_options(args), **fixed})
    except ValidationError as exc:
        item = exc.errors()[0]
        field = str(item["loc"][0]) if item["loc"] else ""
        where = ".".join(map(str, item["loc"]))
        got = f", got {item['input']!r}" if "input" in item and field in args_fields() else ""
        raise ConfigError(f"field '{where}' ({_flags_of(field)}): {item['msg']}{got}") from exc


def args_fields() -> set[str]:
    """The fields whose value came from one flag (their input is worth echoing)."""
    return set(EvalConfig.model_fields) - set(NOT_FLAGS)
