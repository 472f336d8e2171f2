"""jsontext.dumps: strict JSON, and the same text whichever of its two paths writes it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pytest

from agentcanvas import jsontext


class _Frozen(Mapping[str, Any]):
    """A Mapping that is not a dict (json cannot write it; finite_or_none copies it)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def careful(obj: Any, **kwargs: Any) -> str:
    """The copying path alone: what dumps wrote before it tried json's encoder first."""
    return jsontext.dumps(obj, default=lambda value: (_ for _ in ()).throw(TypeError()), **kwargs)


DOCS = [
    {"step": 3, "node": "env", "latency_ms": 1.234, "inputs": {"action": 2}, "ok": True},
    {"z": [1, (2, 3.5)], "a": None, "é": "ünïcode", "n": np.float64(0.1)},
    [0.1 + 0.2, -0.0, 1e-45, 3.4e38, {"nested": {"deep": [[], {}]}}],
    {1: "int key", 2.5: "float key", False: "bool key", None: "none key"},
]


@pytest.mark.parametrize("doc", DOCS)
@pytest.mark.parametrize(
    "options",
    [{}, {"compact": True}, {"indent": 1, "ensure_ascii": False}, {"indent": 2}],
)
def test_a_finite_text_is_the_same_on_the_fast_path(doc: Any, options: dict[str, Any]) -> None:
    fast = jsontext.dumps(doc, **options)
    assert fast == careful(doc, **options)
    json.loads(fast)


def test_non_finite_floats_and_mappings_still_take_the_copying_path() -> None:
    doc = {"m": _Frozen({"x": float("nan")}), "l": [np.float64("inf"), 1.0]}
    assert jsontext.dumps(doc, compact=True) == '{"m":{"x":null},"l":[null,1.0]}'
    with pytest.raises(ValueError):
        jsontext.dumps({float("nan"): 1})  # a key JSON cannot hold, as before
