"""Anytime-valid confidence sequences for a success rate and a bounded mean.

Pure functions of counts or values (numpy, scipy and math only); every number is a plain
``float``. A *confidence sequence* (CS) is a sequence of intervals that covers the true
value at every time simultaneously with probability >= confidence, so it may be looked at
after every episode and the run stopped whenever it is narrow enough; a fixed-n interval
(``intervals.wilson``) looked at that way misses far more often than 1 - confidence. It rests
on Ville's inequality: a nonnegative martingale of mean 1 (an e-process) reaches ``1/α``
with probability at most ``α``, at any time.

- ``beta_binomial_cs``: the beta-binomial mixture martingale for a Bernoulli rate (Robbins
  1970, "Statistical methods related to the law of the iterated logarithm", Ann. Math.
  Statist. 41:1397; Howard, Ramdas, McAuliffe & Sekhon 2021, "Time-uniform, nonparametric,
  nonasymptotic confidence sequences", Ann. Statist. 49:1055, section 3 and Proposition 6);
  ``running_intersection`` of any CS (its running intersection is a CS too);
  ``first_narrow_enough``: the first episode at which that CS is as narrow as asked;
- ``betting_cs``: the hedged capital process with predictable plug-in bets for the mean of
  a bounded metric (Waudby-Smith & Ramdas 2024, "Estimating means of bounded random
  variables by betting", JRSS-B 86:1, Theorem 3 and the PrPl λ of section 3).

The anytime-valid paired test is ``paired_sequential``; the planners are ``sample_size``.
``SEQUENTIAL_METHOD_NAMES`` maps the method id of any of them (the ``method`` field of the
results) to its name. Validity is measured, not assumed: ``tests/eval/test_sequential.py``
checks time-uniform coverage and type-I error by seeded simulation, and
``bench/sequential.py`` prints the larger sweep.

scipy is imported inside the functions that use it: ``scipy.special`` is slow to import,
and most processes that import this module never call them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from agentcanvas.eval import betting
from agentcanvas.eval.stat_args import check_confidence, check_prior

__all__ = [
    "SEQUENTIAL_METHOD_NAMES",
    "beta_binomial_cs",
    "betting_cs",
    "first_narrow_enough",
    "running_intersection",
]

SEQUENTIAL_METHOD_NAMES: Final[dict[str, str]] = {
    "beta-binomial-cs": (
        "beta-binomial mixture confidence sequence for a Bernoulli rate "
        "(Robbins 1970; Howard, Ramdas, McAuliffe & Sekhon 2021, Ann. Statist.)"
    ),
    "betting-cs": (
        "hedged betting confidence sequence for a bounded mean, predictable plug-in bets "
        "(Waudby-Smith & Ramdas 2024, JRSS-B)"
    ),
    "paired-sequential": (
        "anytime-valid McNemar: beta-binomial mixture e-process on the discordant pairs, "
        "rejecting at 1/alpha by Ville's inequality (Robbins 1970; Howard et al. 2021)"
    ),
    "connor": (
        "two-sided McNemar sample size for paired proportions (Connor 1987, Biometrics 43:207)"
    ),
    "paired-sequential-simulation": (
        "pairs used by the anytime-valid McNemar, by seeded simulation of the paired design"
    ),
}

# beta_binomial_cs: the root in u = log p is found to _CS_XTOL / k (about _CS_XTOL in log M,
# whose slope in u is at most k there), and the bound then moved outward by twice brentq's
# tolerance, so that the returned interval contains {p : M_n(p) < 1/α}.
_CS_XTOL: Final = 1e-12
_BRENTQ_RTOL: Final = 4.0 * 2.220446049250313e-16  # brentq's smallest (and default) rtol

FloatArray = npt.NDArray[np.float64]


# --- the beta-binomial confidence sequence ---------------------------------------------------


def beta_binomial_cs(
    k: int, n: int, confidence: float = 0.95, prior: tuple[float, float] = (0.5, 0.5)
) -> tuple[float, float]:
    """Beta-binomial mixture confidence sequence for a Bernoulli rate at time ``n``, after
    ``k`` successes (Robbins 1970, Ann. Math. Statist. 41:1397; Howard, Ramdas, McAuliffe &
    Sekhon 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences",
    Ann. Statist. 49:1055, section 3).

    With the prior Beta(a, b) (default the Jeffreys prior, a = b = 1/2), the mixture
    ``M_n(p) = B(a+k, b+n-k) / B(a, b) / (p^k (1-p)^(n-k))`` is a nonnegative martingale of
    mean 1 under rate p, so by Ville's inequality the sets ``{p : M_n(p) < 1/α}`` cover the
    true p at every n at once with probability >= confidence. ``log M_n`` (``betaln``) is
    convex in ``log p`` and at most 0 at ``k/n``, so the set is an interval containing k/n:
    each endpoint is the root of ``log M_n(p) = log(1/α)`` on its side (brentq in log p, the
    upper one as the lower one of the failures, so that bounds near 0 or 1 keep their
    precision), moved outward by twice the solver's tolerance (the upper one also by a
    float, for the rounding of 1 - x). The lower bound is exactly 0.0 at ``k == 0``, the
    upper exactly 1.0 at ``k == n``; ``n == 0`` gives (0.0, 1.0).

    The interval at one n is wider than a fixed-n interval (the price of looking at every
    n); it may be intersected over time (``running_intersection``).
    """
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"beta_binomial_cs needs n >= 0 and 0 <= k <= n, got k={k}, n={n}")
    alpha = check_confidence("beta_binomial_cs", confidence)
    a, b = check_prior("beta_binomial_cs", prior)
    if n == 0:
        return 0.0, 1.0
    log_threshold = math.log(1.0 / alpha)
    low = _bb_lower(int(k), int(n), a, b, log_threshold)
    # 1 - x may round inward by an ulp: step one float outward.
    high = math.nextafter(1.0 - _bb_lower(int(n - k), int(n), b, a, log_threshold), 2.0)
    p_hat = k / n
    return max(0.0, min(low, p_hat)), min(1.0, max(high, p_hat))


def _bb_lower(k: int, n: int, a: float, b: float, log_threshold: float) -> float:
    """The lower end of ``{p : log M_n(p) < log_threshold}`` (0.0 when k == 0)."""
    if k == 0:
        return 0.0
    from scipy.optimize import brentq  # imported on first use: scipy is slow to import
    from scipy.special import betaln

    const = float(betaln(a + k, b + n - k) - betaln(a, b)) - log_threshold
    failures = n - k

    def f(u: float) -> float:  # log M_n(e^u) - log(1/α), decreasing for u < log(k/n)
        tail = failures * math.log1p(-math.exp(u)) if failures else 0.0
        return const - k * u - tail

    u_high = math.log(k / n)  # f <= -log(1/α) < 0 there: M_n(k/n) <= 1
    # f(u) >= const - k u, so f > 0 (by k) one unit below const / k.
    u_low = min(u_high, const / k) - 1.0
    xtol = _CS_XTOL / k
    root = float(brentq(f, u_low, u_high, xtol=xtol, rtol=_BRENTQ_RTOL))
    return math.exp(root - 2.0 * (xtol + _BRENTQ_RTOL * abs(root)))


def running_intersection(bounds: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The running intersection of a confidence sequence: entry t is
    ``(max_{s<=t} lo_s, min_{s<=t} hi_s)`` (Howard et al. 2021, Ann. Statist. 49:1055: the
    running intersection of a CS is a CS, never wider than it).

    An empty intersection (``lo > hi``: it happens with probability at most 1 - confidence,
    and only when the CS has missed the true value at some time) is returned as such, so
    that a caller sees it instead of a silently repaired interval.
    """
    out: list[tuple[float, float]] = []
    low, high = -math.inf, math.inf
    for t, (lo_t, hi_t) in enumerate(bounds):
        if not lo_t <= hi_t:  # also rejects NaN
            raise ValueError(
                f"running_intersection needs lo <= hi, got bounds[{t}] = {(lo_t, hi_t)!r}"
            )
        low, high = max(low, float(lo_t)), min(high, float(hi_t))
        out.append((low, high))
    return out


def first_narrow_enough(
    outcomes: Sequence[bool],
    halfwidth: float,
    confidence: float = 0.95,
    prior: tuple[float, float] = (0.5, 0.5),
) -> int | None:
    """The first n (1-based: the number of outcomes seen) at which the beta-binomial
    confidence sequence (``beta_binomial_cs``; Howard et al. 2021, Ann. Statist. 49:1055)
    of the first n outcomes has half-width ``(hi - lo) / 2 <= halfwidth``; None when it
    never does within the outcomes given.

    Stopping there is allowed: the CS covers at every n at once, so it covers at this
    data-dependent n too, and ``beta_binomial_cs(k, n, confidence, prior)`` at the returned
    n is the interval to report.
    """
    if not 0.0 < halfwidth <= 0.5:
        raise ValueError(f"first_narrow_enough needs 0 < halfwidth <= 0.5, got {halfwidth!r}")
    check_confidence("first_narrow_enough", confidence)
    check_prior("first_narrow_enough", prior)
    k = 0
    for n, success in enumerate(outcomes, start=1):
        k += bool(success)
        lo, hi = beta_binomial_cs(k, n, confidence, prior)
        if (hi - lo) / 2.0 <= halfwidth:
            return n
    return None


# --- the betting confidence sequence ---------------------------------------------------------


def betting_cs(
    values: Sequence[float], lo: float = 0.0, hi: float = 1.0, confidence: float = 0.95
) -> tuple[float, float]:
    """Hedged-capital betting confidence sequence for the mean of observations bounded in
    ``[lo, hi]``, at the last observation and intersected over all earlier ones
    (Waudby-Smith & Ramdas 2024, "Estimating means of bounded random variables by
    betting", JRSS-B 86:1, Theorem 3 with the predictable plug-in λ of section 3).

    The values are rescaled to [0, 1]. For a candidate mean m the hedged capital is
    ``θ K⁺_t(m) + (1-θ) K⁻_t(m)``, θ = 1/2, ``K^±_t(m) = Π_{i<=t} (1 ± λ^±_i(m) (x_i - m))``,
    with the predictable bets ``λ_i = sqrt(2 log(2/α) / (σ̂²_{i-1} i log(1+i)))`` (the
    time-uniform PrPl choice: not tuned to a sample size), truncated at ``c/m`` (``K⁺``)
    and ``c/(1-m)`` (``K⁻``), c = 1/2. The plug-ins are regularised running estimates:
    ``μ̂_t = (1/2 + Σ_{i<=t} x_i) / (t+1)``, ``σ̂²_t = (1/4 + Σ_{i<=t} (x_i - μ̂_i)²) / (t+1)``,
    ``σ̂²_0 = 1/4``. The capital is a nonnegative martingale under the true mean, so m is
    excluded once it reaches ``1/α`` at any time t <= n (Ville's inequality): the running
    intersection of the CS, valid at every n at once.

    The set of kept means is found as in ``intervals.betting_interval``: a grid of 201
    candidates, then each bound narrowed twice on a grid of 50 steps, the rejected end of
    the last bracket returned (resolution 2e-6 of the range; memory near 4 M floats). If no
    candidate survives (the intersection is empty, probability <= α), ``(lo, hi)`` is
    returned. The bets are predictable, so the result depends on the ORDER of the values:
    pass them in the order they were observed.
    """
    alpha = check_confidence("betting_cs", confidence)
    z = betting.bounded_values("betting_cs", values, lo, hi)
    lam = _prpl_bets(z, alpha)
    log_threshold = math.log(1.0 / alpha)
    return betting.kept_interval(
        lambda grid: betting.capital_rejected(z, lam, grid, log_threshold, "sum"), lo, hi
    )


def _prpl_bets(z: FloatArray, alpha: float) -> FloatArray:
    """The predictable plug-in bets λ_1..λ_n of ``betting_cs`` (before truncation)."""
    t = np.arange(1, z.size + 1, dtype=np.float64)
    mu_hat = (0.5 + np.cumsum(z)) / (t + 1.0)
    sigma2 = (0.25 + np.cumsum((z - mu_hat) ** 2)) / (t + 1.0)
    sigma2_prev = np.concatenate(([0.25], sigma2[:-1]))
    bets: FloatArray = np.sqrt(2.0 * math.log(2.0 / alpha) / (sigma2_prev * t * np.log1p(t)))
    return bets
