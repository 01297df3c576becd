"""The paired significance test a promotion rests on: is the candidate better than the reference on the same tasks?

Both evaluations score the same tasks, so the test is over the per-task differences d = candidate − reference,
one-sided (H1: the candidate is better):

exact sign test             when every paired score is 0 or 1 (one episode per task, or pass/fail): the tied
                            tasks say nothing, and under H0 each discordant task is a win with probability 1/2,
                            so p = P(Binomial(wins + losses, 1/2) >= wins) (exact McNemar).
sign-flip permutation test  when scores are fractions (k > 1 episodes per task, exam F1): under H0 each d is as
                            likely to be -d, so the observed sum of d is ranked among the sums with every sign
                            flipped; enumerated exactly when at most EXACT_MAX_NONZERO tasks differ, otherwise
                            n_perm seeded random flips with p = (1 + #{sum >= observed}) / (1 + n_perm).

A candidate is promoted only when p <= alpha, at least `min_discordant` tasks disagree (a handful of wins with
no losses is too little evidence whatever its p-value) and the mean difference exceeds `margin`.

Every new version is tested against the same champion on the same tasks, so each look spends a share of the
level: look k is tested at alpha * 6 / (pi^2 k^2), which sums to alpha over all looks (sum 1/k^2 = pi^2 / 6), so
the chance that any of an unlimited sequence of no-better candidates is promoted stays at or below alpha.

The 95% paired bootstrap interval of the difference is reported beside the test, not used by it: a percentile
interval is not a test when few tasks disagree (4 wins, 0 losses over 50 tasks: [+0.02, +0.16], p = 0.0625).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from components.evaluation.metrics import paired_difference

EXACT_MAX_NONZERO = 16  # 2^16 sign patterns: enumerating them costs less than a Monte Carlo run
_CHUNK = 1 << 20  # random signs drawn per block, so that n_perm x tasks never sits in memory at once

Test = Literal["exact sign test", "sign-flip permutation test"]


class PairedTest(BaseModel):
    """One paired test of a candidate against a reference, and the promotion it supports or not."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    test: Test
    metric: str  # what the per-task scores measure (success, exam_f1, ...)
    nominal_alpha: float  # the configured one-sided level
    alpha: float  # the level this look is tested at, after alpha spending
    look: int  # 1 = first candidate tested against this reference on these tasks
    n_tasks: int  # paired tasks
    wins: int  # tasks where candidate > reference
    losses: int  # tasks where candidate < reference
    ties: int  # tasks with equal scores (concordant)
    difference: float  # mean(candidate − reference) over the paired tasks
    low: float  # 95% paired bootstrap interval of `difference`: reported, not the test
    high: float
    p_value: float  # one-sided, H1: candidate better
    min_discordant: int
    margin: float  # the observed difference must also exceed it
    promote: bool

    @property
    def discordant(self) -> int:
        return self.wins + self.losses

    def reasons_against(self) -> list[str]:
        """Each condition of a promotion that this test fails, in words; empty when it promotes."""
        out = []
        if self.p_value > self.alpha:
            out.append(f"p {self.p_value:.4g} > alpha {self.alpha:.4g}")
        if self.discordant < self.min_discordant:
            out.append(f"{self.discordant} discordant task(s) < the {self.min_discordant} required")
        if not self.difference > self.margin:
            out.append(f"difference {self.difference:+.4f} <= margin {self.margin:+.4f}")
        return out

    def explain(self) -> str:
        against = self.reasons_against()
        if against:
            verdict = "not promoted: " + "; ".join(against)
        else:
            verdict = (f"promoted: p {self.p_value:.4g} <= alpha {self.alpha:.4g}, {self.discordant} >= {self.min_discordant} "
                       f"discordant, difference > margin {self.margin:+.4f}")
        return (f"{self.test} on {self.metric}, one-sided alpha {self.nominal_alpha:g} spent to {self.alpha:.4g} at "
                f"look {self.look}: {self.wins} wins, {self.losses} losses, {self.ties} ties over {self.n_tasks} paired "
                f"tasks; difference {self.difference:+.4f}, 95% bootstrap CI [{self.low:+.4f}, {self.high:+.4f}]; "
                f"p = {self.p_value:.4g}; {verdict}")


def spent_alpha(alpha: float, look: int) -> float:
    """The level of look `look` (1, 2, ...): alpha * 6 / (pi^2 look^2), summing to alpha over every look."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"spent_alpha: alpha must lie in (0, 1), got {alpha}")
    if look < 1:
        raise ValueError(f"spent_alpha: look counts from 1, got {look}")
    return alpha * 6.0 / (math.pi ** 2 * look ** 2)


def sign_test_p(wins: int, losses: int) -> float:
    """One-sided exact sign test: P(Binomial(wins + losses, 1/2) >= wins); 1 when no task is discordant."""
    # imported here: scipy.stats takes half a second, and every command that loads a profile imports this package
    # (the profile's registry section is its RegistryConfig)
    from scipy.stats import binom

    n = wins + losses
    return 1.0 if n == 0 else float(binom.sf(wins - 1, n, 0.5))


def sign_flip_p(differences: np.ndarray, n_perm: int, seed: int) -> float:
    """One-sided sign-flip permutation p-value of sum(differences); exact when few differences are nonzero."""
    d = np.abs(differences[differences != 0.0])
    if d.size == 0:
        return 1.0
    observed = float(differences.sum())
    tol = 1e-9 * float(d.sum())  # the same sum reached in another order may differ in the last bits
    if d.size <= EXACT_MAX_NONZERO:
        sums = np.zeros(1)
        for x in d:  # all 2^m signed sums, doubling once per task
            sums = np.concatenate((sums + x, sums - x))
        return float(np.count_nonzero(sums >= observed - tol)) / sums.size
    rng = np.random.default_rng(seed)
    rows = max(1, _CHUNK // d.size)
    hits, done = 0, 0
    while done < n_perm:
        n = min(rows, n_perm - done)
        signs = rng.integers(0, 2, size=(n, d.size), dtype=np.int8) * 2 - 1
        hits += int(np.count_nonzero(signs @ d >= observed - tol))
        done += n
    return (1 + hits) / (1 + n_perm)


def paired_test(candidate: Mapping[str, float], reference: Mapping[str, float], *, metric: str = "success",
                alpha: float = 0.05, look: int = 1, min_discordant: int = 5, margin: float = 0.0,
                n_perm: int = 20000, n_boot: int = 2000, seed: int = 0) -> PairedTest:
    """Test candidate > reference on the tasks both score; raises ValueError when they share none."""
    if n_perm < 1:
        raise ValueError(f"paired_test: n_perm must be >= 1, got {n_perm}")
    shared = sorted(set(candidate) & set(reference), key=str)
    if not shared:
        raise ValueError(f"paired_test: no shared task ids ({len(candidate)} in the candidate, {len(reference)} in the "
                         "reference)")
    # the interval also checks that every paired score lies in [0, 1] and names the task that does not
    interval = paired_difference(candidate, reference, n_boot=n_boot, seed=seed)
    a = np.asarray([float(candidate[t]) for t in shared])
    b = np.asarray([float(reference[t]) for t in shared])
    d = a - b
    wins, losses = int(np.count_nonzero(d > 0)), int(np.count_nonzero(d < 0))
    binary = bool(np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all())
    if binary:
        test: Test = "exact sign test"
        p = sign_test_p(wins, losses)
    else:
        test = "sign-flip permutation test"
        p = sign_flip_p(d, n_perm, seed)
    level = spent_alpha(alpha, look)
    difference = float(d.mean())
    return PairedTest(test=test, metric=metric, nominal_alpha=alpha, alpha=level, look=look, n_tasks=len(shared),
                      wins=wins, losses=losses, ties=len(shared) - wins - losses, difference=difference,
                      low=interval.low, high=interval.high, p_value=p, min_discordant=min_discordant, margin=margin,
                      promote=p <= level and wins + losses >= min_discordant and difference > margin)
