"""The betting machinery behind ``intervals.betting_interval`` and ``sequential.betting_cs``
(Waudby-Smith & Ramdas 2024, "Estimating means of bounded random variables by betting",
JRSS-B 86:1).

For a candidate mean ``m`` of values rescaled to [0, 1], two capital processes bet on the
mean being above and below it: ``K^±_t(m) = Π_{i<=t} (1 ± λ^±_i(m) (x_i - m))``, the bets
``λ_i`` truncated at ``c/m`` (``K⁺``) and ``c/(1-m)`` (``K⁻``), c = 1/2. ``m`` is rejected when
the hedged capital reaches its threshold at some time t <= n. The two callers differ only in
their bets (given here as ``lam``) and in how they hedge:

- ``"max"`` (the fixed-n interval): ``max(θ K⁺_t, (1-θ) K⁻_t)`` against ``1/α``, i.e. each
  capital against ``1/(θ α)``;
- ``"sum"`` (the confidence sequence): ``θ K⁺_t + (1-θ) K⁻_t`` against ``1/α``.

The kept means are found on a grid of ``GRID + 1`` candidates, then each bound narrowed
``REFINE`` times on a grid of ``FINE`` steps; the rejected end of the last bracket is the
bound, so a mean between a rejected and a kept point is never excluded: a resolution of
``1 / (GRID · FINE^REFINE)`` = 2e-6 of the range for ~400 evaluations per value. The grid is
taken in row blocks so that memory stays near ``MAX_CELLS`` floats whatever n is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "THETA",
    "Hedge",
    "bounded_values",
    "capital_rejected",
    "kept_interval",
]

GRID: Final = 200
FINE: Final = 50
REFINE: Final = 2
MAX_CELLS: Final = 4_000_000
TRUNCATION: Final = 0.5
THETA: Final = 0.5

Hedge = Literal["max", "sum"]
FloatArray = npt.NDArray[np.float64]
Rejected = Callable[[FloatArray], npt.NDArray[np.bool_]]


def bounded_values(name: str, values: Sequence[float], lo: float, hi: float) -> FloatArray:
    """``values`` rescaled from ``[lo, hi]`` to [0, 1]; ValueError naming ``name`` for an
    empty sequence, a bad range or a value outside it (NaN included)."""
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"{name} needs finite lo < hi, got lo={lo!r}, hi={hi!r}")
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError(f"{name} needs at least one value, got none")
    outside = ~((x >= lo) & (x <= hi))  # NaN is outside too
    if outside.any():
        i = int(np.argmax(outside))
        raise ValueError(
            f"{name}: values[{i}] = {float(x[i])!r} is outside [lo, hi] = [{lo!r}, {hi!r}]"
        )
    scaled: FloatArray = np.clip((x - lo) / (hi - lo), 0.0, 1.0)
    return scaled


def capital_rejected(
    z: FloatArray, lam: FloatArray, grid: FloatArray, log_threshold: float, hedge: Hedge
) -> npt.NDArray[np.bool_]:
    """Which candidate means of ``grid`` the hedged capital rejects at some t <= n."""
    out = np.empty(grid.size, dtype=bool)
    rows = max(1, MAX_CELLS // max(z.size, 1))
    for start in range(0, grid.size, rows):
        up, down = _log_capitals(z, lam, grid[start : start + rows])
        if hedge == "max":
            hit = up.max(axis=1) >= log_threshold
            hit |= down.max(axis=1) >= log_threshold
        else:
            up += math.log(THETA)
            down += math.log(1.0 - THETA)
            np.logaddexp(up, down, out=up)  # log of the hedged capital
            hit = up.max(axis=1) >= log_threshold
        out[start : start + rows] = hit
    return out


def _log_capitals(z: FloatArray, lam: FloatArray, m: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``log K⁺_t(m)`` and ``log K⁻_t(m)`` for every t (columns) and candidate m (rows)."""
    with np.errstate(divide="ignore"):
        cap_up = TRUNCATION / m  # inf at m = 0: the bet is then λ itself
        cap_down = TRUNCATION / (1.0 - m)
    diff = z[None, :] - m[:, None]
    # Each factor is >= 1 - c > 0 (|λ (x - m)| <= c), so log1p never sees -1.
    up = np.minimum(lam[None, :], cap_up[:, None])
    up *= diff
    np.log1p(up, out=up)
    np.cumsum(up, axis=1, out=up)
    down = np.minimum(lam[None, :], cap_down[:, None])
    down *= diff
    np.negative(down, out=down)
    np.log1p(down, out=down)
    np.cumsum(down, axis=1, out=down)
    return up, down


def kept_interval(rejected: Rejected, lo: float, hi: float) -> tuple[float, float]:
    """The interval of kept means (grid, then each bound refined), scaled back to
    ``[lo, hi]``; ``(lo, hi)`` when no candidate is kept (stay conservative)."""
    coarse = np.linspace(0.0, 1.0, GRID + 1)
    kept = np.flatnonzero(~rejected(coarse))
    if kept.size == 0:
        return lo, hi
    low01 = _refine(rejected, coarse, int(kept[0]), -1)
    high01 = _refine(rejected, coarse, int(kept[-1]), +1)
    width = hi - lo
    return max(lo, lo + low01 * width), min(hi, lo + high01 * width)


def _refine(rejected: Rejected, grid: FloatArray, kept: int, outward: int) -> float:
    """The bound beyond the outermost kept grid point ``kept``: the bracket between it and
    its rejected outer neighbour is narrowed ``REFINE`` times on a finer grid, and the
    rejected end of the last bracket is returned."""
    outer = kept + outward
    if outer < 0 or outer >= grid.size:
        return float(grid[kept])  # the kept point is 0 or 1 itself
    inside, outside = float(grid[kept]), float(grid[outer])
    for _ in range(REFINE):
        fine = np.linspace(outside, inside, FINE + 1)  # fine[0] rejected, fine[-1] kept
        first_kept = int(np.argmax(~rejected(fine)))
        if first_kept == 0:  # not monotone here: keep the bracket we have
            break
        outside, inside = float(fine[first_kept - 1]), float(fine[first_kept])
    return outside
