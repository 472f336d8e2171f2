"""summarize: the firing log's short form of values, against the plain rules it follows."""

from __future__ import annotations

import enum
import math
from typing import Any

import numpy as np
import pytest

from agentcanvas.graph.summarize import MAX_ITEMS, MAX_STR, summarize


def reference(value: Any, depth: int = 0) -> Any:
    """The rules written plainly (isinstance in order, one call per value)."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype}[{','.join(str(d) for d in value.shape)}]"
    if isinstance(value, np.generic):
        return reference(value.item(), depth)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bool | int) or value is None:
        return value
    if isinstance(value, str):
        return value if len(value) <= MAX_STR else value[:MAX_STR] + "…"
    if isinstance(value, bytes):
        return f"bytes[{len(value)}]"
    if depth >= 3:
        return f"{type(value).__name__}(…)"
    if isinstance(value, dict):
        return {str(k): reference(v, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}
    if isinstance(value, list | tuple):
        return [reference(v, depth + 1) for v in value[:MAX_ITEMS]]
    return f"{type(value).__name__}"


class Colour(enum.IntEnum):
    RED = 1


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
    np.zeros((7, 7, 3), np.uint8),
    np.float32(2.5),
    np.int64(3),
    Colour.RED,
    (1, 2, [3]),
    {"objects": [{"desc": "red ball", "pos": [1, 2], "w": 0.5} for _ in range(20)]},
    {1: "int key", "1": "str key", None: np.arange(3)},
    {"deep": {"deeper": {"deepest": {"x": 1}, "list": [[1, [2]]]}}},
    [float("nan"), "y" * 200, None, np.bool_(True), {"k": (1,)}] * 5,
    {f"k{i}": i for i in range(40)},
    object(),
]


@pytest.mark.parametrize(
    "value", VALUES, ids=[f"{i}:{type(v).__name__}" for i, v in enumerate(VALUES)]
)
def test_summaries_follow_the_rules(value: Any) -> None:
    assert repr(summarize(value)) == repr(reference(value))
