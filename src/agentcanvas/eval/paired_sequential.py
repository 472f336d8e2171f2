"""An anytime-valid McNemar test: two agents compared on the same episodes, checked after
every pair (the beta-binomial mixture e-process on the discordant pairs; Robbins 1970, Ann.
Math. Statist. 41:1397; Howard, Ramdas, McAuliffe & Sekhon 2021, Ann. Statist. 49:1055).

``paired_sequential_test`` after some pairs; ``decide_paired`` walks pairs in order and stops
at the first rejection. Type-I error <= α however often it is checked (Ville's inequality);
``tests/eval/test_sequential.py`` measures it by seeded simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from agentcanvas.eval.stat_args import check_alpha, check_prior

__all__ = [
    "B_BETTER",
    "B_WORSE",
    "DECISIONS",
    "NOT_DISTINGUISHABLE",
    "UNDECIDED",
    "PairedStop",
    "SequentialDecision",
    "decide_paired",
    "log_evidence_fair",
    "paired_sequential_test",
]

# Outcomes of paired_sequential_test (the first three) and decide_paired.
B_BETTER: Final = "B better"
B_WORSE: Final = "B worse"
UNDECIDED: Final = "undecided"
NOT_DISTINGUISHABLE: Final = "not distinguishable"
DECISIONS: Final = (B_BETTER, B_WORSE, UNDECIDED, NOT_DISTINGUISHABLE)


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


def log_evidence_fair(
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
    alpha = check_alpha("paired_sequential_test", alpha)
    prior = check_prior("paired_sequential_test", prior)
    log_m = float(log_evidence_fair(b_wins, a_wins, prior))
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
    alpha = check_alpha("decide_paired", alpha)
    prior = check_prior("decide_paired", prior)
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
        log_m = np.asarray(log_evidence_fair(b_cum, a_cum, prior), dtype=np.float64)
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
