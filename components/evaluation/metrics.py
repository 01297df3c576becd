"""Success metrics over episodes, and their 95% intervals.

pass@k    the unbiased estimator of Chen et al. (2021): with n episodes of a task, c of them correct, the
          chance that at least one of k drawn without replacement is correct, 1 - C(n-c, k) / C(n, k).
best@k    the chance that the episode a verifier ranks highest among k drawn without replacement is correct,
          computed exactly from order statistics (score ties broken by a uniform random pick).
roc_auc   the Mann-Whitney U over (score, correct) pairs, average ranks for ties.

Intervals: Wilson for a proportion of independent trials; a percentile bootstrap that resamples tasks
(clusters) with replacement when a task holds several episodes, or for paired differences between runs.
Every interval is 95% and every bootstrap is seeded, so a report is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import numpy as np

from components.envs.episode import Episode, Outcome

T = TypeVar("T")

Z_95 = 1.959963984540054  # the standard normal's 97.5% quantile
NO_DOMAIN = "unknown"  # the domain key for episodes whose `domain` is None


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95% interval; `n` counts the units behind it (trials, tasks, shared tasks)."""

    value: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


# ---------------------------------------------------------------------------------------------- pass@k, best@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: 1 - C(n-c, k) / C(n, k), as the product 1 - prod_{i=n-c+1}^{n} (1 - k/i)."""
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k is defined only for 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:  # every k-subset holds a correct episode
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def _best_at_k_task(scored: Sequence[tuple[float, bool]], k: int) -> float:
    n = len(scored)
    if not 1 <= k <= n:
        raise ValueError(f"best@k is defined only for 1 <= k <= n, got n={n}, k={k}")
    for s, _ in scored:
        if math.isnan(float(s)):
            raise ValueError("best@k: a verifier score is NaN")
    ordered = sorted(((float(s), bool(y)) for s, y in scored), key=lambda p: p[0])
    total = math.comb(n, k)
    expected = 0.0
    below = 0  # episodes with a strictly lower score than the current tie group
    i = 0
    while i < n:
        j = i
        while j < n and ordered[j][0] == ordered[i][0]:
            j += 1
        m = j - i
        # With ties broken by a uniform random order, the group's members take positions below..below+m-1;
        # the group wins (holds the subset's top) with probability sum_pos C(pos, k-1) / C(n, k), and by
        # symmetry the winner is uniform over the group, so it is correct with the group's correct fraction.
        p_group = sum(math.comb(pos, k - 1) for pos in range(below, below + m)) / total
        correct = sum(1 for _, y in ordered[i:j] if y)
        expected += p_group * correct / m
        below += m
        i = j
    return expected


def best_at_k(tasks: Sequence[Sequence[tuple[float, bool]]], k: int) -> float:
    """Mean over tasks of the expected success when a verifier picks the top-scored of k of the task's episodes.

    `tasks` holds, per task, the (verifier score, correct) pair of each of its n episodes; the k are drawn
    without replacement, and a tie for the top score goes to a uniform random one of the tied episodes.
    Every task needs at least k episodes."""
    if not tasks:
        raise ValueError("best@k needs at least one task")
    return float(np.mean([_best_at_k_task(t, k) for t in tasks]))


# -------------------------------------------------------------------------------------------- classification


def _check_scores_labels(scores: Sequence[float], labels: Sequence[bool], what: str) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=bool)
    if s.ndim != 1 or y.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"{what}: scores and labels must be flat and of one length, got {s.shape} and {y.shape}")
    if s.size == 0:
        raise ValueError(f"{what}: no scores")
    if np.isnan(s).any():
        raise ValueError(f"{what}: {int(np.isnan(s).sum())} score(s) are NaN")
    return s, y


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing the mean of the ranks they span."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    ranks = np.empty(len(x), dtype=float)
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], len(x)]
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = (a + 1 + b) / 2.0  # mean of ranks a+1..b
    return ranks


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """ROC AUC as the Mann-Whitney U / (n_pos * n_neg): P(score_pos > score_neg) + P(tie) / 2."""
    s, y = _check_scores_labels(scores, labels, "roc_auc")
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        absent = "positive (correct)" if n_pos == 0 else "negative (incorrect)"
        raise ValueError(f"roc_auc is undefined with one class: no {absent} labels among {y.size}")
    ranks = _average_ranks(s)
    u = float(ranks[y].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def accuracy(scores: Sequence[float], labels: Sequence[bool], threshold: float = 0.5) -> float:
    """The fraction of episodes where (score >= threshold) agrees with the label."""
    s, y = _check_scores_labels(scores, labels, "accuracy")
    return float(np.mean((s >= threshold) == y))


# ------------------------------------------------------------------------------------------------- intervals


def wilson_interval(successes: int, n: int) -> Estimate:
    """The 95% Wilson score interval for successes out of n independent trials (value: the plain proportion)."""
    if n <= 0:
        raise ValueError(f"wilson_interval needs n >= 1, got n={n}")
    if not 0 <= successes <= n:
        raise ValueError(f"wilson_interval needs 0 <= successes <= n, got successes={successes}, n={n}")
    p = successes / n
    z2 = Z_95 * Z_95
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = Z_95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return Estimate(value=p, low=max(0.0, centre - half), high=min(1.0, centre + half), n=n)


def bootstrap_interval(stat_fn: Callable[[Sequence[T]], float], groups: Sequence[T], n_boot: int = 2000,
                       seed: int = 0) -> Estimate:
    """A 95% percentile interval for stat_fn(groups), resampling the groups (tasks, clusters) with replacement.

    `value` is stat_fn on the groups as given; `n` is the number of groups. A resample on which stat_fn raises
    ValueError (an AUC drawn with one class only) is left out; if every one does, the ValueError stands."""
    if not groups:
        raise ValueError("bootstrap_interval needs at least one group")
    if n_boot < 1:
        raise ValueError(f"bootstrap_interval needs n_boot >= 1, got {n_boot}")
    value = float(stat_fn(groups))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(groups), size=(n_boot, len(groups)))
    stats: list[float] = []
    for row in idx:
        try:
            stats.append(float(stat_fn([groups[i] for i in row])))
        except ValueError:
            continue
    if not stats:
        raise ValueError(f"bootstrap_interval: the statistic failed on all {n_boot} resamples")
    low, high = np.quantile(np.asarray(stats), [0.025, 0.975])
    return Estimate(value=value, low=float(low), high=float(high), n=len(groups))


def paired_difference(a: Mapping[Hashable, float], b: Mapping[Hashable, float], n_boot: int = 2000,
                      seed: int = 0) -> Estimate:
    """mean(a[t] - b[t]) over the task ids both hold, with a 95% cluster-bootstrap interval over those tasks.

    `a` and `b` map a task id to its success in [0, 1] (e.g. pass@1 of the task) under two runs;
    `n` in the result is the number of shared tasks."""
    shared = sorted(set(a) & set(b), key=str)
    if not shared:
        raise ValueError(f"paired_difference: no shared task ids ({len(a)} in a, {len(b)} in b)")
    diffs = np.asarray([float(a[t]) - float(b[t]) for t in shared])
    for t, x, y in ((t, a[t], b[t]) for t in shared):
        if not (0.0 <= float(x) <= 1.0 and 0.0 <= float(y) <= 1.0):
            raise ValueError(f"paired_difference: task {t!r} has success outside [0, 1] (a={x}, b={y})")
    rng = np.random.default_rng(seed)
    boot = diffs[rng.integers(0, len(diffs), size=(n_boot, len(diffs)))].mean(axis=1)
    low, high = np.quantile(boot, [0.025, 0.975])
    return Estimate(value=float(diffs.mean()), low=float(low), high=float(high), n=len(shared))


# ---------------------------------------------------------------------------------------------- the report


def _group_report(tasks: dict[str, list[Episode]], n_unfinished: int, ks: Sequence[int],
                  scores: Mapping[str, float] | None, n_boot: int, seed: int) -> dict[str, Any]:
    counts = {t: (len(eps), sum(1 for e in eps if e.outcome is Outcome.CORRECT)) for t, eps in tasks.items()}
    out: dict[str, Any] = {
        "n_tasks": len(tasks),
        "n_episodes": sum(n for n, _ in counts.values()),
        "n_unfinished": n_unfinished,
        "min_episodes_per_task": min((n for n, _ in counts.values()), default=0),
        "pass@1": None,
        "pass@k": {},
        "skipped_k": {},
    }
    if scores is not None:
        out["best@k"] = {}
    if not tasks:
        out["skipped_k"] = {str(k): "no finished episodes" for k in ks}
        return out
    per_task = [c / n for n, c in counts.values()]
    if all(n == 1 for n, _ in counts.values()):
        est = wilson_interval(sum(c for _, c in counts.values()), len(counts))
        method = "wilson"
    else:
        est = bootstrap_interval(lambda g: float(np.mean(g)), per_task, n_boot=n_boot, seed=seed)
        method = "bootstrap"
    out["pass@1"] = {**est.as_dict(), "value": float(np.mean(per_task)), "method": method}
    min_n = out["min_episodes_per_task"]
    for k in ks:
        if k > min_n:
            short = sum(1 for n, _ in counts.values() if n < k)
            out["skipped_k"][str(k)] = f"{short} of {len(counts)} tasks have fewer than {k} episodes (min {min_n})"
            continue
        out["pass@k"][str(k)] = float(np.mean([pass_at_k(n, c, k) for n, c in counts.values()]))
        if scores is not None:
            scored = [[(scores[e.episode_id], e.outcome is Outcome.CORRECT) for e in eps] for eps in tasks.values()]
            out["best@k"][str(k)] = best_at_k(scored, k)
    return out


def success_report(episodes: Sequence[Episode], ks: Sequence[int] = (1, 2, 4, 8),
                   scores: Mapping[str, float] | None = None, n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Success per domain and overall, as plain JSON-serializable dicts.

    Each group holds n_tasks, n_episodes, n_unfinished (episodes whose outcome is None: left out of every
    figure), pass@1 (mean over tasks of c/n, with a Wilson interval when every task has one episode and a
    task bootstrap otherwise), pass@k for each k that every task of the group reaches (others listed in
    skipped_k with the reason) and, when `scores` (episode_id -> verifier score) is given, best@k for the same k.
    Domain None is reported as "unknown"."""
    if any(k < 1 for k in ks):
        raise ValueError(f"success_report: every k must be >= 1, got {list(ks)}")
    seen: set[str] = set()
    for e in episodes:
        if e.episode_id in seen:
            raise ValueError(f"success_report: episode id {e.episode_id!r} appears more than once")
        seen.add(e.episode_id)
    finished = [e for e in episodes if e.outcome is not None]
    if scores is not None:
        missing = [e.episode_id for e in finished if e.episode_id not in scores]
        if missing:
            raise ValueError(f"success_report: {len(missing)} finished episode(s) have no score, e.g. {missing[:3]}")
    domain_of: dict[str, str] = {}
    for e in episodes:
        d = e.domain if e.domain is not None else NO_DOMAIN
        if domain_of.setdefault(e.task_id, d) != d:
            raise ValueError(f"success_report: task {e.task_id!r} has episodes in domains {domain_of[e.task_id]!r} and {d!r}")

    def tasks_of(eps: Sequence[Episode]) -> dict[str, list[Episode]]:
        out: dict[str, list[Episode]] = {}
        for e in eps:
            out.setdefault(e.task_id, []).append(e)
        return out

    domains = sorted(set(domain_of.values()))
    by_domain = {
        d: _group_report(tasks_of([e for e in finished if domain_of[e.task_id] == d]),
                         sum(1 for e in episodes if e.outcome is None and domain_of[e.task_id] == d), ks, scores, n_boot, seed)
        for d in domains
    }
    overall = _group_report(tasks_of(finished), len(episodes) - len(finished), ks, scores, n_boot, seed)
    return {"ks": [int(k) for k in ks], "overall": overall, "by_domain": by_domain}
