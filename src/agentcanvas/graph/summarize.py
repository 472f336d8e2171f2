"""Short, JSON-safe summaries of node inputs/outputs for firing logs and events."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["MAX_ITEMS", "MAX_STR", "summarize"]

MAX_STR = 120
MAX_ITEMS = 16

# ``str(dtype)`` runs Python code in numpy 2 (a few µs): every firing-log entry names the
# dtypes of its arrays, so each dtype's name is computed once.
_DTYPE_NAMES: dict[np.dtype[Any], str] = {}


def _array(value: np.ndarray[Any, Any]) -> str:
    dtype = value.dtype
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return f"{name}[{','.join(map(str, value.shape))}]"


def summarize(value: Any, depth: int = 0) -> Any:
    """Arrays become ``"uint8[7,7,3]"``; long strings and containers are cut; floats stay exact."""
    kind = type(value)
    if kind is int or kind is bool or value is None:  # the common cases first, exact types
        return value
    if kind is float:
        return value if math.isfinite(value) else str(value)
    if kind is str:
        return value if len(value) <= MAX_STR else value[:MAX_STR] + "…"
    if kind is np.ndarray:
        return _array(value)
    if kind is dict and depth < 3:
        out: dict[str, Any] = {}
        for taken, (key, item) in enumerate(value.items()):
            if taken == MAX_ITEMS:
                break
            out[key if type(key) is str else str(key)] = _item(item, depth + 1)
        return out
    if kind is list and depth < 3:
        return [_item(item, depth + 1) for item in value[:MAX_ITEMS]]
    return _other(value, depth)


def _item(value: Any, depth: int) -> Any:
    """An item of a container: plain scalars without a call of `summarize` (the env's lists
    of objects and cells are hundreds of them per episode)."""
    kind = type(value)
    if kind is int or kind is bool or value is None:
        return value
    if kind is str and len(value) <= MAX_STR:
        return value
    return summarize(value, depth)


def _other(value: Any, depth: int) -> Any:
    """Subclasses, numpy scalars, bytes, tuples and what is too deep: the general rules."""
    if isinstance(value, np.ndarray):
        return _array(value)
    if isinstance(value, np.generic):
        return summarize(value.item(), depth)
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
        items = list(value.items())[:MAX_ITEMS]
        return {str(k): summarize(v, depth + 1) for k, v in items}
    if isinstance(value, list | tuple):
        return [summarize(v, depth + 1) for v in value[:MAX_ITEMS]]
    return f"{type(value).__name__}"
