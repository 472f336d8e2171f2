"""Short, JSON-safe summaries of node inputs/outputs for firing logs and events."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["MAX_ITEMS", "MAX_STR", "summarize"]

MAX_STR = 120
MAX_ITEMS = 16


def summarize(value: Any, depth: int = 0) -> Any:
    """Arrays become ``"uint8[7,7,3]"``; long strings and containers are cut; floats stay exact."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype}[{','.join(str(d) for d in value.shape)}]"
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
