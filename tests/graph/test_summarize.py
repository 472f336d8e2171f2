"""summarize: the firing log's bounded JSON values, against the plain rules it follows; and
format_traceback, bounded in lines and bytes."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import numpy as np
import pytest

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
            return int(value)
        if isinstance(value, float):
            return float(value) if math.isfinite(value) else str(float(value))
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
