"""Confidence intervals and multiplicity adjustments for run summaries and comparisons.

Pure functions of counts or values (numpy, scipy and math only); every result is a plain
``float`` (or a list of them). Each public function names its method and literature reference;
``METHOD_NAMES`` maps a method id to that name, for the ``method`` fields of reports.

Their coverage is measured, not assumed: ``tests/eval/test_intervals.py`` checks it exactly
(binomial and multinomial enumeration) or by seeded simulation, and ``bench/coverage.py``
prints the full table (method x region of the true value x n).

scipy is imported inside the functions that use it: ``scipy.stats`` and ``scipy.special`` are
slow to import, and most processes that import this module never call them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import numpy as np

from agentcanvas.eval import betting
from agentcanvas.eval.stat_args import check_confidence, check_counts, z_quantile

__all__ = [
    "METHOD_NAMES",
    "betting_interval",
    "clopper_pearson",
    "holm",
    "mover_sum",
    "newcombe_paired",
    "t_interval",
    "wilson",
]

METHOD_NAMES: Final[dict[str, str]] = {
    "wilson": "Wilson score interval (Wilson 1927)",
    "clopper-pearson": "Clopper-Pearson exact interval (Clopper & Pearson 1934)",
    "betting": ("hedged betting interval for a bounded mean (Waudby-Smith & Ramdas 2024, JRSS-B)"),
    "t": "Student t interval of the mean",
    "newcombe": (
        "Newcombe's square-and-add score interval for a paired difference "
        "(Newcombe 1998, method 10)"
    ),
    "mover": (
        "MOVER combination of per-stratum intervals, strata weighted equally (Zou & Donner 2008)"
    ),
    "holm": "Holm step-down adjustment (Holm 1979)",
}


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials (Wilson 1927, JASA 22:209).

    At ``k == 0`` the lower bound is exactly 0.0, at ``k == n`` the upper exactly 1.0; the
    quantile comes from ``scipy.special.ndtri``.
    """
    check_counts("wilson", k, n)
    z = z_quantile(check_confidence("wilson", confidence))
    z2 = z * z
    denom = n + z2
    center = (k + z2 / 2.0) / denom
    half = (z / denom) * math.sqrt(k * (n - k) / n + z2 / 4.0)
    lo = 0.0 if k == 0 else max(0.0, center - half)
    hi = 1.0 if k == n else min(1.0, center + half)
    return lo, hi


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson exact interval for ``k`` successes in ``n`` trials (Clopper & Pearson
    1934, Biometrika 26:404): the beta quantiles ``B(alpha/2; k, n-k+1)`` and
    ``B(1-alpha/2; k+1, n-k)``, exactly 0.0 at ``k == 0`` and 1.0 at ``k == n``."""
    check_counts("clopper_pearson", k, n)
    alpha = check_confidence("clopper_pearson", confidence)
    from scipy.special import betaincinv  # the beta quantile scipy.stats.beta.ppf uses

    lo = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, alpha / 2.0))
    hi = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1.0 - alpha / 2.0))
    return lo, hi


def betting_interval(
    values: Sequence[float], lo: float = 0.0, hi: float = 1.0, confidence: float = 0.95
) -> tuple[float, float]:
    """Hedged-capital betting interval for the mean of observations bounded in ``[lo, hi]``
    (Waudby-Smith & Ramdas 2024, "Estimating means of bounded random variables by betting",
    JRSS-B 86:1, Theorem 3 and the hedged capital CI of section 4).

    The values are rescaled to [0, 1]. For each candidate mean ``m`` on a grid of 201 points
    the hedged capital ``max(θ K⁺_t(m), (1-θ) K⁻_t(m))``, θ = 1/2, is built from
    ``K^±_t(m) = Π_{i<=t} (1 ± λ^±_i(m) (x_i - m))`` with the predictable plug-in bets tuned
    to the sample size n, ``λ_i = sqrt(2 log(2/α) / (n σ̂²_{i-1}))`` (σ̂² the regularised
    running variance, prior mean 1/2, prior variance 1/4), truncated at ``c/m`` (``K⁺``) and
    ``c/(1-m)`` (``K⁻``), c = 1/2. ``m`` is rejected when that capital reaches ``1/α`` at any
    time t <= n: the *running intersection*, valid by Ville's inequality and never wider
    than the final-time set. Each bound is then bracketed between its outermost kept grid
    point and the rejected one beyond it, and the bracket narrowed twice on a grid of 50
    steps; the rejected end of the last bracket is the bound (so a mean between a rejected
    and a kept point is never excluded): a resolution of 2e-6 of the range. Memory stays
    near 4 M floats whatever n is (the grid is taken in blocks).

    The bets are predictable, so the interval depends on the ORDER of the values: callers
    pass them in a fixed order (sorted by episode index) to get a deterministic result.
    Valid (coverage >= confidence) for any distribution on ``[lo, hi]``, n = 1 included
    (the interval is then wide).
    """
    alpha = check_confidence("betting_interval", confidence)
    z = betting.bounded_values("betting_interval", values, lo, hi)
    n = z.size
    t = np.arange(1, n + 1, dtype=np.float64)
    mu_hat = (0.5 + np.cumsum(z)) / (t + 1.0)
    sigma2 = (0.25 + np.cumsum((z - mu_hat) ** 2)) / (t + 1.0)
    sigma2_prev = np.concatenate(([0.25], sigma2[:-1]))
    lam = np.sqrt(2.0 * math.log(2.0 / alpha) / (n * sigma2_prev))
    # max(θ K⁺, (1-θ) K⁻) >= 1/α: each capital against 1/(θ α)
    log_threshold = math.log(1.0 / (betting.THETA * alpha))
    return betting.kept_interval(
        lambda grid: betting.capital_rejected(z, lam, grid, log_threshold, "max"), lo, hi
    )


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Student t interval of the mean (Student 1908): ``mean ± t_{n-1, 1-α/2} s / √n``.

    The quantile is ``scipy.special.stdtrit``, the function behind ``scipy.stats.t.ppf``.
    Needs n >= 2 finite values; when all values are equal the interval is ``(mean, mean)``.
    """
    alpha = check_confidence("t_interval", confidence)
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size < 2:
        raise ValueError(f"t_interval needs at least 2 values, got {x.size}")
    if not np.isfinite(x).all():
        raise ValueError("t_interval needs finite values")
    n = x.size
    mean = float(x.mean())
    if float(x.min()) == float(x.max()):
        return float(x[0]), float(x[0])
    s = float(x.std(ddof=1))
    from scipy.special import stdtrit  # imported on first use: scipy is slow to import

    half = float(stdtrit(n - 1, 1.0 - alpha / 2.0)) * s / math.sqrt(n)
    return mean - half, mean + half


def newcombe_paired(
    both: int, a_only: int, b_only: int, neither: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Newcombe's square-and-add interval for the paired difference ``p_B - p_A`` (Newcombe
    1998, "Improved confidence intervals for the difference between binomial proportions
    based on paired data", Stat Med 17:2635-2650, method 10).

    ``(both, a_only, b_only, neither)`` is the 2x2 table of pairs: both succeeded, only A,
    only B, neither. The Wilson intervals of the two marginals ``p_A = (both + a_only)/n``
    and ``p_B = (both + b_only)/n`` are combined with the correlation correction φ of the
    paper: ``φ = C / sqrt(product of the four margins)``, ``C = AD - BC - n/2`` when
    ``AD - BC > n/2``, 0 when ``0 <= AD - BC <= n/2``, ``AD - BC`` when negative (A = both,
    B = a_only, C = b_only, D = neither); φ = 0 when a margin is 0. Clipped to [-1, 1].
    Swapping A and B negates and swaps the bounds exactly.
    """
    counts = {"both": both, "a_only": a_only, "b_only": b_only, "neither": neither}
    if any(v < 0 for v in counts.values()):
        raise ValueError(f"newcombe_paired needs counts >= 0, got {counts}")
    n = both + a_only + b_only + neither
    if n == 0:
        raise ValueError("newcombe_paired needs at least one pair, got n = 0")
    alpha = check_confidence("newcombe_paired", confidence)
    confidence = 1.0 - alpha
    k_a, k_b = both + a_only, both + b_only
    p_a, p_b = k_a / n, k_b / n
    l_a, u_a = wilson(k_a, n, confidence)
    l_b, u_b = wilson(k_b, n, confidence)
    margins = k_a * (n - k_a) * k_b * (n - k_b)
    phi = 0.0
    if margins > 0:
        cross = both * neither - a_only * b_only
        if cross > n / 2:
            phi = (cross - n / 2) / math.sqrt(margins)
        elif cross < 0:
            phi = cross / math.sqrt(margins)
    # The two sides written symmetrically in (A, B), so that swapping them is exact.
    d_lo_b, d_up_a = p_b - l_b, u_a - p_a
    d_up_b, d_lo_a = u_b - p_b, p_a - l_a
    lower_gap = math.sqrt(max(0.0, d_lo_b**2 + d_up_a**2 - 2.0 * phi * (d_lo_b * d_up_a)))
    upper_gap = math.sqrt(max(0.0, d_up_b**2 + d_lo_a**2 - 2.0 * phi * (d_up_b * d_lo_a)))
    diff = (k_b - k_a) / n
    return max(-1.0, diff - lower_gap), min(1.0, diff + upper_gap)


def mover_sum(
    estimates: Sequence[float],
    intervals: Sequence[tuple[float, float]],
    weights: Sequence[float],
) -> tuple[float, float]:
    """MOVER interval of a weighted sum ``θ = Σ w_i θ_i`` of independent per-stratum
    estimates (Zou & Donner 2008, Stat Med 27:1693-1702, the MOVER for a linear combination):
    ``θ - sqrt(Σ (w_i (θ_i - l_i))²)`` to ``θ + sqrt(Σ (w_i (u_i - θ_i))²)``, for weights
    ``w_i >= 0`` and each ``l_i <= θ_i <= u_i``."""
    if not (len(estimates) == len(intervals) == len(weights)):
        raise ValueError(
            "mover_sum needs as many estimates, intervals and weights, got "
            f"{len(estimates)}, {len(intervals)}, {len(weights)}"
        )
    if not estimates:
        raise ValueError("mover_sum needs at least one stratum, got none")
    total = 0.0
    below: list[float] = []
    above: list[float] = []
    for i, (est, (low, high), w) in enumerate(zip(estimates, intervals, weights, strict=True)):
        if not w >= 0.0 or not math.isfinite(w):
            raise ValueError(f"mover_sum needs finite weights >= 0, got weights[{i}] = {w!r}")
        if not low <= est <= high:
            raise ValueError(
                f"mover_sum needs intervals[{i}] to contain estimates[{i}], got "
                f"{est!r} and ({low!r}, {high!r})"
            )
        total += w * est
        below.append(w * (est - low))
        above.append(w * (high - est))
    return total - math.hypot(*below), total + math.hypot(*above)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (Holm 1979, Scand J Statist 6:65-70), in the input
    order: the i-th smallest p becomes ``max_{j<=i} min(1, (m - j + 1) p_(j))``."""
    m = len(p_values)
    for i, p in enumerate(p_values):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"holm needs p-values in [0, 1], got p_values[{i}] = {p!r}")
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))
        adjusted[i] = running
    return adjusted
