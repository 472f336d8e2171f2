"""The metrics an episode reports: what its graph-scope ``core.graphOut`` sinks were given.

Per port, the latest value the executor snapshotted; a ``metrics`` dict is flattened into
dotted names (``a.b``); numpy scalars and one-element arrays become plain numbers, NaN
becomes None, and what is not a scalar is left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["harvest"]


def harvest(sinks: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The metrics of the sinks' last inputs (port: value), in port order per sink."""
    metrics: dict[str, Any] = {}
    for inputs in sinks:
        for port, value in sorted(inputs.items()):
            if port == "metrics" and isinstance(value, dict):
                _flatten_into(metrics, "", value)
            elif _is_scalar(value) or isinstance(value, np.generic):
                metrics[port] = _plain(value)
    return metrics


def _is_scalar(value: Any) -> bool:
    return isinstance(value, bool | int | float | str) or value is None


def _flatten_into(out: dict[str, Any], prefix: str, value: dict[str, Any]) -> None:
    for key, item in sorted(value.items()):
        name = f"{prefix}{key}"
        if isinstance(item, dict):
            _flatten_into(out, f"{name}.", item)
        elif _is_scalar(item) or isinstance(item, np.generic):
            out[name] = _plain(item)
        elif isinstance(item, np.ndarray) and item.size == 1:
            out[name] = _plain(item.reshape(()).item())


def _plain(value: Any) -> Any:
    """A JSON-safe metric value: numpy scalars as Python ones, NaN as None."""
    if isinstance(value, np.generic):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value
