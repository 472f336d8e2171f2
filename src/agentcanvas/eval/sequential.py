"""Anytime-valid confidence sequences, a sequential paired test and a paired-sample planner.

Pure functions of counts or values (numpy, scipy and math only); every number is a plain
``float`` or ``int``. A *confidence sequence* (CS) is a sequence of intervals that covers
the true value at every time simultaneously with probability >= confidence, so it may be
looked at after every episode and the run stopped whenever it is narrow enough; a fixed-n
interval (``intervals.wilson``) looked at that way misses far more often than 1 - confidence.
The sequential test may likewise be checked after every pair. Both rest on Ville's
inequality: a nonnegative martingale of mean 1 (an e-process) reaches ``1/α`` with
probability at most ``α``, at any time.

- ``beta_binomial_cs``: the beta-binomial mixture martingale for a Bernoulli rate (Robbins
  1970, "Statistical methods related to the law of the iterated logarithm", Ann. Math.
  Statist. 41:1397; Howard, Ramdas, McAuliffe & Sekhon 2021, "Time-uniform, nonparametric,
  nonasymptotic confidence sequences", Ann. Statist. 49:1055, section 3 and Proposition 6);
  ``running_intersection`` of any CS (its running intersection is a CS too);
  ``first_narrow_enough``: the first episode at which that CS is as narrow as asked;
- ``betting_cs``: the hedged capital process with predictable plug-in bets for the mean of
  a bounded metric (Waudby-Smith & Ramdas 2024, "Estimating means of bounded random
  variables by betting", JRSS-B 86:1, Theorem 3 and the PrPl λ of section 3);
- ``paired_sequential_test`` / ``decide_paired``: an anytime-valid McNemar, the same
  beta-binomial mixture tested at 1/2 on the discordant pairs (Robbins 1970; Howard et
  al. 2021);
- ``paired_sample_size``: the fixed-n McNemar planner of Connor (1987, "Sample size for
  testing differences in proportions for the paired-sample design", Biometrics 43:207);
  ``paired_sequential_expected_n``: the pairs the sequential test uses, by seeded
  simulation.

``SEQUENTIAL_METHOD_NAMES`` maps a method id (the ``method`` field of the results) to its
name. Validity is measured, not assumed: ``tests/eval/test_sequential.py`` checks
time-uniform coverage and type-I error by seeded simulation, and ``bench/sequential.py``
prints the larger sweep.

scipy is imported inside the functions that use it: ``scipy.special`` is slow to import,
and most processes that import this module never call them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from agentcanvas.eval.intervals import _check_confidence, _refine, _z

__all__ = [
    "DECISIONS",
    "SEQUENTIAL_INFLATION",
    "SEQUENTIAL_METHOD_NAMES",
    "PairedStop",
    "PlanResult",
    "SequentialDecision",
    "SequentialPlan",
    "beta_binomial_cs",
    "betting_cs",
    "decide_paired",
    "first_narrow_enough",
    "paired_sample_size",
    "paired_sequential_expected_n",
    "paired_sequential_test",
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

# Outcomes of paired_sequential_test (the first three) and decide_paired.
B_BETTER: Final = "B better"
B_WORSE: Final = "B worse"
UNDECIDED: Final = "undecided"
NOT_DISTINGUISHABLE: Final = "not distinguishable"
DECISIONS: Final = (B_BETTER, B_WORSE, UNDECIDED, NOT_DISTINGUISHABLE)

SEQUENTIAL_INFLATION: Final = (
    "the planned n is for a fixed-n McNemar test looked at once; the anytime-valid test "
    "(paired_sequential_test, checked after every pair) pays for optional stopping: at the "
    "same effect it needs more pairs to reach the same power, though it often stops well "
    "before the fixed n when the effect is larger than planned "
    "(paired_sequential_expected_n simulates it)"
)

# beta_binomial_cs: the root in u = log p is found to _CS_XTOL / k (about _CS_XTOL in log M,
# whose slope in u is at most k there), and the bound then moved outward by twice brentq's
# tolerance, so that the returned interval contains {p : M_n(p) < 1/α}.
_CS_XTOL: Final = 1e-12
_BRENTQ_RTOL: Final = 4.0 * 2.220446049250313e-16  # brentq's smallest (and default) rtol

# betting_cs: as intervals.betting_interval (coarse grid, refined twice by intervals._refine),
# with the truncation c of the bets and the weight θ of the upward bet.
_BETTING_GRID: Final = 200
_BETTING_MAX_CELLS: Final = 4_000_000
_BETTING_TRUNCATION: Final = 0.5
_BETTING_THETA: Final = 0.5

# paired_sequential_expected_n: pairs simulated per block (bounded memory).
_SIM_MAX_CELLS: Final = 2_000_000

FloatArray = npt.NDArray[np.float64]


def _check_alpha(name: str, alpha: float) -> float:
    if not 0.0 < alpha < 1.0:  # also rejects NaN
        raise ValueError(f"{name} needs 0 < alpha < 1, got alpha={alpha!r}")
    return alpha


def _check_prior(name: str, prior: tuple[float, float]) -> tuple[float, float]:
    a, b = prior
    if not (math.isfinite(a) and math.isfinite(b) and a > 0.0 and b > 0.0):
        raise ValueError(f"{name} needs a prior Beta(a, b) with a, b > 0, got prior={prior!r}")
    return float(a), float(b)


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
    alpha = _check_confidence("beta_binomial_cs", confidence)
    a, b = _check_prior("beta_binomial_cs", prior)
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
    _check_confidence("first_narrow_enough", confidence)
    _check_prior("first_narrow_enough", prior)
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
    alpha = _check_confidence("betting_cs", confidence)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"betting_cs needs finite lo < hi, got lo={lo!r}, hi={hi!r}")
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        raise ValueError("betting_cs needs at least one value, got none")
    outside = ~((x >= lo) & (x <= hi))  # NaN is outside too
    if outside.any():
        i = int(np.argmax(outside))
        raise ValueError(
            f"betting_cs: values[{i}] = {float(x[i])!r} is outside [lo, hi] = [{lo!r}, {hi!r}]"
        )
    z = np.clip((x - lo) / (hi - lo), 0.0, 1.0)
    lam = _prpl_bets(z, alpha)
    log_threshold = math.log(1.0 / alpha)

    def rejected(grid: FloatArray) -> np.ndarray[Any, Any]:
        return _betting_cs_rejected(z, lam, grid, log_threshold)

    coarse = np.linspace(0.0, 1.0, _BETTING_GRID + 1)
    kept = np.flatnonzero(~rejected(coarse))
    if kept.size == 0:  # empty intersection (probability <= α): stay conservative
        return lo, hi
    low01 = _refine(rejected, coarse, int(kept[0]), -1)
    high01 = _refine(rejected, coarse, int(kept[-1]), +1)
    width = hi - lo
    return max(lo, lo + low01 * width), min(hi, lo + high01 * width)


def _prpl_bets(z: FloatArray, alpha: float) -> FloatArray:
    """The predictable plug-in bets λ_1..λ_n of ``betting_cs`` (before truncation)."""
    t = np.arange(1, z.size + 1, dtype=np.float64)
    mu_hat = (0.5 + np.cumsum(z)) / (t + 1.0)
    sigma2 = (0.25 + np.cumsum((z - mu_hat) ** 2)) / (t + 1.0)
    sigma2_prev = np.concatenate(([0.25], sigma2[:-1]))
    bets: FloatArray = np.sqrt(2.0 * math.log(2.0 / alpha) / (sigma2_prev * t * np.log1p(t)))
    return bets


def _betting_cs_rejected(
    z: FloatArray, lam: FloatArray, grid: FloatArray, log_threshold: float
) -> np.ndarray[Any, Any]:
    """Which candidate means the hedged capital rejects at some t <= n; the grid is taken in
    row blocks so that memory stays near ``_BETTING_MAX_CELLS`` floats whatever n is."""
    c = _BETTING_TRUNCATION
    log_theta, log_rest = math.log(_BETTING_THETA), math.log(1.0 - _BETTING_THETA)
    out = np.empty(grid.size, dtype=bool)
    rows = max(1, _BETTING_MAX_CELLS // max(z.size, 1))
    for start in range(0, grid.size, rows):
        m = grid[start : start + rows]
        with np.errstate(divide="ignore"):
            cap_up = c / m  # inf at m = 0: the bet is then λ itself
            cap_down = c / (1.0 - m)
        diff = z[None, :] - m[:, None]
        # Each factor is >= 1 - c > 0 (|λ (x - m)| <= c), so log1p never sees -1.
        up = np.minimum(lam[None, :], cap_up[:, None])
        up *= diff
        np.log1p(up, out=up)
        np.cumsum(up, axis=1, out=up)
        up += log_theta
        down = np.minimum(lam[None, :], cap_down[:, None])
        down *= diff
        np.negative(down, out=down)
        np.log1p(down, out=down)
        np.cumsum(down, axis=1, out=down)
        down += log_rest
        np.logaddexp(up, down, out=up)  # log of the hedged capital
        out[start : start + rows] = up.max(axis=1) >= log_threshold
    return out


# --- the sequential paired test --------------------------------------------------------------


@dataclass(frozen=True)
class SequentialDecision:
    """The anytime-valid McNemar after some pairs: ``evidence`` is the e-value M (the
    mixture martingale), rejected when ``evidence >= threshold = 1/α``."""

    decision: str  # "B better", "B worse" or "undecided"
    evidence: float  # the e-value M (inf when it overflows a float; log_evidence is exact)
    log_evidence: float
    threshold: float
    discordant: int  # b_wins + a_wins
    method: str  # a key of SEQUENTIAL_METHOD_NAMES


@dataclass(frozen=True)
class PairedStop:
    """Where ``decide_paired`` stopped: ``stop`` pairs were looked at (the 1-based index of
    the pair at which the test rejected, else every pair allowed by the data and the cap)."""

    stop: int
    decision: str  # "B better", "B worse" or "not distinguishable"
    test: SequentialDecision  # the test after the ``stop`` pairs


def _log_evidence_fair(
    b_wins: Any, a_wins: Any, prior: tuple[float, float]
) -> Any:  # float or array, as given
    """``log M`` of the beta-binomial mixture against q = 1/2 (vectorised)."""
    from scipy.special import betaln  # imported on first use: scipy is slow to import

    a, b = prior
    return betaln(a + b_wins, b + a_wins) - betaln(a, b) + (b_wins + a_wins) * math.log(2.0)


def paired_sequential_test(
    b_wins: int, a_wins: int, alpha: float = 0.05, prior: tuple[float, float] = (0.5, 0.5)
) -> SequentialDecision:
    """Anytime-valid two-sided McNemar test on the discordant pairs: ``b_wins`` pairs where
    A failed and B succeeded, ``a_wins`` where A succeeded and B failed (the beta-binomial
    mixture e-process of Robbins 1970, Ann. Math. Statist. 41:1397; Howard, Ramdas,
    McAuliffe & Sekhon 2021, Ann. Statist. 49:1055).

    Under H0 (equal success rates) each discordant pair is a B-win with probability 1/2,
    so with the prior Beta(a, b) on that probability (default a = b = 1/2)
    ``M = B(a + b_wins, b + a_wins) / B(a, b) / 0.5^(b_wins + a_wins)`` is a nonnegative
    martingale of mean 1 (concordant pairs leave it unchanged), and rejecting when
    ``M >= 1/α`` has type-I error <= α however often it is checked (Ville's inequality).
    Rejected with ``b_wins > a_wins``: "B better"; with ``b_wins < a_wins``: "B worse";
    otherwise "undecided".
    """
    if b_wins < 0 or a_wins < 0:
        raise ValueError(
            f"paired_sequential_test needs b_wins, a_wins >= 0, got {b_wins}, {a_wins}"
        )
    alpha = _check_alpha("paired_sequential_test", alpha)
    prior = _check_prior("paired_sequential_test", prior)
    log_m = float(_log_evidence_fair(b_wins, a_wins, prior))
    return _decision(int(b_wins), int(a_wins), log_m, alpha)


def _decision(b_wins: int, a_wins: int, log_m: float, alpha: float) -> SequentialDecision:
    rejected = log_m >= math.log(1.0 / alpha)
    if rejected and b_wins > a_wins:
        decision = B_BETTER
    elif rejected and b_wins < a_wins:
        decision = B_WORSE
    else:
        decision = UNDECIDED
    evidence = math.exp(log_m) if log_m < 709.0 else math.inf
    return SequentialDecision(
        decision=decision,
        evidence=evidence,
        log_evidence=log_m,
        threshold=1.0 / alpha,
        discordant=b_wins + a_wins,
        method="paired-sequential",
    )


def decide_paired(
    pairs: Sequence[tuple[bool, bool]],
    alpha: float = 0.05,
    cap: int | None = None,
    prior: tuple[float, float] = (0.5, 0.5),
) -> PairedStop:
    """Walk the pairs ``(a_success, b_success)`` in order, running
    ``paired_sequential_test`` (the beta-binomial mixture e-process; Robbins 1970; Howard et
    al. 2021, Ann. Statist. 49:1055) after each, and stop at the first pair at which it
    rejects: "B better" or "B worse". When the data or the ``cap`` (most pairs to look at)
    run out first: "not distinguishable". Type-I error <= α whatever the stopping rule.
    """
    alpha = _check_alpha("decide_paired", alpha)
    prior = _check_prior("decide_paired", prior)
    if cap is not None and cap < 1:
        raise ValueError(f"decide_paired needs cap >= 1 or None, got cap={cap!r}")
    used = pairs if cap is None else pairs[:cap]
    table = np.asarray(used, dtype=bool).reshape(-1, 2)
    if table.shape[0] != len(used):
        raise ValueError("decide_paired needs pairs of (a_success, b_success)")
    a_ok, b_ok = table[:, 0], table[:, 1]
    b_cum = np.cumsum(b_ok & ~a_ok)
    a_cum = np.cumsum(a_ok & ~b_ok)
    if table.shape[0]:
        log_m = np.asarray(_log_evidence_fair(b_cum, a_cum, prior), dtype=np.float64)
        hits = np.flatnonzero(log_m >= math.log(1.0 / alpha))
    else:
        log_m, hits = np.zeros(0), np.zeros(0, dtype=np.int64)
    if hits.size:
        i = int(hits[0])
        test = _decision(int(b_cum[i]), int(a_cum[i]), float(log_m[i]), alpha)
        if test.decision != UNDECIDED:
            return PairedStop(stop=i + 1, decision=test.decision, test=test)
        # b_wins == a_wins never rejects (M <= 1 there), so this is not reached.
    stop = table.shape[0]
    b_end = int(b_cum[-1]) if stop else 0
    a_end = int(a_cum[-1]) if stop else 0
    test = paired_sequential_test(b_end, a_end, alpha, prior)
    return PairedStop(stop=stop, decision=NOT_DISTINGUISHABLE, test=test)


# --- planning --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanResult:
    """Pairs needed by a fixed-n two-sided McNemar test (``paired_sample_size``)."""

    n: int
    method: str  # a key of SEQUENTIAL_METHOD_NAMES
    assumption: str
    discordance: float  # ψ = P(discordant pair) used
    delta: float  # p_B - p_A
    power: float
    alpha: float
    sequential_inflation: str  # what changes when the test is checked after every pair


def _paired_cells(
    name: str, p_a: float, delta: float, discordance: float | None
) -> tuple[float, float, str]:
    """``(P(B-win), P(A-win), assumption)`` of a paired design, after validation."""
    if not 0.0 < p_a < 1.0:
        raise ValueError(f"{name} needs 0 < p_a < 1, got p_a={p_a!r}")
    p_b = p_a + delta
    if not (delta != 0.0 and 0.0 < p_b < 1.0):
        raise ValueError(
            f"{name} needs delta != 0 and 0 < p_a + delta < 1, got delta={delta!r} "
            f"(p_a + delta = {p_b!r})"
        )
    if discordance is None:
        psi = p_a * (1.0 - p_b) + p_b * (1.0 - p_a)
        assumption = (
            "discordance from independent A and B within a pair: "
            f"psi = p_a (1 - p_b) + p_b (1 - p_a) = {psi:.4g}; two agents run on the same "
            "episodes are usually positively correlated, which lowers psi and the n needed, "
            "so this n is conservative"
        )
    else:
        psi = float(discordance)
        assumption = f"discordance given: psi = P(A and B differ on a pair) = {psi:.4g}"
    b_win, a_win = (psi + delta) / 2.0, (psi - delta) / 2.0
    tol = 1e-12
    if not (abs(delta) < psi <= 1.0) or not (
        b_win <= min(p_b, 1.0 - p_a) + tol and a_win <= min(p_a, 1.0 - p_b) + tol
    ):
        raise ValueError(
            f"{name} needs |delta| < discordance <= 1 with P(B-win) = (discordance + delta)/2 "
            f"<= min(p_b, 1 - p_a) and P(A-win) = (discordance - delta)/2 <= min(p_a, 1 - p_b),"
            f" got discordance={psi!r}, delta={delta!r}, p_a={p_a!r}"
        )
    return b_win, a_win, assumption


def paired_sample_size(
    p_a: float,
    delta: float,
    power: float = 0.8,
    alpha: float = 0.05,
    discordance: float | None = None,
) -> PlanResult:
    """Pairs for a two-sided McNemar test (asymptotic, no continuity correction) at level α
    to detect ``delta = p_B - p_A`` with the given power (Connor 1987, "Sample size for
    testing differences in proportions for the paired-sample design", Biometrics 43:207,
    p. 209): ``n = [z_{1-α/2} sqrt(ψ) + z_{power} sqrt(ψ - δ²)]² / δ²``, rounded up, with
    ψ = P(discordant pair) and δ = P(B-win) - P(A-win) = delta.

    ``discordance`` is ψ; when it is not given, A and B are taken as independent within a
    pair, ``ψ = p_a (1 - p_b) + p_b (1 - p_a)`` (said in ``assumption``): conservative when
    their outcomes are positively correlated, as they are on shared episodes. Needs
    0 < p_a < 1, 0 < p_a + delta < 1, |delta| < ψ <= 1 and cells that fit the marginals.
    """
    b_win, a_win, assumption = _paired_cells("paired_sample_size", p_a, delta, discordance)
    if not 0.0 < power < 1.0:
        raise ValueError(f"paired_sample_size needs 0 < power < 1, got power={power!r}")
    alpha = _check_alpha("paired_sample_size", alpha)
    psi, d = b_win + a_win, b_win - a_win
    z_power = _z(2.0 * (1.0 - power))  # the normal quantile at `power`
    root = _z(alpha) * math.sqrt(psi) + z_power * math.sqrt(max(0.0, psi - d * d))
    n = math.ceil(root * root / (d * d) - 1e-9)  # 1e-9: an exact integer is not bumped
    return PlanResult(
        n=max(1, n),
        method="connor",
        assumption=assumption,
        discordance=psi,
        delta=float(delta),
        power=float(power),
        alpha=alpha,
        sequential_inflation=SEQUENTIAL_INFLATION,
    )


@dataclass(frozen=True)
class SequentialPlan:
    """How many pairs the anytime-valid McNemar used in simulation
    (``paired_sequential_expected_n``); a run that never rejected counts as ``cap``."""

    fixed_n: int  # paired_sample_size's n at the same power
    cap: int  # most pairs a simulated run looked at
    mean_n: float  # mean of min(stop, cap)
    median_n: float  # median of min(stop, cap)
    n_at_power: int | None  # pairs by which `power` of the runs had rejected (None: not by cap)
    power_at_cap: float  # fraction of runs that rejected by cap, in the right direction
    power_at_fixed_n: float  # ... by fixed_n
    wrong_sign: float  # fraction of runs that rejected in the wrong direction
    reps: int
    seed: int
    method: str  # a key of SEQUENTIAL_METHOD_NAMES


def paired_sequential_expected_n(
    p_a: float,
    delta: float,
    power: float = 0.8,
    alpha: float = 0.05,
    discordance: float | None = None,
    cap: int | None = None,
    reps: int = 2000,
    seed: int = 0,
    prior: tuple[float, float] = (0.5, 0.5),
) -> SequentialPlan:
    """Pairs the anytime-valid McNemar (``paired_sequential_test`` checked after every pair,
    ``decide_paired``; Howard et al. 2021, Ann. Statist. 49:1055) uses under the paired
    design of ``paired_sample_size`` (Connor 1987, Biometrics 43:207), by seeded simulation
    (``numpy.random.default_rng(seed)``).

    ``reps`` runs of up to ``cap`` pairs (default 4 x the fixed-n plan's n); each pair is a
    B-win with probability ``(ψ + δ)/2``, an A-win with ``(ψ - δ)/2``, concordant
    otherwise. Gives the mean and median pairs used (a run that never rejects counts as
    ``cap``), the pairs by which ``power`` of the runs had rejected in the right direction
    (compare with the fixed n), and the power at the cap and at the fixed n.
    """
    plan = paired_sample_size(p_a, delta, power, alpha, discordance)
    prior = _check_prior("paired_sequential_expected_n", prior)
    cap = 4 * plan.n if cap is None else cap
    if cap < 1 or reps < 1:
        raise ValueError(
            f"paired_sequential_expected_n needs cap >= 1 and reps >= 1, got cap={cap}, reps={reps}"
        )
    b_win = (plan.discordance + plan.delta) / 2.0
    a_win = (plan.discordance - plan.delta) / 2.0
    rng = np.random.default_rng(seed)
    stops = _simulate_stops(rng, reps, cap, b_win, a_win, alpha, prior)
    right = np.sign(plan.delta)
    good = (stops[:, 0] <= cap) & (stops[:, 1] == right)
    bad = (stops[:, 0] <= cap) & (stops[:, 1] == -right)
    used = np.minimum(stops[:, 0], cap).astype(np.float64)
    rejected_at = np.sort(stops[good, 0])
    need = math.ceil(power * reps)
    n_at_power = int(rejected_at[need - 1]) if rejected_at.size >= need else None
    return SequentialPlan(
        fixed_n=plan.n,
        cap=cap,
        mean_n=float(used.mean()),
        median_n=float(np.median(used)),
        n_at_power=n_at_power,
        power_at_cap=float(good.mean()),
        power_at_fixed_n=float((good & (stops[:, 0] <= plan.n)).mean()),
        wrong_sign=float(bad.mean()),
        reps=reps,
        seed=seed,
        method="paired-sequential-simulation",
    )


def _simulate_stops(
    rng: np.random.Generator,
    reps: int,
    cap: int,
    b_win: float,
    a_win: float,
    alpha: float,
    prior: tuple[float, float],
) -> npt.NDArray[np.int64]:
    """Per run: (1-based pair at which the test rejected or cap + 1, sign of b - a there)."""
    out = np.empty((reps, 2), dtype=np.int64)
    rows = max(1, _SIM_MAX_CELLS // cap)
    log_threshold = math.log(1.0 / alpha)
    for start in range(0, reps, rows):
        block = min(rows, reps - start)
        u = rng.random((block, cap))
        b_cum = np.cumsum(u < b_win, axis=1)
        a_cum = np.cumsum((u >= b_win) & (u < b_win + a_win), axis=1)
        log_m = _log_evidence_fair(b_cum, a_cum, prior)
        hit = log_m >= log_threshold
        first = np.argmax(hit, axis=1)
        any_hit = hit[np.arange(block), first]
        sign = np.sign(b_cum[np.arange(block), first] - a_cum[np.arange(block), first])
        out[start : start + block, 0] = np.where(any_hit, first + 1, cap + 1)
        out[start : start + block, 1] = np.where(any_hit, sign, 0)
    return out
