"""eval/sequential.py: reference values, and time-uniform validity by seeded simulation.

A confidence sequence must cover the true value at EVERY time at once with probability
>= 0.95, and the sequential test must keep its type-I error <= α when it is checked after
every pair: both are measured here by seeded simulation (the fraction of sequences that
EVER miss / reject, checked after each episode), with a Monte Carlo slack of three
standard errors. A fixed-n Wilson interval and a fixed-n McNemar looked at after every
episode are shown to break that bound in the same simulation: that is why the sequential
methods exist. ``bench/sequential.py`` runs the larger sweep and prints the table.
"""

from __future__ import annotations

import itertools
import math
from functools import cache

import numpy as np
import numpy.typing as npt
import pytest
from scipy.special import betaln, ndtri
from statsmodels.stats.contingency_tables import mcnemar

from agentcanvas.eval.intervals import wilson
from agentcanvas.eval.paired_sequential import DECISIONS, decide_paired, paired_sequential_test
from agentcanvas.eval.sample_size import (
    SEQUENTIAL_INFLATION,
    paired_sample_size,
    paired_sequential_expected_n,
)
from agentcanvas.eval.sequential import (
    SEQUENTIAL_METHOD_NAMES,
    beta_binomial_cs,
    betting_cs,
    first_narrow_enough,
    running_intersection,
)

ALPHA = 0.05


def _slack(reps: int, alpha: float = ALPHA) -> float:
    """Three Monte Carlo standard errors of a rate alpha over reps sequences."""
    return 3.0 * math.sqrt(alpha * (1.0 - alpha) / reps)


def test_method_names() -> None:
    assert set(SEQUENTIAL_METHOD_NAMES) == {
        "beta-binomial-cs", "betting-cs", "paired-sequential", "connor",
        "paired-sequential-simulation",
    }  # fmt: skip
    assert all(isinstance(v, str) and v for v in SEQUENTIAL_METHOD_NAMES.values())


# --- beta_binomial_cs ----------------------------------------------------------------------

GRID_KN = [
    (k, n)
    for n in (1, 2, 5, 10, 30, 100, 1000, 100_000)
    for k in sorted({0, 1, n // 10, n // 3, n // 2, n - 1, n})
]


def _log_mixture(k: int, n: int, p: float, prior: tuple[float, float] = (0.5, 0.5)) -> float:
    """log M_n(p), written out independently of the module."""
    a, b = prior
    return float(
        betaln(a + k, b + n - k) - betaln(a, b) - k * math.log(p) - (n - k) * math.log1p(-p)
    )


@pytest.mark.parametrize(("k", "n"), GRID_KN)
def test_beta_binomial_cs_basics(k: int, n: int) -> None:
    lo, hi = beta_binomial_cs(k, n)
    assert isinstance(lo, float) and isinstance(hi, float)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    assert (lo == 0.0) == (k == 0) and (hi == 1.0) == (k == n)
    # Wider than the fixed-n Wilson interval at the same n (the price of looking at every n).
    w_lo, w_hi = wilson(k, n)
    assert lo <= w_lo and hi >= w_hi and (hi - lo) > (w_hi - w_lo)
    # The endpoints solve the defining equation log M_n(p) = log(1/α), just outside the set.
    threshold = math.log(1 / ALPHA)
    for bound in (lo, hi):
        if 0.0 < bound < 1.0:
            assert _log_mixture(k, n, bound) == pytest.approx(threshold, abs=1e-6)
            assert _log_mixture(k, n, bound) >= threshold - 1e-9
    # Mirror symmetry of the Jeffreys prior.
    m_lo, m_hi = beta_binomial_cs(n - k, n)
    assert (m_lo, m_hi) == pytest.approx((1 - hi, 1 - lo), abs=1e-12)


def test_beta_binomial_cs_shrinks_and_edges() -> None:
    assert beta_binomial_cs(0, 0) == (0.0, 1.0)
    widths = [beta_binomial_cs(n // 4, n) for n in (4, 40, 400, 4000, 40_000)]
    spans = [hi - lo for lo, hi in widths]
    assert all(a > b for a, b in itertools.pairwise(spans))
    assert spans[-1] < 0.02
    # n = 1, k = 0, Jeffreys prior: M_1(p) = (1/2) / (1 - p) < 20  <=>  p < 0.975.
    assert beta_binomial_cs(0, 1) == pytest.approx((0.0, 0.975), abs=1e-9)
    # A higher confidence or a flat prior changes the interval sensibly.
    assert beta_binomial_cs(30, 100, 0.99)[1] > beta_binomial_cs(30, 100, 0.95)[1]
    lo, hi = beta_binomial_cs(30, 100, prior=(1.0, 1.0))
    assert 0.0 < lo < 0.3 < hi < 1.0


def test_beta_binomial_cs_rejects_bad_input() -> None:
    for k, n in [(1, 0), (-1, 5), (6, 5), (0, -1)]:
        with pytest.raises(ValueError, match=r"k=.*n="):
            beta_binomial_cs(k, n)
    for confidence in (0.0, 1.0, math.nan):
        with pytest.raises(ValueError, match="confidence"):
            beta_binomial_cs(1, 5, confidence)
    for prior in [(0.0, 1.0), (1.0, -1.0), (math.inf, 1.0)]:
        with pytest.raises(ValueError, match="prior"):
            beta_binomial_cs(1, 5, prior=prior)


@cache
def _cs_table(method: str, n: int, k: int) -> tuple[float, float]:
    return beta_binomial_cs(k, n) if method == "cs" else wilson(k, n)


def _ever_missed(method: str, successes: npt.NDArray[np.bool_], p: float) -> npt.NDArray[np.bool_]:
    """Per sequence: whether the interval at some n (checked after every episode) missed p.
    The interval is the module's own, computed once per (n, k) visited."""
    reps, length = successes.shape
    k = np.cumsum(successes, axis=1)
    n = np.broadcast_to(np.arange(1, length + 1), k.shape)
    pairs, inverse = np.unique(
        np.stack([n.ravel(), k.ravel()], axis=1), axis=0, return_inverse=True
    )
    miss = np.array(
        [not (lo <= p <= hi) for lo, hi in (_cs_table(method, int(a), int(b)) for a, b in pairs)]
    )
    return np.asarray(miss[inverse.ravel()].reshape(reps, length).any(axis=1), dtype=bool)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_beta_binomial_cs_time_uniform_coverage(p: float) -> None:
    reps, length = 1000, 500
    rng = np.random.default_rng(int(p * 100))
    successes = rng.random((reps, length)) < p
    cs_miss = float(_ever_missed("cs", successes, p).mean())
    wilson_miss = float(_ever_missed("wilson", successes, p).mean())
    print(f"p={p}: CS ever missed {cs_miss:.3f}, Wilson checked every episode {wilson_miss:.3f}")
    assert cs_miss <= ALPHA + _slack(reps)
    # The fixed-n interval, looked at after every episode, misses far more often than α.
    assert wilson_miss > ALPHA + _slack(reps)


def test_running_intersection() -> None:
    bounds = [(0.1, 0.9), (0.2, 0.95), (0.15, 0.7), (0.3, 0.8)]
    assert running_intersection(bounds) == [(0.1, 0.9), (0.2, 0.9), (0.2, 0.7), (0.3, 0.7)]
    assert running_intersection([]) == []
    # An empty intersection is shown, not repaired.
    assert running_intersection([(0.0, 0.2), (0.5, 1.0)])[-1] == (0.5, 0.2)
    with pytest.raises(ValueError, match=r"bounds\[1\]"):
        running_intersection([(0.0, 1.0), (0.6, 0.4)])


def test_first_narrow_enough() -> None:
    rng = np.random.default_rng(4)
    outcomes = (rng.random(3000) < 0.3).tolist()
    for halfwidth in (0.2, 0.1, 0.05):
        n = first_narrow_enough(outcomes, halfwidth)
        assert n is not None
        lo, hi = beta_binomial_cs(sum(outcomes[:n]), n)
        assert (hi - lo) / 2 <= halfwidth
        lo, hi = beta_binomial_cs(sum(outcomes[: n - 1]), n - 1)
        assert (hi - lo) / 2 > halfwidth  # the first such n
    assert first_narrow_enough(outcomes[:20], 0.01) is None
    assert first_narrow_enough([], 0.1) is None
    for bad in (0.0, -0.1, 0.6, math.nan):
        with pytest.raises(ValueError, match="halfwidth"):
            first_narrow_enough(outcomes, bad)


# --- betting_cs ----------------------------------------------------------------------------


def test_betting_cs_basics() -> None:
    rng = np.random.default_rng(5)
    x = rng.beta(2.0, 5.0, size=400)
    lo, hi = betting_cs(x.tolist())
    assert isinstance(lo, float) and isinstance(hi, float)
    assert 0.0 <= lo < float(x.mean()) < hi <= 1.0
    # Rescaling the data and the range rescales the interval.
    lo2, hi2 = betting_cs((10 * x - 3).tolist(), -3.0, 7.0)
    assert (lo2, hi2) == pytest.approx((10 * lo - 3, 10 * hi - 3), abs=1e-9)
    # It shrinks with n, and one value gives a wide but valid interval.
    lo_small, hi_small = betting_cs(x[:40].tolist())
    assert hi_small - lo_small > hi - lo
    assert betting_cs([0.5])[0] <= 0.5 <= betting_cs([0.5])[1]
    with pytest.raises(ValueError, match="at least one"):
        betting_cs([])
    with pytest.raises(ValueError, match=r"values\[1\]"):
        betting_cs([0.5, 1.5])
    with pytest.raises(ValueError, match="lo < hi"):
        betting_cs([0.5], 1.0, 0.0)
    with pytest.raises(ValueError, match="confidence"):
        betting_cs([0.5], confidence=1.0)


@pytest.mark.parametrize(("mean", "kind"), [(0.1, "beta"), (0.5, "beta"), (0.8, "bernoulli")])
def test_betting_cs_time_uniform_coverage(mean: float, kind: str) -> None:
    # betting_cs is the running intersection up to the last value, so it misses the mean at
    # the end exactly when the CS missed it at some time: one call per sequence.
    reps, length = 200, 300
    rng = np.random.default_rng(int(mean * 100) + len(kind))
    if kind == "beta":
        data = rng.beta(4 * mean, 4 * (1 - mean), size=(reps, length))
    else:
        data = (rng.random((reps, length)) < mean).astype(np.float64)
    missed = [not (lo <= mean <= hi) for lo, hi in (betting_cs(row.tolist()) for row in data)]
    miss = sum(missed) / reps
    print(f"{kind} mean={mean}: betting CS ever missed {miss:.3f}")
    assert miss <= ALPHA + _slack(reps)


# --- the sequential paired test ------------------------------------------------------------


def test_paired_sequential_test_values() -> None:
    # M = B(1/2 + b, 1/2 + a) / B(1/2, 1/2) * 2^(a + b), written out.
    for b, a in [(0, 0), (3, 1), (20, 5), (5, 20), (60, 40), (1000, 1000)]:
        got = paired_sequential_test(b, a)
        ref = betaln(0.5 + b, 0.5 + a) - betaln(0.5, 0.5) + (a + b) * math.log(2)
        assert got.log_evidence == pytest.approx(ref, rel=1e-12, abs=1e-12)
        assert got.evidence == pytest.approx(math.exp(ref), rel=1e-12)
        assert got.threshold == pytest.approx(20.0) and got.discordant == a + b
        assert got.method == "paired-sequential" and got.decision in DECISIONS
    assert paired_sequential_test(0, 0).evidence == 1.0
    assert paired_sequential_test(20, 5).decision == "undecided"  # M = 19.5 < 20
    assert paired_sequential_test(21, 5).decision == "B better"
    assert paired_sequential_test(5, 21).decision == "B worse"
    assert paired_sequential_test(100, 100).decision == "undecided"
    assert paired_sequential_test(21, 5, alpha=0.01).decision == "undecided"
    huge = paired_sequential_test(5000, 0)
    assert huge.evidence == math.inf and huge.log_evidence > 709
    with pytest.raises(ValueError, match="b_wins"):
        paired_sequential_test(-1, 2)
    with pytest.raises(ValueError, match="alpha"):
        paired_sequential_test(1, 2, alpha=0.0)
    with pytest.raises(ValueError, match="prior"):
        paired_sequential_test(1, 2, prior=(0.0, 1.0))


def test_decide_paired_walks_in_order() -> None:
    pairs = [(False, True)] * 30 + [(True, False)] * 30
    stop = decide_paired(pairs)
    expected = next(i for i in range(1, 31) if paired_sequential_test(i, 0).decision != "undecided")
    assert stop.stop == expected and stop.decision == "B better"
    assert stop.test == paired_sequential_test(expected, 0)
    # Concordant pairs add nothing; A-wins first gives "B worse".
    mirrored = [(True, True), (False, False)] + [(True, False)] * 30
    assert decide_paired(mirrored).decision == "B worse"
    assert decide_paired(mirrored).stop == expected + 2
    # The cap or the data run out first.
    capped = decide_paired(pairs, cap=3)
    assert (capped.stop, capped.decision) == (3, "not distinguishable")
    assert capped.test == paired_sequential_test(3, 0)
    assert decide_paired([]).stop == 0 and decide_paired([]).decision == "not distinguishable"
    with pytest.raises(ValueError, match="cap"):
        decide_paired(pairs, cap=0)
    with pytest.raises(ValueError, match="alpha"):
        decide_paired(pairs, alpha=1.5)


def _paired_data(
    rng: np.random.Generator, reps: int, length: int, b_win: npt.ArrayLike, a_win: npt.ArrayLike
) -> npt.NDArray[np.bool_]:
    """reps x length x 2 (a_success, b_success): B-win w.p. b_win, A-win w.p. a_win, and
    the concordant rest split evenly between both-succeed and both-fail."""
    b_w = np.asarray(b_win, dtype=np.float64).reshape(-1, 1)
    a_w = np.asarray(a_win, dtype=np.float64).reshape(-1, 1)
    u = rng.random((reps, length))
    b_only = u < b_w
    a_only = (u >= b_w) & (u < b_w + a_w)
    both = (u >= b_w + a_w) & (u < (1 + b_w + a_w) / 2)
    return np.stack([a_only | both, b_only | both], axis=2)


def test_paired_sequential_type_one_error() -> None:
    reps, length = 2000, 500
    rng = np.random.default_rng(6)
    psi = rng.uniform(0.05, 0.6, size=reps)  # a random discordance per sequence, H0: equal
    data = _paired_data(rng, reps, length, psi / 2, psi / 2)
    stops = [decide_paired(seq) for seq in data]  # type: ignore[arg-type]
    rejected = sum(s.decision != "not distinguishable" for s in stops) / reps
    # The fixed-n McNemar (chi-square, no correction), checked after every pair.
    b_cum = np.cumsum(data[:, :, 1] & ~data[:, :, 0], axis=1)
    a_cum = np.cumsum(data[:, :, 0] & ~data[:, :, 1], axis=1)
    disc = np.maximum(a_cum + b_cum, 1)
    naive = float((((b_cum - a_cum) ** 2 / disc) > ndtri(0.975) ** 2).any(axis=1).mean())
    print(f"type-I: sequential {rejected:.4f}, McNemar after every pair {naive:.4f}")
    assert rejected <= ALPHA + _slack(reps)
    assert naive > ALPHA + _slack(reps)
    assert all(s.stop == length for s in stops if s.decision == "not distinguishable")


@pytest.mark.parametrize(
    ("b_win", "a_win", "sign"), [(0.3, 0.1, "B better"), (0.1, 0.3, "B worse")]
)
def test_paired_sequential_power_and_sign(b_win: float, a_win: float, sign: str) -> None:
    reps, length = 500, 500
    rng = np.random.default_rng(7 if sign == "B better" else 8)
    data = _paired_data(rng, reps, length, b_win, a_win)
    stops = [decide_paired(seq) for seq in data]  # type: ignore[arg-type]
    right = sum(s.decision == sign for s in stops) / reps
    wrong = sum(s.decision not in (sign, "not distinguishable") for s in stops) / reps
    assert right > 0.95 and wrong <= 0.01
    assert np.median([s.stop for s in stops]) < 200


# --- planning ------------------------------------------------------------------------------


def test_paired_sample_size_reference_values() -> None:
    # Connor (1987), Biometrics 43:207, p. 209, as worked on powerandsamplesize.com
    # ("Compare Paired Proportions, McNemar's Z-test, 2-Sided"): p01 = 0.45, p10 = 0.05,
    # alpha = 0.05, power 0.8 -> n = 23. Here delta = P(B-win) - P(A-win) = +/-0.4.
    for delta, p_a in ((0.4, 0.3), (-0.4, 0.6)):
        plan = paired_sample_size(p_a, delta, discordance=0.5)
        assert plan.n == 23 and plan.method == "connor"
    # By hand: psi = 0.2, delta = 0.1: (1.95996 sqrt(0.2) + 0.84162 sqrt(0.19))^2 / 0.01
    # = 154.6 -> 155.
    plan = paired_sample_size(0.7, 0.1, discordance=0.2)
    assert plan.n == 155 and plan.discordance == pytest.approx(0.2)
    # Independence: psi = 0.5 * 0.4 + 0.6 * 0.5 = 0.5, said in the assumption.
    plan = paired_sample_size(0.5, 0.1)
    assert plan.discordance == pytest.approx(0.5) and "independent" in plan.assumption
    assert plan.n == math.ceil(
        (ndtri(0.975) * math.sqrt(0.5) + ndtri(0.8) * math.sqrt(0.49)) ** 2 / 0.01
    )
    assert plan.sequential_inflation == SEQUENTIAL_INFLATION
    # Lower discordance (positive correlation) needs fewer pairs; more power needs more.
    assert paired_sample_size(0.5, 0.1, discordance=0.3).n < plan.n
    assert paired_sample_size(0.5, 0.1, power=0.9).n > plan.n


@pytest.mark.parametrize(
    ("p_a", "delta", "power", "discordance"),
    [(0.5, 0.1, 0.8, None), (0.6, 0.2, 0.9, None), (0.7, 0.1, 0.8, 0.2)],
)
def test_paired_sample_size_achieves_its_power(
    p_a: float, delta: float, power: float, discordance: float | None
) -> None:
    plan = paired_sample_size(p_a, delta, power, discordance=discordance)
    b_win, a_win = (plan.discordance + delta) / 2, (plan.discordance - delta) / 2
    rng = np.random.default_rng(9)
    reps = 10_000
    draws = rng.multinomial(plan.n, [b_win, a_win, 1 - b_win - a_win], size=reps)
    b, a = draws[:, 0], draws[:, 1]
    chi2 = (b - a) ** 2 / np.maximum(a + b, 1)
    reject = chi2 > ndtri(0.975) ** 2
    # The vectorised statistic is statsmodels' McNemar without continuity correction.
    for i in range(5):
        table = [[0, int(a[i])], [int(b[i]), 0]]
        ref = mcnemar(table, exact=False, correction=False)
        assert ref.statistic == pytest.approx(chi2[i]) and (ref.pvalue < 0.05) == reject[i]
    achieved = float(reject.mean())
    print(f"planned n={plan.n}: stated power {power}, achieved {achieved:.4f}")
    assert abs(achieved - power) <= 0.04


def test_paired_sample_size_rejects_bad_input() -> None:
    cases: list[tuple[dict[str, float | None], str]] = [
        ({"p_a": 0.0, "delta": 0.1}, "p_a"),
        ({"p_a": 1.0, "delta": -0.1}, "p_a"),
        ({"p_a": 0.5, "delta": 0.0}, "delta"),
        ({"p_a": 0.5, "delta": 0.5}, "delta"),
        ({"p_a": 0.5, "delta": -0.6}, "delta"),
        ({"p_a": 0.5, "delta": 0.1, "power": 1.0}, "power"),
        ({"p_a": 0.5, "delta": 0.1, "alpha": 0.0}, "alpha"),
        ({"p_a": 0.5, "delta": 0.1, "discordance": 0.1}, "discordance"),  # |delta| = psi
        ({"p_a": 0.5, "delta": 0.1, "discordance": 1.5}, "discordance"),
        ({"p_a": 0.9, "delta": 0.05, "discordance": 0.5}, "discordance"),  # cells too large
    ]
    for kwargs, name in cases:
        with pytest.raises(ValueError, match=name):
            paired_sample_size(**kwargs)  # type: ignore[arg-type]


def test_paired_sequential_expected_n() -> None:
    plan = paired_sequential_expected_n(0.5, 0.2, reps=1000, seed=1)
    fixed = paired_sample_size(0.5, 0.2)
    assert plan.fixed_n == fixed.n and plan.cap == 4 * fixed.n
    assert plan.power_at_cap > 0.95 and plan.wrong_sign < 0.01
    # Anytime-valid costs pairs at the planned effect: less power at the fixed n, and the
    # n by which it reaches the stated power is larger.
    assert plan.power_at_fixed_n < 0.8
    assert plan.n_at_power is not None and plan.n_at_power > fixed.n
    assert 0 < plan.median_n <= plan.mean_n * 1.5 and plan.mean_n <= plan.cap
    # Seeded: the same seed gives the same result.
    assert paired_sequential_expected_n(0.5, 0.2, reps=1000, seed=1) == plan
    with pytest.raises(ValueError, match="cap"):
        paired_sequential_expected_n(0.5, 0.2, cap=0)
