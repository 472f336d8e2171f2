"""Strict JSON text: whatever we print, serve or write parses with a strict parser.

JSON has no NaN or Infinity, yet ``json.dumps`` writes them by default. Every JSON text that
leaves a process (stdout, HTTP bodies, WebSocket events, files) goes through :func:`dumps`,
which writes a non-finite float as ``null`` and refuses anything else that JSON cannot hold.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["dumps", "finite_or_none"]


def finite_or_none(obj: Any) -> Any:
    """A copy of ``obj`` with every non-finite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {key: finite_or_none(value) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite_or_none(value) for value in obj]
    return obj


def dumps(
    obj: Any,
    *,
    indent: int | None = None,
    default: Callable[[Any], Any] | None = None,
    ensure_ascii: bool = True,
    compact: bool = False,
) -> str:
    """``obj`` as strict JSON text (non-finite floats as ``null``).

    ``default`` converts values JSON cannot hold (its result is made finite too); without
    it such a value raises TypeError. ``compact`` leaves out the spaces after separators.
    """
    separators = (",", ":") if compact else ((",", ": ") if indent is not None else None)
    if default is None:
        # Most texts hold no non-finite float: then ``finite_or_none`` would copy ``obj``
        # unchanged, and json's encoder alone (C, when not indented) writes the same text.
        # A non-finite float makes it raise ValueError, and anything JSON cannot hold
        # (a non-dict Mapping, say) TypeError: both take the copying path below.
        with contextlib.suppress(TypeError, ValueError):
            return json.dumps(
                obj,
                indent=indent,
                separators=separators,
                ensure_ascii=ensure_ascii,
                allow_nan=False,
            )

    def finite_default(value: Any) -> Any:
        assert default is not None
        return finite_or_none(default(value))

    return json.dumps(
        finite_or_none(obj),
        indent=indent,
        separators=separators,
        ensure_ascii=ensure_ascii,
        allow_nan=False,
        default=None if default is None else finite_default,
    )
