"""How many paired episodes a comparison needs: the fixed-n McNemar planner of Connor (1987,
"Sample size for testing differences in proportions for the paired-sample design",
Biometrics 43:207) and the pairs the anytime-valid McNemar (``paired_sequential``) uses, by
seeded simulation of the same paired design.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from agentcanvas.eval.paired_sequential import log_evidence_fair
from agentcanvas.eval.stat_args import check_alpha, check_prior, z_quantile

__all__ = [
    "SEQUENTIAL_INFLATION",
    "PlanResult",
    "SequentialPlan",
    "paired_sample_size",
    "paired_sequential_expected_n",
]

SEQUENTIAL_INFLATION: Final = (
    "the planned n is for a fixed-n McNemar test looked at once; the anytime-valid test "
    "(paired_sequential_test, checked after every pair) pays for optional stopping: at the "
    "same effect it needs more pairs to reach the same power, though it often stops well "
    "before the fixed n when the effect is larger than planned "
    "(paired_sequential_expected_n simulates it)"
)

# paired_sequential_expected_n: pairs simulated per block (bounded memory).
_SIM_MAX_CELLS: Final = 2_000_000


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
    alpha = check_alpha("paired_sample_size", alpha)
    psi, d = b_win + a_win, b_win - a_win
    z_power = z_quantile(2.0 * (1.0 - power))  # the normal quantile at `power`
    root = z_quantile(alpha) * math.sqrt(psi) + z_power * math.sqrt(max(0.0, psi - d * d))
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
    prior = check_prior("paired_sequential_expected_n", prior)
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
        log_m = log_evidence_fair(b_cum, a_cum, prior)
        hit = log_m >= log_threshold
        first = np.argmax(hit, axis=1)
        any_hit = hit[np.arange(block), first]
        sign = np.sign(b_cum[np.arange(block), first] - a_cum[np.arange(block), first])
        out[start : start + block, 0] = np.where(any_hit, first + 1, cap + 1)
        out[start : start + block, 1] = np.where(any_hit, sign, 0)
    return out
