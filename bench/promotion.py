"""Does the registry's promotion rule promote noise? An A/A simulation through its own decision function.

    python bench/promotion.py [--trials 2000] [--sizes 20 50 200] [--k 1 4] [--alpha 0.05] [--n-perm 2000]
                              [--gain 0.10] [--seed 0]

Each trial draws a fresh test set of n tasks, each task with its own success probability p_i from the regime's
distribution, and scores two evaluations of it: a task's score is the mean of k Bernoulli(p_i) episodes (k = 1:
pass/fail, tested with the exact sign test; k > 1: fractions, tested with the sign-flip permutation test). Both
go through `components.registry.decide`, the rule a registration and `medgym eval compare` call (content hashes and
conditions equal, so every task is paired; the registry's settings, `RegistryConfig`; first look against the
baseline).

A/A     both evaluations come from the same model: every promotion is false. Its rate, with a 95% Clopper-Pearson
        interval, must be at or below alpha.
power   the candidate's p_i are raised by the same amount d, clipped at 1, with d chosen so that the mean success
        over the regime's task population rises by `--gain` (0.10): the share of trials promoted.

Regimes: `both-or-neither` (45% of tasks with p = 0.97, 45% with p = 0.03, 10% uniform: few tasks disagree),
`polarized` (p ~ Beta(0.2, 0.2)), `mid` (p ~ Beta(4, 4)) and `hard` (p ~ Beta(1, 6), a weak agent).

Baseline, in the same run: the old rule, which promoted when the lower end of the 95% percentile bootstrap of the
mean paired difference (`components.evaluation.metrics.paired_difference`, the interval `paired_test` reports as
`low`, with the registry's n_boot and seed) was above the margin 0.

The Monte Carlo permutation test uses `--n-perm` sign flips (2000 by default, against 20000 in the registry) to keep
the run to minutes; its p-value (1 + hits) / (1 + n_perm) is valid at any n_perm.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.stats import beta

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from components.registry import (  # noqa: E402
    Evaluation,
    RegistryConfig,  # noqa: E402
    decide,
)
from components.registry.significance import spent_alpha  # noqa: E402

Sampler = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


def both_or_neither(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    kind = rng.random(shape)
    return np.where(kind < 0.45, 0.97, np.where(kind < 0.90, 0.03, rng.random(shape)))


REGIMES: dict[str, Sampler] = {
    "both-or-neither": both_or_neither,
    "polarized": lambda rng, shape: rng.beta(0.2, 0.2, shape),
    "mid": lambda rng, shape: rng.beta(4.0, 4.0, shape),
    "hard": lambda rng, shape: rng.beta(1.0, 6.0, shape),
}


def shift_for_gain(sample: Sampler, gain: float, seed: int) -> float:
    """The shift d with mean(min(p + d, 1)) - mean(p) = gain over the regime's task population (by bisection)."""
    p = sample(np.random.default_rng(seed), (1_000_000,))
    lo, hi = 0.0, 1.0
    if np.minimum(p + hi, 1.0).mean() - p.mean() < gain:
        raise ValueError(f"a gain of {gain} is out of reach: the tasks' mean success is {p.mean():.3f}")
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if np.minimum(p + mid, 1.0).mean() - p.mean() < gain else (lo, mid)
    return hi


def clopper_pearson(x: int, n: int) -> tuple[float, float]:
    low = 0.0 if x == 0 else float(beta.ppf(0.025, x, n - x + 1))
    high = 1.0 if x == n else float(beta.ppf(0.975, x + 1, n - x))
    return low, high


def simulate(sample: Sampler, n_tasks: int, k: int, shift: float, trials: int, config: RegistryConfig,
             rng: np.random.Generator) -> tuple[int, int, float, str]:
    """(new-rule promotions, old-rule promotions, mean discordant tasks, the tests used) over `trials` trials."""
    p = sample(rng, (trials, n_tasks))
    reference = rng.binomial(k, p) / k
    candidate = rng.binomial(k, np.minimum(p + shift, 1.0)) / k
    ids = [f"task-{i:03d}" for i in range(n_tasks)]
    hashes, conditions = {t: f"content-of-{t}" for t in ids}, {"k": k, "temperature": 0.6}  # same tasks, same conditions
    new = old = discordant = sign_tests = 0
    for c, r in zip(candidate, reference, strict=True):
        comparison, reason = decide(
            Evaluation(task_success=dict(zip(ids, c.tolist(), strict=True)), task_hashes=hashes, conditions=conditions),
            Evaluation(task_success=dict(zip(ids, r.tolist(), strict=True)), task_hashes=hashes, conditions=conditions),
            "baseline", config)
        assert comparison is not None, reason
        t = comparison.test
        new += t.promote
        old += t.low > config.margin  # the old rule: the bootstrap interval's lower end above the margin
        discordant += t.discordant
        sign_tests += t.test == "exact sign test"
    # with k > 1 a trial whose every score happens to be 0 or 1 gets the sign test, which the sign flips equal there
    used = "sign" if sign_tests == trials else "permutation" if not sign_tests else f"permutation, {sign_tests / trials:.1%} sign"
    return new, old, discordant / trials, used


def rate(x: int, n: int) -> str:
    low, high = clopper_pearson(x, n)
    return f"{x / n:6.2%} [{low:6.2%}, {high:6.2%}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000, help="simulated pairs of evaluations per cell")
    ap.add_argument("--sizes", type=int, nargs="+", default=[20, 50, 200], help="tasks per evaluation")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 4], help="episodes per task (1: pass/fail)")
    ap.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    ap.add_argument("--alpha", type=float, default=RegistryConfig().alpha, help="the configured one-sided level")
    ap.add_argument("--n-perm", type=int, default=2000, help="Monte Carlo sign flips (the registry's default: 20000)")
    ap.add_argument("--gain", type=float, default=0.10, help="the true gain in mean success the power is for")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    config = RegistryConfig(alpha=args.alpha, n_perm=args.n_perm)
    shifts = {name: shift_for_gain(REGIMES[name], args.gain, args.seed) for name in args.regimes}
    print(f"bench/promotion.py: {args.trials} trials per cell; the registry's decide at look 1: one-sided alpha {config.alpha:g} "
          f"spent to {spent_alpha(config.alpha, 1):.4f}, min_discordant {config.min_discordant}, margin "
          f"{config.margin:g}, n_perm {config.n_perm} (registry default {RegistryConfig().n_perm}), n_boot "
          f"{config.n_boot}; old rule: bootstrap lower end > {config.margin:g}")
    print("power: candidate p_i + d, clipped at 1, mean success +{:.2f}; d = {}".format(
        args.gain, ", ".join(f"{name} {d:.3f}" for name, d in shifts.items())))
    header = (f"{'tasks':>5} {'regime':<16} {'k':>2} {'test':<22} {'disc':>5}  {'A/A false promotion [95% CP]':<28} "
              f"{'<=a':<4} {'old rule A/A [95% CP]':<28} {'power +10pt [95% CP]':<28} {'old power':>9}")
    print(header)
    print("-" * len(header))
    started = time.perf_counter()
    worst = 0.0
    above = 0
    for n_tasks in args.sizes:
        for name in args.regimes:
            for k in args.k:
                rng = np.random.default_rng((args.seed, n_tasks, list(REGIMES).index(name), k))
                new, old, disc, test = simulate(REGIMES[name], n_tasks, k, 0.0, args.trials, config, rng)
                power, old_power, _, _ = simulate(REGIMES[name], n_tasks, k, shifts[name], args.trials, config, rng)
                worst = max(worst, new / args.trials)
                above += clopper_pearson(new, args.trials)[0] > config.alpha
                ok = "yes" if new / args.trials <= config.alpha else "NO"
                print(f"{n_tasks:>5} {name:<16} {k:>2} {test:<22} {disc:5.1f}  {rate(new, args.trials):<28} {ok:<4} "
                      f"{rate(old, args.trials):<28} {rate(power, args.trials):<28} {old_power / args.trials:9.2%}",
                      flush=True)
    print(f"highest A/A false-promotion rate {worst:.2%} (alpha {config.alpha:g}); cells whose interval lies wholly above "
          f"alpha: {above}; {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
