"""The start-up batch-invariance check of one batched function, on its declared examples.

A batched function (``NODESET.batched_node``) promises that a request's output does not
depend on the batch it lands in, nor on its position there (see docs/nodesets.md). When the
function declares example inputs (``examples=[...]``), a shared server runs this check
before it serves anything: for every batch size ``1..max_batch`` and every rotation of the
examples (so every example sits at every position, next to varying neighbours), each
output is compared **bit for bit** with that example's output computed alone. It is the
same sizes-and-positions sweep ``models.invariance`` runs for the built-in models, over
arbitrary output values (dicts, lists, numbers, numpy arrays) instead of float32 rows.

No torch here: every node-set server imports this module.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["StartupCheck", "check_examples", "describe_difference", "rotated_batches", "same_bits"]

CHECK_CLIENT = "__batch_check__"


@dataclass(frozen=True)
class StartupCheck:
    """The outcome of the start-up check of one batched function."""

    ok: bool
    n_examples: int
    max_batch: int
    n_checked: int
    """Rows compared: one per (batch size, rotation, position)."""
    n_mismatched: int
    first_mismatch: str | None

    def summary(self) -> str:
        sweep = (
            f"{self.n_checked} rows, batch sizes 1-{self.max_batch}, every position, "
            f"{self.n_examples} example(s)"
        )
        if self.ok:
            return f"start-up check passed: {sweep}, bit-exact"
        return f"start-up check failed ({self.n_mismatched} of {sweep}): {self.first_mismatch}"


def rotated_batches(n_probes: int, max_batch: int) -> list[list[int]]:
    """Probe indices for every batch size ``1..max_batch`` and every rotation.

    Rotating the probe list puts every probe at every position ``< batch size`` (probes
    repeat when there are fewer than ``max_batch``), next to varying neighbours.
    """
    return [
        [(offset + j) % n_probes for j in range(size)]
        for size in range(1, max_batch + 1)
        for offset in range(n_probes)
    ]


def same_bits(a: Any, b: Any) -> bool:
    """Whether two output values are identical down to the last bit of every float.

    Floats compare by their IEEE-754 bits (``0.0`` and ``-0.0`` differ, a NaN equals the
    same NaN); arrays by dtype, shape and bytes; dicts by keys and values; lists and tuples
    element by element; anything else with ``==``.
    """
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.tobytes() == b.tobytes()
        )
    if isinstance(a, np.generic) or isinstance(b, np.generic):
        return type(a) is type(b) and a.tobytes() == b.tobytes()
    if isinstance(a, float) or isinstance(b, float):
        return (
            isinstance(a, float)
            and isinstance(b, float)
            and struct.pack("<d", a) == struct.pack("<d", b)
        )
    if isinstance(a, dict) or isinstance(b, dict):
        return (
            isinstance(a, dict)
            and isinstance(b, dict)
            and a.keys() == b.keys()
            and all(same_bits(a[k], b[k]) for k in a)
        )
    if isinstance(a, list | tuple) or isinstance(b, list | tuple):
        return (
            isinstance(a, list | tuple)
            and isinstance(b, list | tuple)
            and len(a) == len(b)
            and all(same_bits(x, y) for x, y in zip(a, b, strict=True))
        )
    return bool(type(a) is type(b) and a == b)


def describe_difference(got: Any, want: Any, path: str = "") -> str:
    """Where two outputs first differ, e.g. ``score: 4.313971042633057 != 4.313970565795898``."""
    if isinstance(got, dict) and isinstance(want, dict) and got.keys() == want.keys():
        for key in got:
            if not same_bits(got[key], want[key]):
                return describe_difference(got[key], want[key], f"{path}.{key}" if path else key)
    if _same_numeric_layout(got, want):
        wide = np.abs(got.astype(np.float64) - want.astype(np.float64))
        biggest = float(np.nanmax(wide)) if wide.size and not np.all(np.isnan(wide)) else 0.0
        n = int(np.sum(got != want))
        return f"{path or 'output'}: {n}/{got.size} values differ, max |diff| {biggest:.3g}"
    return f"{path or 'output'}: {_short(got)} != {_short(want)} (alone)"


def _same_numeric_layout(a: Any, b: Any) -> bool:
    return (
        isinstance(a, np.ndarray)
        and isinstance(b, np.ndarray)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and a.dtype.kind in "iuf"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


RunBatch = Callable[[Sequence[int]], Sequence[Any]]
"""Run the examples with these indices as one batch; one output per index, in order."""


def check_examples(run_batch: RunBatch, n_examples: int, max_batch: int) -> StartupCheck:
    """Compare every row of every rotated batch bit for bit with its example run alone.

    An exception from ``run_batch`` propagates: the caller decides what a crash means.
    """
    if n_examples < 1 or max_batch < 1:
        raise ValueError("need at least one example and max_batch >= 1")
    alone = [_one(run_batch([i]), 1)[0] for i in range(n_examples)]
    n_checked = n_mismatched = 0
    first: str | None = None
    for batch in rotated_batches(n_examples, max_batch):
        outputs = _one(run_batch(batch), len(batch))
        for position, index in enumerate(batch):
            n_checked += 1
            if same_bits(outputs[position], alone[index]):
                continue
            n_mismatched += 1
            if first is None:
                first = (
                    f"example {index} at position {position} of a batch of {len(batch)}: "
                    f"{describe_difference(outputs[position], alone[index])}"
                )
    return StartupCheck(n_mismatched == 0, n_examples, max_batch, n_checked, n_mismatched, first)


def _one(outputs: Sequence[Any], n: int) -> Sequence[Any]:
    if len(outputs) != n:
        raise ValueError(f"the function returned {len(outputs)} outputs for {n} inputs")
    return outputs
