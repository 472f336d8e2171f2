"""Bounded JSON summaries: node inputs/outputs for firing logs and events, and tracebacks.

:func:`summarize` keeps a value's JSON kind and cuts it with an explicit marker:

- ``int``, ``bool`` and ``None`` as they are; a float too, unless JSON cannot hold it (nan,
  inf, -inf: its name as a string); numpy scalars as their Python value (a longdouble as a
  float, a clongdouble as a complex: they have none of their own);
- a string up to MAX_STR characters as it is, a longer one its first MAX_STR followed by
  ``"…[+N chars]"``;
- a list or tuple (a list) up to MAX_ITEMS items as it is, a longer one its first MAX_ITEMS
  items followed by the marker item ``{"…": N}`` (N items cut);
- a dict up to MAX_ITEMS keys as it is (keys as strings), a longer one its first MAX_ITEMS
  keys and the marker key ``"…"`` with the number of keys cut;
- a container nested MAX_DEPTH deep is cut whole: ``[{"…": N}]``, ``{"…": N}`` (``[]``/``{}``
  when empty);
- a numpy array ``{"dtype": "uint8", "shape": [7, 7, 3], "values": [...]}`` with its first
  MAX_ARRAY_VALUES values in C order, and ``"cut": N`` when N values were left out;
- bytes ``{"bytes": N}``; anything else ``"<TypeName>"``.

One summary holds at most MAX_VALUES values (containers count): past that every container is
cut with the same markers, so a firing's log line stays bounded whatever a node returns.

:func:`format_traceback` is an exception's traceback bounded in lines and bytes.

The walk is on the episode's path (the next node needs a firing's outputs at once), so a
copy of this module compiled by mypyc (``scripts/build_native.py``, run by ``make test``
and ``make demo``: about 2.5x faster) replaces `summarize` and `Summaries` when it was built
from this very file: its SOURCE_SHA256 is this file's, else (not built, an older build, no
compiler) this module's own walk runs, with the same summaries (the tests compare them).
``AGENTCANVAS_PYTHON_SUMMARIES=1`` keeps this module's walk; `IMPLEMENTATION` says which
runs. One difference is known: a dict subclass that overrides ``__len__`` is cut by that
count here, by its entries in the copy.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

__all__ = [
    "CUT",
    "IMPLEMENTATION",
    "MAX_ARRAY_VALUES",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "MAX_STR",
    "MAX_TRACEBACK_BYTES",
    "MAX_TRACEBACK_LINES",
    "MAX_VALUES",
    "Summaries",
    "format_traceback",
    "summarize",
]

MAX_STR: Final = 120
MAX_ITEMS: Final = 16
MAX_DEPTH: Final = 6
MAX_ARRAY_VALUES: Final = 8
MAX_VALUES: Final = 256
CUT: Final = "…"
"""The key of a cut marker: ``{"…": N}`` in a list, ``"…": N`` in a dict."""

MAX_TRACEBACK_LINES: Final = 40
MAX_TRACEBACK_BYTES: Final = 8 * 1024
MAX_TRACEBACK_LINE: Final = 400

# ``str(dtype)`` runs Python code in numpy 2: every firing-log entry names the
# dtypes of its arrays, so each dtype's name is computed once.
_DTYPE_NAMES: dict[np.dtype[Any], str] = {}


def summarize(value: Any, taken: Summaries | None = None) -> Any:
    """``value`` as bounded JSON of the same kind (see the module's rules). With ``taken``,
    the values of a top-level dict (a firing's ports) that were summarised before through
    the same ``taken`` are not walked again (see `Summaries`)."""
    return _Summary(taken).of(value, 0)


class Summaries:
    """The summaries taken of a few values, by identity: what a node's outputs were
    summarised as when it fired is what its consumers' inputs (the same objects) are
    summarised as, without a second walk.

    A summary depends on the budget left when it was taken only if the walk used it up; so
    one is kept only when its walk ended with budget to spare, and reused only where at least
    that much budget is left: the summary is then exactly what a walk would give. Each value
    is held (so its identity stays its own) until `clear`: the executor clears at every
    iteration, so a value mutated in place between iterations (an env's buffer) is walked
    again, and the values an in-process node received are walked again after it ran
    (`firing`). What stays out of reach: a node that changes, in place, a value it did not
    receive as a port of its own (one nested inside another value)."""

    __slots__ = ("_taken",)

    def __init__(self) -> None:
        self._taken: dict[int, tuple[Any, Any, int]] = {}  # id -> (value, summary, cost)

    def clear(self) -> None:
        self._taken.clear()

    def firing(
        self, inputs: dict[str, Any], outputs: dict[str, Any], in_process: bool
    ) -> tuple[Any, Any]:
        """The summaries of one firing's inputs and outputs. A node that ran in this process
        holds the very objects it received and may have changed them in place: those are
        walked again (and kept as they are now, for the nodes that receive them next)."""
        if in_process:
            for value in inputs.values():
                self._taken.pop(id(value), None)
        return _Summary(self).of(inputs, 0), _Summary(self).of(outputs, 0)


def _cut_str(value: str) -> str:
    return f"{value[:MAX_STR]}…[+{len(value) - MAX_STR} chars]"


def _float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


class _Summary:
    """One summary's walk, with what is left of its MAX_VALUES."""

    __slots__ = ("left", "taken")

    def __init__(self, taken: Summaries | None = None) -> None:
        self.left = MAX_VALUES
        self.taken = taken._taken if taken is not None else None

    def of(self, value: Any, depth: int) -> Any:
        self.left -= 1
        kind = type(value)
        if kind is int or kind is bool or value is None:  # the common cases first, exact types
            return value
        if kind is float:
            return _float(value)
        if kind is str:
            return value if len(value) <= MAX_STR else _cut_str(value)
        if kind is dict:
            return self._dict(value, depth)
        if kind is list or kind is tuple:
            return self._list(value, depth)
        if kind is np.ndarray:
            return self._array(value)
        return self._other(value, depth)

    def _list(self, value: list[Any] | tuple[Any, ...], depth: int) -> list[Any]:
        if depth >= MAX_DEPTH or self.left <= 0:
            return [{CUT: len(value)}] if value else []
        out = []
        left = self.left
        for item in value[:MAX_ITEMS]:
            if left <= 0:
                break
            # Plain scalars without a call of `of`: an env's lists of objects and cells are
            # hundreds of them per episode.
            kind = type(item)
            if (
                kind is int
                or kind is bool
                or item is None
                or (kind is str and len(item) <= MAX_STR)
            ):
                left -= 1
                out.append(item)
            else:
                self.left = left
                out.append(self.of(item, depth + 1))
                left = self.left
        self.left = left
        if len(out) < len(value):
            out.append({CUT: len(value) - len(out)})
        return out

    def _dict(self, value: dict[Any, Any], depth: int) -> dict[str, Any]:
        if depth >= MAX_DEPTH or self.left <= 0:
            return {CUT: len(value)} if value else {}
        out: dict[str, Any] = {}
        left = self.left
        for key, item in value.items():
            if len(out) == MAX_ITEMS or left <= 0:
                break
            name = key if type(key) is str else str(key)
            kind = type(item)
            if (
                kind is int
                or kind is bool
                or item is None
                or (kind is str and len(item) <= MAX_STR)
            ):
                left -= 1
                out[name] = item
            elif depth == 0 and self.taken is not None:  # a port's value: summarised once
                self.left = left
                out[name] = self._port(item)
                left = self.left
            else:
                self.left = left
                out[name] = self.of(item, depth + 1)
                left = self.left
        self.left = left
        if len(out) < len(value):
            out[CUT] = len(value) - len(out)
        return out

    def _port(self, item: Any) -> Any:
        """A top-level value's summary: the one taken before when it still fits, else a new
        one, kept when its walk did not run out of budget (`Summaries`)."""
        assert self.taken is not None
        before = self.taken.get(id(item))
        if before is not None and before[0] is item and self.left > before[2]:
            self.left -= before[2]
            return before[1]
        left = self.left
        summary = self.of(item, 1)
        if self.left > 0:
            self.taken[id(item)] = (item, summary, left - self.left)
        return summary

    def _array(self, value: np.ndarray[Any, Any]) -> dict[str, Any]:
        dtype = value.dtype
        name = _DTYPE_NAMES.get(dtype)
        if name is None:
            name = _DTYPE_NAMES[dtype] = str(dtype)
        first = value.flat[:MAX_ARRAY_VALUES]  # copies only these, whatever the layout
        kind = dtype.kind
        if kind in "fc" and dtype.itemsize > (8 if kind == "f" else 16):  # (c)longdouble
            first = first.astype(float if kind == "f" else complex)
        head = first.tolist()
        if kind in "biu":  # Python bools and ints: kept as they are
            values, self.left = head, self.left - len(head)
        elif kind == "f":  # Python floats: kept, but nan and ±inf as their names (v - v: nan)
            values = [v if v - v == 0.0 else str(v) for v in head]
            self.left -= len(head)
        else:
            values = [self.of(v, MAX_DEPTH) for v in head]
        out: dict[str, Any] = {"dtype": name, "shape": list(value.shape), "values": values}
        if value.size > len(head):
            out["cut"] = value.size - len(head)
        return out

    def _other(self, value: Any, depth: int) -> Any:
        """Subclasses, numpy scalars, bytes and the rest: the general rules."""
        if isinstance(value, np.ndarray):
            return self._array(value)
        if isinstance(value, np.generic):
            self.left += 1  # the same value, once more
            return self.of(_python_value(value), depth)
        if isinstance(value, bool):
            return bool(value)
        if isinstance(value, int):  # the value itself, not what a subclass converts it to
            return int.__int__(value)
        if isinstance(value, float):
            return _float(float.__float__(value))
        if isinstance(value, str):
            text = str.__str__(value)
            return text if len(text) <= MAX_STR else _cut_str(text)
        if isinstance(value, bytes | bytearray | memoryview):
            return {"bytes": len(value)}
        if isinstance(value, dict):
            return self._dict(value, depth)
        if isinstance(value, list | tuple):
            return self._list(value, depth)
        return f"<{type(value).__name__}>"


def _python_value(value: np.generic[Any]) -> Any:
    """A numpy scalar's Python value. ``item()`` gives a longdouble or a clongdouble back as
    itself (walking it again would never end): those as a float or a complex."""
    item = value.item()
    if not isinstance(item, np.generic):
        return item
    if isinstance(item, np.floating):
        return float(item)
    if isinstance(item, np.complexfloating):
        return complex(item)
    return f"<{type(value).__name__}>"


def format_traceback(exc: BaseException) -> str:
    """``exc``'s traceback (causes included), bounded: each line at most MAX_TRACEBACK_LINE
    characters, at most MAX_TRACEBACK_LINES lines and MAX_TRACEBACK_BYTES bytes (UTF-8); the
    innermost lines are kept, after a line saying how many were cut."""
    lines = "".join(traceback.format_exception(exc)).splitlines()
    lines = [
        line
        if len(line) <= MAX_TRACEBACK_LINE
        else f"{line[:MAX_TRACEBACK_LINE]}…[+{len(line) - MAX_TRACEBACK_LINE} chars]"
        for line in lines
    ]
    kept = lines[-(MAX_TRACEBACK_LINES - 1) :]
    budget = MAX_TRACEBACK_BYTES - 64  # room for the marker line
    size = sum(len(line.encode()) + 1 for line in kept)
    while len(kept) > 1 and size > budget:
        size -= len(kept.pop(0).encode()) + 1
    cut = len(lines) - len(kept)
    if cut:
        kept.insert(0, f"… {cut} earlier line(s) cut")
    return "\n".join(kept)


# -- the compiled copy (scripts/build_native.py compiles this file down to here) ------------

COMPILED_NAME: Final = "_summarize_compiled"
"""The compiled copy's module name, beside this one (``scripts/build_native.py``)."""
python_summarize, PythonSummaries = summarize, Summaries  # this module's walk, whichever runs
IMPLEMENTATION = "python"
"""Which walk `summarize` and `Summaries` are: ``"python"`` or ``"compiled"``."""


def compiled_copy() -> Any:
    """The compiled copy of this module when it was built from this very file (its
    SOURCE_SHA256 is this file's) and may run; else None."""
    from agentcanvas import envsettings  # here, not above: the copy is this module's walk only
    from agentcanvas.errors import ConfigError

    try:
        if envsettings.PYTHON_SUMMARIES.get() == "1":
            return None
    except ConfigError:  # a bad value: the command that starts refuses it (check_all)
        pass
    try:
        digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
        module = importlib.import_module(f"{__package__}.{COMPILED_NAME}")
    except Exception:  # none built (or for another Python), a broken one, no source here
        return None
    return module if getattr(module, "SOURCE_SHA256", None) == digest else None


if not TYPE_CHECKING:  # mypy types this module's own classes
    _copy = compiled_copy()
    if _copy is not None:
        summarize, Summaries, IMPLEMENTATION = _copy.summarize, _copy.Summaries, "compiled"
