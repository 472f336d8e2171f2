"""Anytime validity of ``agentcanvas.eval.sequential``, and the pairs the sequential test uses.

    .venv/bin/python bench/sequential.py [--quick] [--seed S]

Five markdown tables, every figure by seeded simulation (``numpy.random.default_rng``):

1. beta_binomial_cs: the fraction of Bernoulli(p) sequences on which the 95 % confidence
   sequence EVER missed p, checked after every episode up to each length, beside the same
   for the fixed-n Wilson interval checked after every episode (which is not built for
   it), and the mean CS / Wilson width at the last episode;
2. betting_cs: the same ever-missed fraction for a bounded mean (Beta(4 mu, 4 (1 - mu)) and
   Bernoulli(mu) data; betting_cs is the running intersection, so one call per sequence),
   and its final width beside the fixed-n ``intervals.betting_interval`` on the same data;
3. paired_sequential_test (via decide_paired): type-I error under H0 (equal rates,
   discordance psi), checked after every pair up to each length, beside the fixed-n
   McNemar chi-square checked after every pair;
4. paired_sample_size (Connor 1987): the stated power against the achieved power of the
   fixed-n McNemar at the planned n (asymptotic chi-square without correction, which the
   formula is for, and the exact conditional binomial test);
5. episodes saved: the pairs the sequential test uses (mean and median, a run that never
   rejects counting as the cap) against the fixed-n plan, when the true effect is the
   planned one and when it is larger than planned.

Defaults take about 75 s on one core; ``--quick`` uses fewer replications (about 35 s).
"""

from __future__ import annotations

import argparse
import time
from functools import cache

import numpy as np
import numpy.typing as npt

from agentcanvas.eval.intervals import betting_interval, wilson
from agentcanvas.eval.paired_sequential import decide_paired
from agentcanvas.eval.sample_size import paired_sample_size, paired_sequential_expected_n
from agentcanvas.eval.sequential import beta_binomial_cs, betting_cs

BoolArray = npt.NDArray[np.bool_]
Z975 = 1.959963984540054  # the normal quantile at 0.975
ALPHA = 0.05


@cache
def _bounds(method: str, n: int, k: int) -> tuple[float, float]:
    return beta_binomial_cs(k, n) if method == "cs" else wilson(k, n)


def _miss_matrix(method: str, successes: BoolArray, p: float) -> tuple[BoolArray, float]:
    """(reps x length: the interval at n misses p; mean width at the last n)."""
    reps, length = successes.shape
    k = np.cumsum(successes, axis=1)
    n = np.broadcast_to(np.arange(1, length + 1), k.shape)
    keys = np.stack([n.ravel(), k.ravel()], axis=1)
    pairs, inverse = np.unique(keys, axis=0, return_inverse=True)
    table = np.array([_bounds(method, int(a), int(b)) for a, b in pairs])
    miss = (table[:, 0] > p) | (table[:, 1] < p)
    last = np.array([_bounds(method, length, int(b)) for b in k[:, -1]])
    return miss[inverse.ravel()].reshape(reps, length), float((last[:, 1] - last[:, 0]).mean())


def beta_binomial_table(rng: np.random.Generator, quick: bool) -> None:
    lengths = (100, 500, 2000)
    reps = 300 if quick else 1000
    print("\n### beta_binomial_cs: time-uniform coverage (95 %), checked after every episode\n")
    print("| p | length | reps | CS ever missed | Wilson ever missed | CS width | Wilson width |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for p in (0.05, 0.1, 0.3, 0.5, 0.9):
        successes = rng.random((reps, lengths[-1])) < p
        cs_miss, _ = _miss_matrix("cs", successes, p)
        w_miss, _ = _miss_matrix("wilson", successes, p)
        for length in lengths:
            _, cs_width = _miss_matrix("cs", successes[:, :length], p)
            _, w_width = _miss_matrix("wilson", successes[:, :length], p)
            print(
                f"| {p} | {length} | {reps} | {cs_miss[:, :length].any(axis=1).mean():.4f} | "
                f"{w_miss[:, :length].any(axis=1).mean():.4f} | {cs_width:.4f} | "
                f"{w_width:.4f} |",
                flush=True,
            )


def betting_table(rng: np.random.Generator, quick: bool) -> None:
    reps = 100 if quick else 300
    print("\n### betting_cs: time-uniform coverage (95 %) of a bounded mean\n")
    print("| data | mean | length | reps | CS ever missed | CS width | fixed-n betting width |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for kind in ("beta", "bernoulli"):
        for mu in (0.1, 0.5, 0.9):
            for length in (100, 500):
                if kind == "beta":
                    data = rng.beta(4 * mu, 4 * (1 - mu), size=(reps, length))
                else:
                    data = (rng.random((reps, length)) < mu).astype(np.float64)
                missed, width, fixed_width = 0, 0.0, 0.0
                for row in data:
                    values = row.tolist()
                    lo, hi = betting_cs(values)
                    missed += not lo <= mu <= hi
                    width += hi - lo
                    f_lo, f_hi = betting_interval(values)
                    fixed_width += f_hi - f_lo
                print(
                    f"| {kind} | {mu} | {length} | {reps} | {missed / reps:.4f} | "
                    f"{width / reps:.4f} | {fixed_width / reps:.4f} |",
                    flush=True,
                )


def _pairs(
    rng: np.random.Generator, reps: int, length: int, b_win: float, a_win: float
) -> npt.NDArray[np.bool_]:
    """reps x length x 2 (a_success, b_success), concordant pairs split evenly."""
    u = rng.random((reps, length))
    b_only = u < b_win
    a_only = (u >= b_win) & (u < b_win + a_win)
    both = (u >= b_win + a_win) & (u < (1 + b_win + a_win) / 2)
    return np.stack([a_only | both, b_only | both], axis=2)


def type_one_table(rng: np.random.Generator, quick: bool) -> None:
    lengths = (100, 500, 2000)
    reps = 1000 if quick else 4000
    print("\n### paired_sequential_test: type-I error (alpha = 0.05), checked after every pair\n")
    print("| discordance | pairs | reps | sequential | fixed-n McNemar after every pair |")
    print("|---:|---:|---:|---:|---:|")
    for psi in (0.1, 0.3, 0.6):
        data = _pairs(rng, reps, lengths[-1], psi / 2, psi / 2)
        stops = [decide_paired(seq.tolist()) for seq in data]
        stop_at = np.array(
            [s.stop if s.decision != "not distinguishable" else lengths[-1] + 1 for s in stops]
        )
        b_cum = np.cumsum(data[:, :, 1] & ~data[:, :, 0], axis=1)
        a_cum = np.cumsum(data[:, :, 0] & ~data[:, :, 1], axis=1)
        naive = ((b_cum - a_cum) ** 2 / np.maximum(a_cum + b_cum, 1)) > Z975**2
        for length in lengths:
            print(
                f"| {psi} | {length} | {reps} | {(stop_at <= length).mean():.4f} | "
                f"{naive[:, :length].any(axis=1).mean():.4f} |",
                flush=True,
            )


PLANS: tuple[tuple[float, float, float, float | None], ...] = (
    (0.5, 0.05, 0.8, None),
    (0.5, 0.1, 0.8, None),
    (0.5, 0.1, 0.9, None),
    (0.7, 0.1, 0.8, 0.2),
    (0.3, -0.15, 0.8, 0.25),
    (0.6, 0.2, 0.9, None),
    (0.8, 0.05, 0.8, 0.1),
    (0.3, 0.4, 0.8, 0.5),  # Connor's (1987, p. 209) example: n = 23
)


def planner_table(rng: np.random.Generator, quick: bool) -> None:
    from scipy.stats import binom

    reps = 5000 if quick else 20000
    print("\n### paired_sample_size (Connor 1987): stated vs achieved power of fixed-n McNemar\n")
    print(
        "| p_A | delta | discordance | n | stated power | achieved (chi-square) | "
        "achieved (exact binomial) |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|")
    for p_a, delta, power, discordance in PLANS:
        plan = paired_sample_size(p_a, delta, power, ALPHA, discordance)
        b_win, a_win = (plan.discordance + delta) / 2, (plan.discordance - delta) / 2
        draws = rng.multinomial(plan.n, [b_win, a_win, 1 - b_win - a_win], size=reps)
        b, a = draws[:, 0], draws[:, 1]
        chi2 = ((b - a) ** 2 / np.maximum(a + b, 1)) > Z975**2
        exact_p = np.minimum(1.0, 2.0 * binom.cdf(np.minimum(a, b), a + b, 0.5))
        exact = (exact_p <= ALPHA) & (a + b > 0)
        how = "given" if discordance is not None else "independence"
        print(
            f"| {p_a} | {delta} | {plan.discordance:.3f} ({how}) | {plan.n} | {power} | "
            f"{chi2.mean():.4f} | {exact.mean():.4f} |",
            flush=True,
        )


def saved_table(quick: bool, seed: int) -> None:
    reps = 500 if quick else 2000
    print("\n### episodes saved: pairs used by the sequential test vs the fixed-n plan\n")
    print(
        "| p_A | planned delta | true delta | discordance | fixed n (plan, power 0.8) | "
        "cap | sequential mean n | median n | power by cap | power by fixed n | "
        "n for power 0.8 | wrong sign |"
    )
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    cases: tuple[tuple[float, float, float, float | None], ...] = (
        (0.5, 0.05, 0.05, None),
        (0.5, 0.1, 0.1, None),
        (0.5, 0.2, 0.2, None),
        (0.5, 0.3, 0.3, None),
        (0.5, 0.1, 0.1, 0.2),
        (0.5, 0.05, 0.1, None),  # the effect is larger than planned
        (0.5, 0.1, 0.2, None),
        (0.5, 0.1, 0.05, None),  # smaller than planned
    )
    for p_a, planned, true, discordance in cases:
        fixed = paired_sample_size(p_a, planned, 0.8, ALPHA, discordance)
        # Planned effect: up to 4 x the fixed n; otherwise stopped at the planned fixed n.
        cap = 4 * fixed.n if planned == true else fixed.n
        sim = paired_sequential_expected_n(
            p_a, true, 0.8, ALPHA, discordance, cap=cap, reps=reps, seed=seed
        )
        by_fixed = sim.power_at_fixed_n if planned == true else sim.power_at_cap
        need = "-" if sim.n_at_power is None else str(sim.n_at_power)
        how = f"{discordance} (given)" if discordance is not None else "independence"
        print(
            f"| {p_a} | {planned} | {true} | {how} | {fixed.n} | {cap} | {sim.mean_n:.0f} | "
            f"{sim.median_n:.0f} | {sim.power_at_cap:.3f} | {by_fixed:.3f} | "
            f"{need} | {sim.wrong_sign:.4f} |",
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer replications")
    parser.add_argument("--seed", type=int, default=0, help="numpy default_rng seed")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    beta_binomial_table(rng, args.quick)
    betting_table(rng, args.quick)
    type_one_table(rng, args.quick)
    planner_table(rng, args.quick)
    saved_table(args.quick, args.seed)
    print(f"\n{time.perf_counter() - started:.0f} s, seed {args.seed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
