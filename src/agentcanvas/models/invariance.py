"""Batch invariance, measured: fixed-shape padding and a bit-exact check shared by the models.

A shared model server promises that a request's output is bit-identical whatever batch it
lands in and at whatever position (DESIGN §5.3). Plain dynamic batching breaks that on CPU
and GPU alike: the GEMM kernel, its blocking and its thread split are chosen from the
shape, so changing the number of rows (or the padded sequence length) changes the order of
the floating-point additions and the last bits of the result. Two modes keep the promise:

- ``padded``: every forward has the same shape — ``max_batch`` rows, dummy rows appended —
  so the same kernels run with the same partition, whatever the batch;
- ``single``: one forward per request, so a request never shares a forward at all.

Neither is assumed: ``check_batch_invariance`` compares, for every batch size
``1..max_batch`` and every position, each row's float32 bits with the request computed
alone, and ``choose_mode`` falls back from ``padded`` to ``single`` when the check fails.
The result holds for the thread count and device it was measured with; a server fixes its
thread count (``torch.set_num_threads``) before checking and never changes it afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt
import torch

__all__ = [
    "BatchMode",
    "InvarianceReport",
    "check_batch_invariance",
    "choose_mode",
    "chunk_slices",
    "pad_rows",
]

BatchMode = Literal["naive", "padded", "single"]
"""How a batch of requests is run: one dynamic forward, fixed-shape forwards, or one each."""

T = TypeVar("T")
Forward = Callable[[Sequence[T], BatchMode], npt.NDArray[np.float32]]
"""Run a batch of requests in a mode; one float32 output row per request, in order."""


@dataclass(frozen=True)
class InvarianceReport:
    """The outcome of a bit-exact batch-invariance check of one model in one mode."""

    ok: bool
    mode: BatchMode
    n_checked: int
    """Rows compared: one per (batch size, position, probe) combination."""
    n_mismatched: int
    max_abs_diff: float
    first_mismatch: str | None
    n_threads: int
    """``torch.get_num_threads()`` during the check: the result holds for this count only."""
    device: str
    reason: str = ""
    """Why this mode was chosen (``choose_mode``); empty for a plain check."""


def pad_rows(x: torch.Tensor, n_rows: int, fill_row: torch.Tensor) -> torch.Tensor:
    """Append copies of ``fill_row`` to ``x`` until it has exactly ``n_rows`` rows."""
    n_missing = n_rows - x.shape[0]
    if n_missing < 0:
        raise ValueError(f"{x.shape[0]} rows do not fit in a fixed batch of {n_rows}")
    if n_missing == 0:
        return x
    fill = fill_row.to(device=x.device, dtype=x.dtype).unsqueeze(0)
    return torch.cat([x, fill.expand(n_missing, *fill_row.shape)], dim=0)


def chunk_slices(n_items: int, max_rows: int) -> list[slice]:
    """Consecutive slices of at most ``max_rows`` items covering ``range(n_items)``."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    return [slice(start, min(start + max_rows, n_items)) for start in range(0, n_items, max_rows)]


def _rotated_batches(n_probes: int, max_batch: int) -> list[list[int]]:
    """Probe indices for every batch size and rotation.

    Rotating the probe list puts every probe at every position ``< batch size`` (probes
    repeat when there are fewer than ``max_batch``), next to varying neighbours.
    """
    return [
        [(offset + j) % n_probes for j in range(size)]
        for size in range(1, max_batch + 1)
        for offset in range(n_probes)
    ]


def check_batch_invariance(
    forward: Forward[T],
    mode: BatchMode,
    probes: Sequence[T],
    max_batch: int,
    *,
    device: str,
) -> InvarianceReport:
    """Compare every row of every rotated batch bit for bit with its probe run alone."""
    if not probes or max_batch < 1:
        raise ValueError("need at least one probe and max_batch >= 1")
    references = [_forward_rows(forward, [probe], mode)[0] for probe in probes]
    n_checked = 0
    diffs: list[float] = []
    first_mismatch: str | None = None
    for batch in _rotated_batches(len(probes), max_batch):
        outputs = _forward_rows(forward, [probes[i] for i in batch], mode)
        for position, probe_index in enumerate(batch):
            n_checked += 1
            got, want = outputs[position], references[probe_index]
            if np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                continue
            diffs.append(float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))))
            if first_mismatch is None:
                first_mismatch = (
                    f"probe {probe_index} at position {position} of a batch of {len(batch)}: "
                    f"{int(np.sum(got != want))}/{got.size} values differ, "
                    f"max |diff| {diffs[-1]:.3g}"
                )
    return InvarianceReport(
        ok=not diffs,
        mode=mode,
        n_checked=n_checked,
        n_mismatched=len(diffs),
        max_abs_diff=max(diffs, default=0.0),
        first_mismatch=first_mismatch,
        n_threads=torch.get_num_threads(),
        device=device,
    )


def _forward_rows(
    forward: Forward[T], batch: Sequence[T], mode: BatchMode
) -> npt.NDArray[np.float32]:
    outputs = forward(batch, mode)
    if outputs.dtype != np.float32 or outputs.ndim != 2 or outputs.shape[0] != len(batch):
        raise ValueError(f"forward must return one float32 row per item, got {outputs.shape}")
    return np.ascontiguousarray(outputs)


def choose_mode(
    forward: Forward[T], probes: Sequence[T], max_batch: int, *, device: str
) -> InvarianceReport:
    """Check ``padded``; fall back to ``single`` when it fails. The report says why."""
    padded = check_batch_invariance(forward, "padded", probes, max_batch, device=device)
    if padded.ok:
        reason = f"padded is bit-exact on all {padded.n_checked} (batch size, position) rows"
        return replace(padded, reason=reason)
    single = check_batch_invariance(forward, "single", probes, max_batch, device=device)
    reason = f"padded failed ({padded.first_mismatch}); fell back to single"
    if not single.ok:
        reason += f", which also failed ({single.first_mismatch}): invariance not guaranteed"
    return replace(single, reason=reason)
