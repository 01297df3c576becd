"""Power and sample size for t-tests (noncentral t) and proportions (Cohen's h, normal approximation).

The formulas are those of statsmodels.stats.power (TTestPower, TTestIndPower, NormalIndPower), written with
scipy.special so that generating tens of thousands of tasks stays fast; tests cross-check against statsmodels.
Sample sizes are the smallest integer reaching the target power, i.e. ceil of statsmodels' solve_power.
"""

from __future__ import annotations

import math

from scipy import special

IMPORTS = ("import math", "from scipy import special")


def t_power(d: float, n: float, alpha: float, alternative: str, ratio: float | None) -> float:
    """Power of a t-test with standardised effect d; ratio None = one-sample/paired, else n2 = ratio * n."""
    if ratio is None:
        df, nobs = n - 1.0, n
    else:
        df, nobs = n * (1.0 + ratio) - 2.0, 1.0 / (1.0 / n + 1.0 / (n * ratio))
    nc = d * math.sqrt(nobs)
    if alternative == "two-sided":
        crit = special.stdtrit(df, 1.0 - alpha / 2.0)
        return float(1.0 - special.nctdtr(df, nc, crit) + special.nctdtr(df, nc, -crit))
    crit = special.stdtrit(df, 1.0 - alpha)
    if alternative == "larger":
        return float(1.0 - special.nctdtr(df, nc, crit))
    return float(special.nctdtr(df, nc, -crit))


def cohen_h(p1: float, p2: float) -> float:
    """Cohen's effect size h for two proportions (statsmodels' proportion_effectsize)."""
    return 2.0 * math.asin(math.sqrt(p1)) - 2.0 * math.asin(math.sqrt(p2))


def normal_power(h: float, n: float, alpha: float, alternative: str, ratio: float | None) -> float:
    """Power of a z-test with effect size h; ratio None = one sample, else n2 = ratio * n."""
    nobs = n if ratio is None else 1.0 / (1.0 / n + 1.0 / (n * ratio))
    shift = h * math.sqrt(nobs)
    if alternative == "two-sided":
        crit = special.ndtri(1.0 - alpha / 2.0)
        return float(special.ndtr(shift - crit) + special.ndtr(-crit - shift))
    crit = special.ndtri(1.0 - alpha)
    if alternative == "larger":
        return float(special.ndtr(shift - crit))
    return float(special.ndtr(-crit - shift))


def smallest_n(power_at, target: float, n_min: int) -> int:
    """Smallest integer n >= n_min with power_at(n) >= target (power rises with n): doubling, then bisection."""
    if power_at(n_min) >= target:
        return n_min
    lo, hi = n_min, n_min * 2
    while power_at(hi) < target:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power_at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def one_sample_t(mean_null: float, mean_alt: float, sd: float, alpha: float, alternative: str,
                 n: int | None = None, power: float | None = None):
    """One-sample (or paired, on differences) t-test: the power at n, or the sample size for `power`."""
    d = abs(mean_alt - mean_null) / sd if alternative != "two-sided" else (mean_alt - mean_null) / sd
    if n is not None:
        return t_power(d, n, alpha, alternative, None)
    return smallest_n(lambda k: t_power(d, k, alpha, alternative, None), power, 2)


def two_sample_t(mean1: float, mean2: float, sd: float, alpha: float, alternative: str, ratio: float,
                 n1: int | None = None, power: float | None = None):
    """Two-sample t-test, common sd, n2 = ratio * n1: the power at n1, or n1 for `power`."""
    d = abs(mean1 - mean2) / sd if alternative != "two-sided" else (mean1 - mean2) / sd
    if n1 is not None:
        return t_power(d, n1, alpha, alternative, ratio)
    return smallest_n(lambda k: t_power(d, k, alpha, alternative, ratio), power, 2)


def two_proportions(p1: float, p2: float, alpha: float, alternative: str, ratio: float,
                    n1: int | None = None, power: float | None = None):
    """Two proportions with Cohen's h and the normal approximation: the power at n1, or n1 for `power`."""
    h = cohen_h(p1, p2)
    h = abs(h) if alternative != "two-sided" else h
    if n1 is not None:
        return normal_power(h, n1, alpha, alternative, ratio)
    return smallest_n(lambda k: normal_power(h, k, alpha, alternative, ratio), power, 1)


def one_proportion(p_null: float, p_alt: float, alpha: float, alternative: str,
                   n: int | None = None, power: float | None = None):
    """One proportion against p_null with Cohen's h and the normal approximation: power at n, or n for `power`."""
    h = cohen_h(p_alt, p_null)
    h = abs(h) if alternative != "two-sided" else h
    if n is not None:
        return normal_power(h, n, alpha, alternative, None)
    return smallest_n(lambda k: normal_power(h, k, alpha, alternative, None), power, 1)
