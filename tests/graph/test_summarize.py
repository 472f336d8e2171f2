"""summarize: the firing log's bounded JSON values, against the plain rules it follows; and
format_traceback, bounded in lines and bytes."""

from __future__ import annotations

import enum
import hashlib
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
from collections import OrderedDict
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from agentcanvas import envsettings
from agentcanvas.graph import summarize as summarize_module
from agentcanvas.graph.summarize import (
    CUT,
    MAX_ARRAY_VALUES,
    MAX_DEPTH,
    MAX_ITEMS,
    MAX_STR,
    MAX_TRACEBACK_BYTES,
    MAX_TRACEBACK_LINES,
    MAX_VALUES,
    Summaries,
    format_traceback,
    summarize,
)


class Reference:
    """The module's rules written plainly: isinstance in order, one call per value, and
    what is left of MAX_VALUES counted down as values are visited (containers too)."""

    def __init__(self) -> None:
        self.left = MAX_VALUES

    def of(self, value: Any, depth: int = 0) -> Any:
        if isinstance(value, np.longdouble | np.clongdouble):  # item() gives them back
            return self.of(
                float(value) if isinstance(value, np.longdouble) else complex(value), depth
            )
        if isinstance(value, np.generic):
            return self.of(value.item(), depth)
        self.left -= 1
        if isinstance(value, np.ndarray):
            head = value.reshape(-1)[:MAX_ARRAY_VALUES].tolist()
            out = {
                "dtype": str(value.dtype),
                "shape": list(value.shape),
                "values": [self.of(v, MAX_DEPTH) for v in head],
            }
            if value.size > len(head):
                out["cut"] = value.size - len(head)
            return out
        if isinstance(value, bool) or value is None:
            return value if value is None else bool(value)
        if isinstance(value, int):
            return int.__int__(value)
        if isinstance(value, float):
            number = float.__float__(value)
            return number if math.isfinite(number) else str(number)
        if isinstance(value, str):
            text = str.__str__(value)
            cut = len(text) - MAX_STR
            return text if cut <= 0 else f"{text[:MAX_STR]}…[+{cut} chars]"
        if isinstance(value, bytes | bytearray | memoryview):
            return {"bytes": len(value)}
        if isinstance(value, dict):
            return self._dict(value, depth)
        if isinstance(value, list | tuple):
            return self._list(list(value), depth)
        return f"<{type(value).__name__}>"

    def _dict(self, value: dict[Any, Any], depth: int) -> dict[str, Any]:
        if depth >= MAX_DEPTH or self.left <= 0:
            return {CUT: len(value)} if value else {}
        out: dict[str, Any] = {}
        for key, item in value.items():
            if len(out) == MAX_ITEMS or self.left <= 0:
                break
            out[str(key)] = self.of(item, depth + 1)
        if len(out) < len(value):
            out[CUT] = len(value) - len(out)
        return out

    def _list(self, value: list[Any], depth: int) -> list[Any]:
        if depth >= MAX_DEPTH or self.left <= 0:
            return [{CUT: len(value)}] if value else []
        out = []
        for item in value:
            if len(out) == MAX_ITEMS or self.left <= 0:
                break
            out.append(self.of(item, depth + 1))
        if len(out) < len(value):
            out.append({CUT: len(value) - len(out)})
        return out


class Colour(enum.IntEnum):
    RED = 1


def nested(depth: int) -> Any:
    return [1] if depth == 0 else {"d": nested(depth - 1), "l": [nested(depth - 1)]}


VALUES: list[Any] = [
    0,
    True,
    None,
    1.5,
    float("nan"),
    -float("inf"),
    "short",
    "x" * (MAX_STR + 5),
    b"\x00\x01",
    bytearray(3),
    np.zeros((7, 7, 3), np.uint8),
    np.arange(5, dtype=np.float32) / 3,
    np.arange(24).reshape(4, 6).T,  # not contiguous: only its first values are copied
    np.array(7),
    np.array([np.nan, 1.0]),
    np.array(["a", "b"]),
    np.array([np.inf, -np.inf, -0.0, 6e4, np.nan], dtype=np.float16),
    np.array([[True, False], [False, True]]),
    np.array([1 + 2j, 3j]),
    np.array([None, 1.5, "x"], dtype=object),
    [np.full(12, np.nan), np.arange(30, dtype=np.int8)] * 20,  # arrays use up the budget
    np.float32(2.5),
    np.longdouble(1.5),
    np.clongdouble(1 + 2j),
    np.array([1.5, np.nan, -np.inf], dtype=np.longdouble),
    np.zeros(3, dtype=np.clongdouble),
    np.int64(3),
    np.bool_(True),
    Colour.RED,
    (1, 2, [3]),
    {"objects": [{"desc": "red ball", "pos": [1, 2], "w": 0.5} for _ in range(20)]},
    {1: "int key", "1b": "str key", None: np.arange(3)},
    nested(MAX_DEPTH + 2),
    [float("nan"), "y" * 200, None, np.bool_(True), {"k": (1,)}] * 5,
    {f"k{i}": i for i in range(40)},
    {f"k{i}": [{"x": list(range(100))} for _ in range(100)] for i in range(100)},
    [[[], {}]] * 3,
    object(),
    {1, 2},
]


@pytest.mark.parametrize(
    "value", VALUES, ids=[f"{i}:{type(v).__name__}" for i, v in enumerate(VALUES)]
)
def test_summaries_follow_the_rules(value: Any) -> None:
    assert repr(summarize(value)) == repr(Reference().of(value))


def test_summaries_taken_once_equal_summaries_taken_afresh() -> None:
    """Firings that pass the same objects on (a node's outputs, then its consumers' inputs,
    in every order and with budgets that run out part of the way): with `Summaries` each
    summary is what a fresh walk gives, and the big ones are reused where they fit."""
    rng = np.random.default_rng(3)
    values = [v for v in VALUES if isinstance(v, list | dict | tuple | np.ndarray)]
    reused = 0
    for _ in range(300):
        pool = [values[i] for i in rng.choice(len(values), size=6)]
        taken = Summaries()
        for _ in range(5):  # the firings of one iteration
            ports = {f"p{j}": pool[int(k)] for j, k in enumerate(rng.choice(6, size=4))}
            if rng.random() < 0.3:  # a filler that uses up much of the budget first
                ports = {"filler": list(range(int(rng.integers(0, 16)))) * 1, **ports}
            before = len(taken._taken)
            assert repr(summarize(ports, taken)) == repr(summarize(ports))
            reused += len(taken._taken) == before
        taken.clear()
        assert taken._taken == {}
    assert reused > 100  # the reuse itself was exercised


def test_a_summary_is_not_reused_where_the_budget_left_is_smaller() -> None:
    """A value whose walk cost more than what is left of the budget is walked again (and cut
    as a walk would cut it), never given its earlier, uncut summary."""
    big = [list(range(MAX_ITEMS)) for _ in range(MAX_ITEMS)]  # 1 + 16 * 17 = 273 > budget
    taken = Summaries()
    small = {"x": big[0]}
    assert summarize(small, taken) == summarize(small)
    crowded = {"a": [list(range(MAX_ITEMS))] * 14, "x": big[0]}  # `a` leaves too little
    assert repr(summarize(crowded, taken)) == repr(summarize(crowded))
    assert summarize(crowded)["x"] != summarize(small)["x"]  # it is cut there
    assert summarize({"b": big}, taken) == summarize({"b": big})  # ran out: never kept
    assert id(big) not in taken._taken


def test_a_value_an_in_process_node_changed_in_place_is_walked_again() -> None:
    """P's output goes to C (in process), which appends to it and returns it, then to D: C's
    inputs and outputs and D's inputs show the list as it is after C ran, as fresh walks do,
    not P's summary of it."""
    history = [1, 2]
    image = np.zeros(4, np.uint8)
    taken = Summaries()
    assert taken.firing({}, {"h": history, "img": image}, in_process=False)[1] == {
        "h": [1, 2],
        "img": summarize(image),
    }
    history.append(3)  # C ran: it changed what it received
    image += 7
    c_in, c_out = taken.firing({"h": history, "img": image}, {"h": history}, in_process=True)
    assert c_in == summarize({"h": history, "img": image}) and c_in["h"] == [1, 2, 3]
    assert c_out == {"h": [1, 2, 3]}
    d_in, _ = taken.firing({"h": history}, {}, in_process=False)
    assert d_in == {"h": [1, 2, 3]}


def test_short_values_are_kept_as_they_are() -> None:
    value = {"action": 2, "done": False, "obs": [0.25, -1.0, 3], "task": "go to the red ball"}
    assert summarize(value) == value
    assert summarize([value, None, "a"]) == [value, None, "a"]


def test_long_values_are_cut_as_the_same_kind_with_what_was_cut() -> None:
    assert summarize(list(range(40))) == [*range(MAX_ITEMS), {CUT: 40 - MAX_ITEMS}]
    cut_dict = summarize({f"k{i}": i for i in range(20)})
    assert cut_dict == {**{f"k{i}": i for i in range(MAX_ITEMS)}, CUT: 20 - MAX_ITEMS}
    assert summarize("z" * (MAX_STR + 9)) == "z" * MAX_STR + "…[+9 chars]"
    deep = summarize(nested(MAX_DEPTH + 2))
    for _ in range(MAX_DEPTH):
        deep = deep["d"]
    assert deep == {CUT: 2}  # a dict too deep is still a dict, saying how many keys it had


def test_arrays_keep_their_dtype_shape_and_first_values() -> None:
    image = np.arange(7 * 7 * 3, dtype=np.uint8).reshape(7, 7, 3)
    assert summarize(image) == {
        "dtype": "uint8",
        "shape": [7, 7, 3],
        "values": list(range(MAX_ARRAY_VALUES)),
        "cut": 7 * 7 * 3 - MAX_ARRAY_VALUES,
    }
    action = np.array([0.5, -0.25], dtype=np.float32)
    assert summarize(action) == {"dtype": "float32", "shape": [2], "values": [0.5, -0.25]}


HUGE: list[Any] = [
    {f"k{i}": [{"x": list(range(100)), "s": "w" * 10_000} for _ in range(100)] for i in range(100)},
    [[["v" * 5000] * 100] * 100] * 100,
    {f"k{i}": np.zeros((512, 512, 3), np.uint8) for i in range(1000)},
    nested(12),
]


@pytest.mark.parametrize("value", HUGE, ids=range(len(HUGE)))
def test_a_summary_is_bounded_strict_json_whatever_the_value(value: Any) -> None:
    text = json.dumps(summarize(value), allow_nan=False)
    # At most MAX_VALUES values, each a cut string or a short marker at worst.
    assert len(text) <= MAX_VALUES * (MAX_STR + 64)


def test_a_traceback_is_bounded_and_keeps_the_innermost_lines() -> None:
    def recurse(n: int) -> None:  # two frames in turn: Python folds only repeated ones
        if n == 0:
            raise ValueError("at the bottom " + "m" * 5000)
        other(n - 1)

    def other(n: int) -> None:
        recurse(n)

    try:
        try:
            recurse(200)
        except ValueError as exc:
            raise RuntimeError("while recursing") from exc
    except RuntimeError as exc:
        text = format_traceback(exc)
    lines = text.splitlines()
    assert len(lines) <= MAX_TRACEBACK_LINES
    assert len(text.encode()) <= MAX_TRACEBACK_BYTES
    assert lines[0].startswith("… ") and "earlier line(s) cut" in lines[0]
    assert lines[-1] == "RuntimeError: while recursing"


def test_a_short_traceback_is_whole() -> None:
    try:
        raise KeyError("missing")
    except KeyError as exc:
        text = format_traceback(exc)
    assert text.splitlines()[0] == "Traceback (most recent call last):"
    assert text.splitlines()[-1] == "KeyError: 'missing'"


# -- the compiled copy (scripts/build_native.py) ----------------------------------------------

COMPILED = summarize_module.IMPLEMENTATION == "compiled"
needs_compiled = pytest.mark.skipif(not COMPILED, reason="the compiled copy is not built")


class Text(str):
    pass


class Ratio(float):
    def __float__(self) -> float:
        return 42.0  # not what a summary shows: the value itself


class Count(int):
    def __int__(self) -> int:
        return 5


class Pair(NamedTuple):
    first: Any
    second: Any


def random_value(rng: np.random.Generator, left: list[int], depth: int = 0) -> Any:
    """A value of any kind summarize tells apart, nested up to 8 deep, of at most about
    ``left[0]`` values in all (counted down)."""
    left[0] -= 1
    kind = int(rng.integers(0, 28 if depth < 8 and left[0] > 0 else 19))
    n = int(rng.choice([0, 1, 2, 5, 15, 16, 17, 40]))
    scalars: list[Any] = [
        int(rng.integers(-5, 5)),
        bool(rng.integers(0, 2)),
        None,
        float(rng.choice([0.5, -0.0, np.nan, np.inf, -np.inf, 1e300])),
        "é" * int(rng.choice([0, 3, MAX_STR, MAX_STR + 1, 400])),
        2**70,
        np.float32(rng.random()),
        np.int16(-3),
        np.bool_(False),
        Colour.RED,
        Text("sub"),
        bytes(n),
        object(),
        Ratio(float(rng.choice([0.25, np.nan]))),
        Count(7),
        memoryview(bytearray(n)),
        np.str_("np text"),
        np.longdouble(rng.choice([0.1, np.inf])),
        np.clongdouble(2j),
    ]
    if kind < len(scalars):
        return scalars[kind]
    if kind == 19:
        return [random_value(rng, left, depth + 1) for _ in range(n)]
    if kind == 20:
        return tuple(random_value(rng, left, depth + 1) for _ in range(n))
    if kind in (21, 22):
        keys: list[Any] = [f"k{i}" for i in range(n)] + [3, None, (1, 2), 2.5, True]
        items = {keys[i]: random_value(rng, left, depth + 1) for i in range(min(n, len(keys)))}
        return items if kind == 21 else OrderedDict(items)
    if kind == 23:
        return Pair(random_value(rng, left, depth + 1), random_value(rng, left, depth + 1))
    if kind == 24:
        shape = tuple(int(k) for k in rng.integers(0, 6, size=int(rng.integers(0, 4))))
        dtype = rng.choice(["uint8", "float32", "float16", "bool", "int64", "complex64", "g", "G"])
        return (rng.standard_normal(shape) * 100).astype(dtype)
    if kind == 25:
        return np.array([np.nan, -np.inf, 2.5])[:: int(rng.choice([1, -1]))]
    if kind == 26:
        return np.array(["a", None, {1, 2}, np.arange(3)], dtype=object)
    return [[random_value(rng, left, depth + 2) for _ in range(3)] for _ in range(n)]


@needs_compiled
def test_the_compiled_walk_gives_the_python_walks_summaries() -> None:
    """The compiled copy and the module's Python walk, on the rules' values and thousands of
    random ones (2,000), alone and through `Summaries` (values passed on, changed in place between
    firings): the same summaries, down to the types (repr: 1, 1.0 and True differ)."""
    python, python_taken = summarize_module.python_summarize, summarize_module.PythonSummaries
    assert summarize is not python and Summaries is not python_taken
    rng = np.random.default_rng(11)
    values = VALUES + HUGE + [random_value(rng, [int(rng.integers(1, 400))]) for _ in range(2000)]
    for value in values:
        assert repr(summarize(value)) == repr(python(value))
    for _ in range(150):
        pool = [values[int(i)] for i in rng.choice(len(values), size=8)]
        compiled_taken, walked = Summaries(), python_taken()
        for _ in range(6):
            inputs = {f"i{j}": pool[int(k)] for j, k in enumerate(rng.choice(8, size=3))}
            outputs = {f"o{j}": pool[int(k)] for j, k in enumerate(rng.choice(8, size=3))}
            in_process = bool(rng.integers(0, 2))
            expected = walked.firing(inputs, outputs, in_process)
            assert repr(compiled_taken.firing(inputs, outputs, in_process)) == repr(expected)
            if in_process and isinstance(pool[0], list):
                pool[0].append(len(pool[0]))  # a node changed a value it received
            if rng.random() < 0.2:
                compiled_taken.clear(), walked.clear()


def built_copy() -> list[Path]:
    """The copy's files built for this Python (the module and mypyc's library beside it)."""
    folder = Path(summarize_module.__file__).parent
    found = folder.glob(f"{summarize_module.COMPILED_NAME}*")
    return sorted(p for p in found if p.name.endswith(tuple(EXTENSION_SUFFIXES)))


def test_the_copy_runs_only_when_built_from_this_very_file() -> None:
    """Which walk runs follows the copy's digest: the copy when it is this file's, else the
    Python walk (an older build is never run); and the copy is never taken when asked not to."""
    if not built_copy():
        assert summarize_module.IMPLEMENTATION == "python"
        assert summarize_module.compiled_copy() is None
        return
    copy = importlib.import_module(f"agentcanvas.graph.{summarize_module.COMPILED_NAME}")
    source = Path(summarize_module.__file__).read_bytes()
    current = hashlib.sha256(source).hexdigest() == copy.SOURCE_SHA256
    if envsettings.PYTHON_SUMMARIES.get() == "1":  # the whole test run asked for Python
        assert summarize_module.IMPLEMENTATION == "python"
        assert summarize_module.compiled_copy() is None
        return
    expected = "compiled" if current else "python"
    assert expected == summarize_module.IMPLEMENTATION
    assert (summarize_module.compiled_copy() is copy) is current
    os.environ[envsettings.PYTHON_SUMMARIES.name] = "1"
    try:
        assert summarize_module.compiled_copy() is None
    finally:
        del os.environ[envsettings.PYTHON_SUMMARIES.name]


@needs_compiled
def test_a_copy_built_from_another_version_of_the_file_is_not_run(tmp_path: Path) -> None:
    """The module and its built copy in a package of their own, the module then edited (a
    comment): the Python walk runs there, where the unedited module runs the copy."""
    package = tmp_path / "agentcanvas" / "graph"
    package.mkdir(parents=True)
    for folder in (tmp_path / "agentcanvas", package):
        (folder / "__init__.py").write_text("")
    for path in [Path(summarize_module.__file__), *built_copy()]:
        shutil.copyfile(path, package / path.name)
    for name in ("envsettings.py", "errors.py"):  # what the module loads the copy with
        shutil.copyfile(Path(envsettings.__file__).with_name(name), package.parent / name)
    probe = "from agentcanvas.graph import summarize as s; print(s.IMPLEMENTATION, s.__file__)"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    def implementation() -> str:
        done = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        name, file = done.stdout.split()
        assert Path(file).parent == package  # the copy in tmp_path, not the project's
        return name

    assert implementation() == "compiled"
    with (package / "summarize.py").open("a") as module:
        module.write("# edited after the copy was built\n")
    assert implementation() == "python"
