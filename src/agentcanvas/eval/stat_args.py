"""Argument checks and the normal quantile shared by the interval, sequence and planning
modules (``intervals``, ``sequential``, ``paired_sequential``, ``sample_size``, ``betting``).

Each check raises ValueError naming the calling function and the bad argument.
"""

from __future__ import annotations

import math

__all__ = [
    "check_alpha",
    "check_confidence",
    "check_counts",
    "check_prior",
    "load_scipy",
    "z_quantile",
]


def check_confidence(name: str, confidence: float) -> float:
    """``alpha = 1 - confidence``, after checking that ``0 < confidence < 1``."""
    if not 0.0 < confidence < 1.0:  # also rejects NaN
        raise ValueError(f"{name} needs 0 < confidence < 1, got confidence={confidence!r}")
    return 1.0 - confidence


def check_alpha(name: str, alpha: float) -> float:
    """``alpha``, after checking that ``0 < alpha < 1``."""
    if not 0.0 < alpha < 1.0:  # also rejects NaN
        raise ValueError(f"{name} needs 0 < alpha < 1, got alpha={alpha!r}")
    return alpha


def check_counts(name: str, k: int, n: int) -> None:
    """``k`` successes of ``n > 0`` trials."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"{name} needs n > 0 and 0 <= k <= n, got k={k}, n={n}")


def check_prior(name: str, prior: tuple[float, float]) -> tuple[float, float]:
    """A Beta(a, b) prior with finite a, b > 0, as floats."""
    a, b = prior
    if not (math.isfinite(a) and math.isfinite(b) and a > 0.0 and b > 0.0):
        raise ValueError(f"{name} needs a prior Beta(a, b) with a, b > 0, got prior={prior!r}")
    return float(a), float(b)


def z_quantile(alpha: float) -> float:
    """The standard normal quantile at ``1 - alpha / 2`` (``scipy.special.ndtri``)."""
    from scipy.special import ndtri  # imported on first use: scipy is slow to import

    return float(ndtri(1.0 - alpha / 2.0))


def load_scipy() -> None:
    """Import the scipy functions of the intervals and sequences, now (about 0.35 s of CPU
    here). Each module imports them where it calls them, since most processes never do; a
    run calls this on a thread before its clock starts, so that its first live aggregates,
    computed on a thread beside the episodes, do not hold the interpreter for the imports."""
    from scipy.optimize import brentq  # noqa: F401 — the import is the work
    from scipy.special import betaincinv, betaln, ndtri, stdtrit  # noqa: F401
