"""Coverage of the 95 % intervals of ``agentcanvas.eval.intervals``: method x region x n.

    .venv/bin/python bench/coverage.py [--quick] [--methods wilson,betting,...] [--seed S]

For each method, each n in {5, 10, 30, 100, 1000} and each region of the true value
("near 0", "middle", "near 1"), the coverage at every true value of the region's grid, then
the region's average and minimum coverage and the mean interval width (averaged over the
grid), as a markdown table:

- wilson, clopper-pearson: exact (the binomial pmf summed over k);
- newcombe (paired difference p_B - p_A): exact over every 2x2 table for n <= 100,
  seeded simulation at n = 1000; marginals p_A in the region, p_B - p_A in {0, 0.1, -0.2}
  where valid, within-pair correlation 0 and 0.5;
- betting: seeded Monte Carlo, Beta(4 mu, 4 (1 - mu)) and Bernoulli(mu) data;
- t: seeded Monte Carlo, normal data (sd 0.1); a lognormal(0, 1) row is reported apart;
- mover: seeded Monte Carlo, the equal-weight mean of three strata of n Bernoulli episodes
  each (rates p - s, p, p + s, s = min(p, 1 - p) / 2), Wilson per stratum;
- mover-newcombe (stratified paired difference, as ``comparison._stratified`` computes it):
  seeded Monte Carlo, three strata of n pairs each with marginals p_A in (p - s, p, p + s) and
  p_B = p_A + d, d in {0, 0.1, -0.2} where every p_B is in (0, 1), within-pair correlation 0
  and 0.5 (as for newcombe; a configuration is left out where a stratum cannot have it);
  the mean of the per-stratum differences, MOVER over the per-stratum Newcombe intervals
  with weights 1/3; the truth is the mean over the strata of p_B - p_A.

``--quick`` uses the tests' three true values per region and fewer replications (< 1 min).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt

from agentcanvas.eval.intervals import (
    betting_interval,
    clopper_pearson,
    mover_sum,
    newcombe_paired,
    t_interval,
    wilson,
)

NS = (5, 10, 30, 100, 1000)
QUICK_REGIONS: dict[str, tuple[float, ...]] = {
    "near 0": (0.02, 0.05, 0.1),
    "middle": (0.3, 0.5, 0.7),
    "near 1": (0.9, 0.95, 0.98),
}
FULL_REGIONS: dict[str, tuple[float, ...]] = {
    "near 0": (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1),
    "middle": (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7),
    "near 1": (0.9, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99),
}
METHODS = ("wilson", "clopper-pearson", "newcombe", "betting", "t", "mover", "mover-newcombe")

FloatArray = npt.NDArray[np.float64]
# One measurement: (coverage, mean width) at one true value / configuration.
Point = tuple[float, float]


def binary_points(method: str, n: int, ps: tuple[float, ...]) -> list[Point]:
    """Exact coverage and expected width of wilson / clopper-pearson at each p."""
    from scipy.stats import binom

    fn = wilson if method == "wilson" else clopper_pearson
    bounds = np.array([fn(k, n) for k in range(n + 1)])
    lo, hi = bounds[:, 0], bounds[:, 1]
    ks = np.arange(n + 1)
    out: list[Point] = []
    for p in ps:
        pmf = binom.pmf(ks, n, p)
        out.append((float(pmf[(lo <= p) & (p <= hi)].sum()), float((pmf * (hi - lo)).sum())))
    return out


def paired_cells(p_a: float, p_b: float, rho: float) -> FloatArray | None:
    """Cell probabilities [both, a_only, b_only, neither] of pairs with marginals p_A, p_B
    and within-pair correlation rho; None where no such table exists."""
    both = p_a * p_b + rho * math.sqrt(p_a * (1 - p_a) * p_b * (1 - p_b))
    cells = np.array([both, p_a - both, p_b - both, 1 - p_a - p_b + both])
    return np.clip(cells, 0.0, 1.0) if (cells >= -1e-12).all() else None


def paired_configs(ps: tuple[float, ...]) -> Iterator[tuple[float, FloatArray]]:
    """(true p_B - p_A, cell probabilities [both, a_only, b_only, neither])."""
    for p_a in ps:
        for delta in (0.0, 0.1, -0.2):
            p_b = round(p_a + delta, 10)
            if not 0.0 < p_b < 1.0:
                continue
            for rho in (0.0, 0.5):
                cells = paired_cells(p_a, p_b, rho)
                if cells is not None:
                    yield p_b - p_a, cells


def newcombe_points(
    n: int, ps: tuple[float, ...], reps: int, rng: np.random.Generator
) -> list[Point]:
    from scipy.special import gammaln, xlogy

    out: list[Point] = []
    if n <= 100:
        tables = [
            (e, f, g, n - e - f - g)
            for e in range(n + 1)
            for f in range(n + 1 - e)
            for g in range(n + 1 - e - f)
        ]
        bounds = np.array([newcombe_paired(*t) for t in tables])
        lo, hi = bounds[:, 0], bounds[:, 1]
        counts = np.array(tables, dtype=np.float64)
        base = gammaln(n + 1) - gammaln(counts + 1).sum(axis=1)
        for delta, cells in paired_configs(ps):
            pmf = np.exp(base + xlogy(counts, cells).sum(axis=1))
            covered = (lo <= delta + 1e-12) & (delta - 1e-12 <= hi)
            out.append((float(pmf[covered].sum()), float((pmf * (hi - lo)).sum())))
        return out
    for delta, cells in paired_configs(ps):
        hits, width = 0, 0.0
        for e, f, g, h in rng.multinomial(n, cells, size=reps).tolist():
            low, high = newcombe_paired(e, f, g, h)
            hits += low <= delta + 1e-12 and delta - 1e-12 <= high
            width += high - low
        out.append((hits / reps, width / reps))
    return out


def _monte_carlo(
    data: FloatArray, interval: Callable[[list[float]], tuple[float, float]], truth: float
) -> Point:
    """Coverage and mean width of ``interval`` over the rows of ``data`` (reps x n)."""
    hits, width = 0, 0.0
    for row in data:
        low, high = interval(row.tolist())
        hits += low <= truth <= high
        width += high - low
    return hits / len(data), width / len(data)


def betting_points(
    n: int, ps: tuple[float, ...], reps: int, rng: np.random.Generator
) -> list[Point]:
    out: list[Point] = []
    for mu in ps:
        beta = rng.beta(4 * mu, 4 * (1 - mu), size=(reps, n))
        out.append(_monte_carlo(beta, betting_interval, mu))
        bernoulli = (rng.random(size=(reps, n)) < mu).astype(np.float64)
        out.append(_monte_carlo(bernoulli, betting_interval, mu))
    return out


def t_points(n: int, ps: tuple[float, ...], reps: int, rng: np.random.Generator) -> list[Point]:
    return [_monte_carlo(rng.normal(mu, 0.1, size=(reps, n)), t_interval, mu) for mu in ps]


def _mover_strata(p: float) -> tuple[float, float, float]:
    """Three stratum success rates around p, all in (0, 1), mean exactly p."""
    spread = min(p, 1 - p) / 2
    return p - spread, p, p + spread


def mover_points(n: int, ps: tuple[float, ...], reps: int, rng: np.random.Generator) -> list[Point]:
    """Equal-weight mean of three strata of n episodes each, Wilson per stratum."""
    out: list[Point] = []
    weights = [1 / 3] * 3
    for p in ps:
        strata = _mover_strata(p)
        truth = sum(w * q for w, q in zip(weights, strata, strict=True))
        hits, width = 0, 0.0
        for ks in rng.binomial(n, strata, size=(reps, 3)).tolist():
            low, high = mover_sum([k / n for k in ks], [wilson(k, n) for k in ks], weights)
            hits += low <= truth + 1e-12 and truth - 1e-12 <= high
            width += high - low
        out.append((hits / reps, width / reps))
    return out


def stratified_paired_configs(
    ps: tuple[float, ...],
) -> Iterator[tuple[float, list[FloatArray]]]:
    """(true stratified p_B - p_A, the cells of each of three strata): p_A of the strata
    around p as for mover, p_B = p_A + delta in every stratum, the same rho in each."""
    for p in ps:
        strata_a = _mover_strata(p)
        for delta in (0.0, 0.1, -0.2):
            strata_b = [round(p_a + delta, 10) for p_a in strata_a]
            if not all(0.0 < p_b < 1.0 for p_b in strata_b):
                continue
            for rho in (0.0, 0.5):
                cells = [paired_cells(a, b, rho) for a, b in zip(strata_a, strata_b, strict=True)]
                strata = [c for c in cells if c is not None]
                if len(strata) == len(cells):
                    diffs = [b - a for a, b in zip(strata_a, strata_b, strict=True)]
                    yield sum(diffs) / len(diffs), strata


def mover_newcombe_points(
    n: int, ps: tuple[float, ...], reps: int, rng: np.random.Generator
) -> list[Point]:
    """The stratified paired difference of ``comparison._stratified``: the equal-weight mean
    of the per-stratum differences, MOVER over the per-stratum Newcombe intervals."""
    out: list[Point] = []
    for truth, strata in stratified_paired_configs(ps):
        weights = [1.0 / len(strata)] * len(strata)
        draws = [rng.multinomial(n, cells, size=reps).tolist() for cells in strata]
        hits, width = 0, 0.0
        for tables in zip(*draws, strict=True):
            low, high = mover_sum(
                [(g - f) / n for _, f, g, _ in tables],
                [newcombe_paired(e, f, g, h) for e, f, g, h in tables],
                weights,
            )
            hits += low <= truth + 1e-12 and truth - 1e-12 <= high
            width += high - low
        out.append((hits / reps, width / reps))
    return out


def reps_for(method: str, n: int, quick: bool) -> int:
    if method == "betting":
        table = {5: 300, 10: 300, 30: 200, 100: 100, 1000: 25}
        full = {5: 1000, 10: 1000, 30: 1000, 100: 500, 1000: 100}
        return table[n] if quick else full[n]
    if method in ("t", "mover", "mover-newcombe"):
        return (1000 if n < 1000 else 500) if quick else (4000 if n < 1000 else 2000)
    return 1000 if quick else 4000  # newcombe at n = 1000


def measure(
    method: str, n: int, ps: tuple[float, ...], quick: bool, rng: np.random.Generator
) -> list[Point]:
    reps = reps_for(method, n, quick)
    if method in ("wilson", "clopper-pearson"):
        return binary_points(method, n, ps)
    if method == "newcombe":
        return newcombe_points(n, ps, reps, rng)
    if method == "betting":
        return betting_points(n, ps, reps, rng)
    if method == "t":
        return t_points(n, ps, reps, rng)
    if method == "mover-newcombe":
        return mover_newcombe_points(n, ps, reps, rng)
    return mover_points(n, ps, reps, rng)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 values per region, fewer reps")
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated ids")
    parser.add_argument("--seed", type=int, default=0, help="numpy default_rng seed")
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; known: {', '.join(METHODS)}")
    regions = QUICK_REGIONS if args.quick else FULL_REGIONS
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    print("| method | region | n | average coverage | minimum coverage | mean width | how |")
    print("|---|---|---:|---:|---:|---:|---|")
    for method in methods:
        for n in NS:
            for region, ps in regions.items():
                points = measure(method, n, ps, args.quick, rng)
                coverages = [c for c, _ in points]
                widths = [w for _, w in points]
                print(
                    f"| {method} | {region} | {n} | {sum(coverages) / len(coverages):.4f} | "
                    f"{min(coverages):.4f} | {sum(widths) / len(widths):.4f} | "
                    f"{_how(method, n, args.quick)} |",
                    flush=True,
                )
    if "t" in methods:
        for n in NS:
            reps = reps_for("t", n, args.quick)
            data = rng.lognormal(0.0, 1.0, size=(reps, n))
            cov, width = _monte_carlo(data, t_interval, math.exp(0.5))
            print(f"| t (lognormal(0, 1), skewed) | - | {n} | {cov:.4f} | {cov:.4f} | "
                  f"{width:.4f} | {reps} reps |")  # fmt: skip
    print(f"\n{time.perf_counter() - started:.0f} s, seed {args.seed}")
    return 0


def _how(method: str, n: int, quick: bool) -> str:
    if method in ("wilson", "clopper-pearson") or (method == "newcombe" and n <= 100):
        return "exact"
    return f"{reps_for(method, n, quick)} reps"


if __name__ == "__main__":
    raise SystemExit(main())
