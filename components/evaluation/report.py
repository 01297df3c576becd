"""Evaluation reports over rollouts: success per domain, a run against a baseline, and the verifier at work.

`compare` pairs two rollouts of the same tasks (same seeds) task by task, so the interval is that of the
difference, not two overlapping intervals. `verifier_report` scores held-out episodes: accuracy, ROC AUC with
a bootstrap over tasks, and best@k next to unbiased pass@k for k = 1, 2, 4, 8 where every task has k episodes.
The AUC is reported twice: over every finished episode, and over those that submitted an answer only. A run that
never submitted is an easy NO, so the first flatters the verifier; the second is how well it judges answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from components.envs.episode import Episode, Outcome
from components.evaluation.metrics import (
    NO_DOMAIN,
    accuracy,
    best_at_k,
    bootstrap_interval,
    paired_difference,
    pass_at_k,
    roc_auc,
)

KS = (1, 2, 4, 8)


def finished(episodes: Sequence[Episode]) -> list[Episode]:
    return [e for e in episodes if e.outcome is not None]


def task_success(episodes: Sequence[Episode]) -> dict[str, float]:
    """Per task, the share of its finished episodes that ended correct."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for e in finished(episodes):
        by_task[e.task_id].append(e.outcome == Outcome.CORRECT)
    return {t: sum(v) / len(v) for t, v in by_task.items()}


def _domains(episodes: Sequence[Episode]) -> dict[str, str]:
    return {e.task_id: e.domain or NO_DOMAIN for e in episodes}


def compare(baseline: Sequence[Episode], candidate: Sequence[Episode], seed: int = 0) -> dict[str, Any]:
    """candidate − baseline success over the tasks both played, overall and per domain, with 95% intervals."""
    a, b = task_success(baseline), task_success(candidate)
    shared = sorted(set(a) & set(b))
    if not shared:
        raise ValueError("the two rollouts share no task: evaluate them on the same split, limit and seed")
    domains = _domains([*baseline, *candidate])
    out: dict[str, Any] = {"tasks": len(shared), "baseline_only": len(set(a) - set(b)),
                           "candidate_only": len(set(b) - set(a))}
    groups: dict[str, list[str]] = defaultdict(list)
    for t in shared:
        groups[domains[t]].append(t)
    for name, tasks in [("overall", shared), *sorted(groups.items())]:
        diff = paired_difference({t: b[t] for t in tasks}, {t: a[t] for t in tasks}, seed=seed)  # candidate − baseline
        entry = {"baseline": sum(a[t] for t in tasks) / len(tasks), "candidate": sum(b[t] for t in tasks) / len(tasks),
                 "difference": diff.as_dict()}
        if name == "overall":
            out["overall"] = entry
        else:
            out.setdefault("by_domain", {})[name] = entry
    return out


def verifier_report(episodes: Sequence[Episode], scores: Mapping[str, float], ks: Sequence[int] = KS,
                    seed: int = 0) -> dict[str, Any]:
    """How well scores separate correct from incorrect finished episodes, and what picking by them buys."""
    eps = [e for e in finished(episodes) if e.episode_id in scores]
    labels = [e.outcome == Outcome.CORRECT for e in eps]
    s = [scores[e.episode_id] for e in eps]
    out: dict[str, Any] = {"episodes": len(eps), "correct": sum(labels), "accuracy": accuracy(s, labels)}
    by_task: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for e, sc, lab in zip(eps, s, labels, strict=True):
        by_task[e.task_id].append((sc, lab))
    tasks = list(by_task.values())
    out["auc"], why = _auc(eps, scores, seed, "scored episodes")
    if why:
        out["auc_undefined"] = why
    submitted = [e for e in eps if e.submitted]
    out["submitted"] = len(submitted)
    out["auc_submitted"], why = _auc(submitted, scores, seed, "scored episodes that submitted")
    if why:
        out["auc_submitted_undefined"] = why
    out["pass@1"] = sum(sum(y for _, y in t) / len(t) for t in tasks) / len(tasks) if tasks else None
    out["at_k"] = {}
    for k in ks:
        if not by_task or min(len(v) for v in by_task.values()) < k:
            continue
        out["at_k"][str(k)] = {"pass@k": sum(pass_at_k(len(t), sum(y for _, y in t), k) for t in tasks) / len(tasks),
                               "best@k": best_at_k(tasks, k)}
    return out


def _auc(episodes: Sequence[Episode], scores: Mapping[str, float], seed: int, what: str
         ) -> tuple[dict[str, Any] | None, str | None]:
    """ROC AUC of the scores over these episodes with a 95% bootstrap interval over their tasks (`n`: tasks), or
    None and why it is undefined."""
    labels = [e.outcome == Outcome.CORRECT for e in episodes]
    if not 0 < sum(labels) < len(labels):
        return None, f"{sum(labels)} of {len(labels)} {what} are correct: AUC needs both classes"
    by_task: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for e, y in zip(episodes, labels, strict=True):
        by_task[e.task_id].append((scores[e.episode_id], y))
    auc = bootstrap_interval(lambda ts: roc_auc([x for t in ts for x, _ in t], [y for t in ts for _, y in t]),
                             list(by_task.values()), seed=seed)
    return auc.as_dict(), None
