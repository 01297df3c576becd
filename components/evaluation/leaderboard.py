"""A leaderboard over several held-out rollouts: a headline with its 95% interval, per dataset and per domain,
sampled pass@k and best@k apart, turns, the outcome taxonomy, and each rollout against a baseline task by task.

The headline is greedy pass@1 as the paper reports it: each task's episodes at temperature 0 (a collection's
first sample), the share that ended correct, averaged over the tasks of each dataset and then over the datasets,
so that a large dataset does not outweigh a small one. Its interval resamples tasks within each dataset; with one
dataset it is the pooled figure. The pooled mean over all tasks stands beside it (metrics.success_report's pass@1:
a Wilson interval when every task has one episode, a task bootstrap otherwise).

Sampled episodes (temperature > 0) are reported apart: pass@k over them alone (the greedy episode is not a draw
of the same distribution) and best@k with verifier scores. Greedy and sampled results are never ranked or
differenced against each other: rows are ranked on the headline, a row without greedy episodes is listed after
them without a rank, and the difference against the baseline pairs greedy with greedy (or, where neither has
greedy episodes, sampled with sampled), else it is left out and the row says why. An episode that records no
policy cannot be placed on either side and is refused.

The difference against the baseline is report.compare's: candidate − baseline over the tasks both played, pooled,
with a paired bootstrap interval over those tasks (the interval of the difference, not two overlapping ones).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from components.envs.episode import Episode
from components.evaluation.metrics import success_report
from components.evaluation.report import KS, compare, finished, task_success
from components.evaluation.taxonomy import class_order, taxonomy, taxonomy_by_domain


class Interval(BaseModel):
    """A point estimate with its 95% interval; `n` counts the units behind it (tasks, or trials for Wilson)."""

    value: float
    low: float
    high: float
    n: int
    method: str | None = None  # wilson | bootstrap | stratified bootstrap (success intervals); None for differences

    def cell(self, signed: bool = False) -> str:
        f = "{:+.3f}" if signed else "{:.3f}"
        return f"{f.format(self.value)} [{f.format(self.low)}, {f.format(self.high)}]"


class Difference(BaseModel):
    """candidate − baseline over the shared tasks, overall (`difference`) and per domain, on one decoding."""

    decoding: Literal["greedy", "sampled"]  # both sides' episodes of this kind only
    difference: Interval
    tasks: int  # shared tasks
    baseline_only: int
    candidate_only: int
    baseline: float  # the baseline's success over the shared tasks
    candidate: float
    by_domain: dict[str, Interval] = Field(default_factory=dict)


class Sampled(BaseModel):
    """A rollout's sampled episodes (temperature > 0), reported apart from the greedy headline."""

    temperatures: list[float]
    n_tasks: int
    n_episodes: int
    success: Interval | None  # sampled pass@1: the mean over tasks of the share of their episodes that ended correct
    pass_at_k: dict[str, float] = Field(default_factory=dict)  # k > 1 that every task reaches
    best_at_k: dict[str, float] = Field(default_factory=dict)  # with verifier scores only


class Row(BaseModel):
    rollout: str
    rank: int | None  # None: no greedy episodes, so not ranked against the greedy headline
    n_tasks: int
    n_episodes: int
    n_unfinished: int
    success: Interval | None  # the headline: greedy pass@1, the mean over datasets; None without greedy episodes
    pooled: Interval | None  # greedy pass@1, the mean over all tasks
    datasets: dict[str, Interval | None] = Field(default_factory=dict)  # greedy pass@1 per dataset
    domains: dict[str, Interval | None]  # greedy pass@1 per domain
    sampled: Sampled | None = None  # None without sampled episodes
    turns_mean: float | None  # over finished episodes
    taxonomy: dict[str, int]
    taxonomy_by_domain: dict[str, dict[str, int]]
    versus_baseline: Difference | None = None  # None for the baseline itself, without a baseline, or see the note
    versus_baseline_note: str | None = None  # why a row has no difference against the baseline
    # against the rollout of the model this one was trained from (GRPO against the SFT model it started from)
    parent: str | None = None
    versus_parent: Difference | None = None
    versus_parent_note: str | None = None


class Leaderboard(BaseModel):
    baseline: str | None
    ks: list[int]
    datasets: list[str] = Field(default_factory=list)
    domains: list[str]
    classes: list[str]  # every outcome class any row holds, in display order
    rows: list[Row]  # ranked, best first

    def row(self, rollout: str) -> Row:
        for r in self.rows:
            if r.rollout == rollout:
                return r
        raise KeyError(f"no rollout {rollout!r} on the leaderboard (it has: {', '.join(self.names())})")

    def names(self) -> list[str]:
        return [r.rollout for r in self.rows]

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_json(self, indent: int | None = 1) -> str:
        return self.model_dump_json(indent=indent)

    def metrics(self) -> dict[str, float]:
        """Flat numeric metrics, `<rollout>.<what>`: for an MLflow run (keys are not sanitized here)."""
        out: dict[str, float] = {}
        for r in self.rows:
            p = r.rollout
            if r.rank is not None:
                out[f"{p}.rank"] = r.rank
            out[f"{p}.n_tasks"] = r.n_tasks
            out[f"{p}.n_episodes"] = r.n_episodes
            for name, est in (("success", r.success), ("pooled", r.pooled)):
                if est is not None:
                    out.update({f"{p}.{name}": est.value, f"{p}.{name}_low": est.low, f"{p}.{name}_high": est.high})
            for group, estimates in (("dataset", r.datasets), ("domain", r.domains)):
                for d, est in estimates.items():
                    if est is not None:
                        out.update({f"{p}.{group}.{d}.success": est.value, f"{p}.{group}.{d}.success_low": est.low,
                                    f"{p}.{group}.{d}.success_high": est.high})
            if (sm := r.sampled) is not None:
                if sm.success is not None:
                    out[f"{p}.sampled.pass_at_1"] = sm.success.value
                out.update({f"{p}.sampled.pass_at_{k}": v for k, v in sm.pass_at_k.items()})
                out.update({f"{p}.sampled.best_at_{k}": v for k, v in sm.best_at_k.items()})
            if r.turns_mean is not None:
                out[f"{p}.turns_mean"] = r.turns_mean
            out.update({f"{p}.taxonomy.{c}": float(n) for c, n in r.taxonomy.items()})
            for versus, diff in (("versus_baseline", r.versus_baseline), ("versus_parent", r.versus_parent)):
                if diff is not None:
                    d = diff.difference
                    out.update({f"{p}.{versus}.difference": d.value, f"{p}.{versus}.low": d.low,
                                f"{p}.{versus}.high": d.high, f"{p}.{versus}.tasks": d.n})
        return {k: float(v) for k, v in out.items()}

    # ------------------------------------------------------------------------------------------- markdown
    def to_markdown(self, title: str = "Leaderboard") -> str:
        lines = [f"# {title}", ""]
        lines.append("Headline: greedy pass@1 (each task's episodes at temperature 0, the share that ended correct), "
                     "the mean over datasets (the paper's convention), with a 95% interval from a bootstrap of tasks "
                     "within each dataset; pooled: the mean over all tasks, with its 95% interval (Wilson when every "
                     "task has one episode, else a bootstrap over tasks). Sampled episodes (temperature > 0) are "
                     "reported apart and never ranked or compared with greedy ones.")
        if self.baseline is not None:
            lines.append(f"Δ: candidate − baseline (`{_md(self.baseline)}`), greedy with greedy (sampled with sampled "
                         "where neither has greedy episodes), pooled over the tasks both played, with a paired 95% "
                         "bootstrap interval over those tasks.")
        lines += ["", "## Ranking (greedy pass@1)", ""]
        head = ["#", "rollout", "mean over datasets (95% CI)", "pooled (95% CI)"]
        if self.baseline is not None:
            head.append("Δ vs baseline (95% CI)")
        lines += _table_head([*head, "turns", "tasks", "episodes"])
        for r in self.rows:
            cells = [str(r.rank) if r.rank is not None else "–",
                     _md(r.rollout) + (" (baseline)" if r.rollout == self.baseline else ""),
                     r.success.cell() if r.success is not None else "– (no greedy episodes)",
                     r.pooled.cell() if r.pooled is not None else "–"]
            if self.baseline is not None:
                cells.append(_delta(r.versus_baseline) if r.versus_baseline is not None else "–")
            cells += [_num(r.turns_mean, 2), str(r.n_tasks), str(r.n_episodes)]
            lines.append(_table_row(cells))
        notes = [f"- {_md(r.rollout)}: {r.versus_baseline_note}" for r in self.rows if r.versus_baseline_note]
        if notes:
            lines += ["", *notes]
        children = [r for r in self.rows if r.parent is not None]
        if children:
            lines += ["", "## Against the model each started from", "",
                      "Each trained model's rollout against the rollout of the model its training started from (its "
                      "`init`), on the same decoding and pooled over the tasks both played, with a paired 95% "
                      "bootstrap interval over those tasks: what that stage added.", ""]
            lines += _table_head(["rollout", "started from", "Δ (95% CI)", "tasks", "started from: success",
                                  "this: success"])
            for r in children:
                vs = r.versus_parent
                figures = [_delta(vs), str(vs.tasks), _num(vs.baseline), _num(vs.candidate)] if vs is not None else \
                    [f"– ({r.versus_parent_note})", "–", "–", "–"]
                lines.append(_table_row([_md(r.rollout), _md(r.parent or ""), *figures]))
        for heading, keys, of in (("Greedy pass@1 by dataset", self.datasets, lambda r: r.datasets),
                                  ("Greedy pass@1 by domain", self.domains, lambda r: r.domains)):
            lines += ["", f"## {heading}", ""]
            lines += _table_head(["rollout", *[_md(k) for k in keys]])
            for r in self.rows:
                estimates = [of(r).get(k) for k in keys]
                lines.append(_table_row([_md(r.rollout), *[e.cell() if e is not None else "–" for e in estimates]]))
        sampled = [r for r in self.rows if r.sampled is not None]
        if sampled:
            at_k = sorted({int(k) for r in sampled for k in r.sampled.pass_at_k})
            best_k = sorted({int(k) for r in sampled for k in r.sampled.best_at_k})
            lines += ["", "## Sampled (temperature > 0)", "",
                      "Over each rollout's sampled episodes alone (a greedy episode is not among them): pass@1 with "
                      "its 95% interval, unbiased pass@k for each k every task reaches, and best@k (the verifier's pick "
                      "among k). Not comparable with the greedy headline.", ""]
            lines += _table_head(["rollout", "temperature", "tasks", "episodes", "pass@1 (95% CI)",
                                  *[f"pass@{k}" for k in at_k], *[f"best@{k}" for k in best_k]])
            for r in sampled:
                sm = r.sampled
                lines.append(_table_row([_md(r.rollout), ", ".join(f"{t:g}" for t in sm.temperatures), str(sm.n_tasks),
                                         str(sm.n_episodes), sm.success.cell() if sm.success is not None else "–",
                                         *[_num(sm.pass_at_k.get(str(k))) for k in at_k],
                                         *[_num(sm.best_at_k.get(str(k))) for k in best_k]]))
        lines += ["", "## Outcome classes", "", "Episodes per class, greedy and sampled (see components/evaluation/taxonomy.py).", ""]
        lines += _table_head(["rollout", *[_md(c) for c in self.classes], "total"])
        for r in self.rows:
            total = sum(r.taxonomy.values())
            lines.append(_table_row([_md(r.rollout), *[str(r.taxonomy.get(c, 0)) for c in self.classes], str(total)]))
        return "\n".join(lines) + "\n"


def _delta(diff: Difference) -> str:
    """A paired difference as a table cell, marked where it pairs sampled episodes."""
    return diff.difference.cell(signed=True) + ("" if diff.decoding == "greedy" else " (sampled)")


def _md(text: str) -> str:
    return str(text).replace("|", "\\|")


def _num(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _table_head(cells: Sequence[str]) -> list[str]:
    return [_table_row(cells), _table_row(["---"] * len(cells))]


def _table_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


# ------------------------------------------------------------------------------------------------ building


def _interval(group: Mapping[str, Any] | None) -> Interval | None:
    if group is None:
        return None
    return Interval(value=group["value"], low=group["low"], high=group["high"], n=group["n"], method=group.get("method"))


def by_decoding(name: str, episodes: Sequence[Episode]) -> tuple[list[Episode], list[Episode]]:
    """(greedy, sampled): episodes played at temperature 0, and above it."""
    greedy, sampled = [], []
    for e in episodes:
        if e.policy is None:
            raise ValueError(f"rollout {name!r}: episode {e.episode_id!r} records no policy, so its temperature is "
                             "unknown and it can be counted neither as greedy nor as sampled")
        (greedy if e.policy.sampling.temperature == 0 else sampled).append(e)
    return greedy, sampled


def _dataset(e: Episode) -> str:
    return e.dataset or "unknown"


def mean_over_datasets(episodes: Sequence[Episode], n_boot: int = 2000, seed: int = 0) -> Interval | None:
    """The mean over datasets of each dataset's mean task success, with a 95% percentile interval that resamples
    tasks with replacement within each dataset (the datasets themselves are fixed, not sampled)."""
    dataset_of = {e.task_id: _dataset(e) for e in episodes}
    groups: dict[str, list[float]] = defaultdict(list)
    for task, value in task_success(episodes).items():
        groups[dataset_of[task]].append(value)
    if not groups:
        return None
    arrays = [np.asarray(v) for _, v in sorted(groups.items())]
    rng = np.random.default_rng(seed)
    boot = np.mean([a[rng.integers(0, len(a), size=(n_boot, len(a)))].mean(axis=1) for a in arrays], axis=0)
    low, high = np.quantile(boot, [0.025, 0.975])
    return Interval(value=float(np.mean([a.mean() for a in arrays])), low=float(low), high=float(high),
                    n=sum(len(a) for a in arrays), method="stratified bootstrap")


def _greedy(greedy: Sequence[Episode], n_boot: int, seed: int) -> dict[str, Any]:
    """A row's greedy figures: the headline, the pooled mean, per dataset and per domain."""
    report = success_report(greedy, ks=(1,), n_boot=n_boot, seed=seed)
    pooled = _interval(report["overall"]["pass@1"])
    by_dataset: dict[str, list[Episode]] = defaultdict(list)
    for e in greedy:
        by_dataset[_dataset(e)].append(e)
    datasets = {d: _interval(success_report(eps, ks=(1,), n_boot=n_boot, seed=seed)["overall"]["pass@1"])
                for d, eps in sorted(by_dataset.items())}
    # with one dataset the two means are one number: keep the pooled interval, whose method suits one group
    several = sum(e is not None for e in datasets.values()) > 1
    return {"success": mean_over_datasets(greedy, n_boot=n_boot, seed=seed) if several else pooled, "pooled": pooled,
            "datasets": datasets, "domains": {d: _interval(g["pass@1"]) for d, g in report["by_domain"].items()}}


def _sampled(sampled: Sequence[Episode], ks: Sequence[int], scores: Mapping[str, float] | None, n_boot: int,
             seed: int) -> Sampled:
    overall = success_report(sampled, ks=ks, scores=scores, n_boot=n_boot, seed=seed)["overall"]
    return Sampled(temperatures=sorted({e.policy.sampling.temperature for e in sampled if e.policy is not None}),
                   n_tasks=overall["n_tasks"], n_episodes=overall["n_episodes"], success=_interval(overall["pass@1"]),
                   pass_at_k={k: v for k, v in overall["pass@k"].items() if int(k) > 1},
                   best_at_k={k: v for k, v in overall.get("best@k", {}).items() if int(k) > 1})


def _row(name: str, episodes: Sequence[Episode], ks: Sequence[int], scores: Mapping[str, float] | None,
         n_boot: int, seed: int) -> Row:
    greedy, sampled = by_decoding(name, episodes)
    done = finished(episodes)
    figures = _greedy(greedy, n_boot, seed) if greedy else {"success": None, "pooled": None, "domains": {}}
    return Row(
        rollout=name, rank=None, n_tasks=len({e.task_id for e in done}), n_episodes=len(done),
        n_unfinished=len(episodes) - len(done), **figures,
        sampled=_sampled(sampled, ks, scores, n_boot, seed) if sampled else None,
        turns_mean=sum(len(e.turns) for e in done) / len(done) if done else None,
        taxonomy=taxonomy(episodes), taxonomy_by_domain=taxonomy_by_domain(episodes),
    )


def _difference(name: str, candidate: Sequence[Episode], baseline_name: str,
                baseline: Sequence[Episode], seed: int, against: str = "the baseline") -> tuple[Difference | None, str | None]:
    """The difference on the decoding both rollouts share (greedy first), or None and the reason."""
    base_greedy, base_sampled = by_decoding(baseline_name, baseline)
    cand_greedy, cand_sampled = by_decoding(name, candidate)
    if base_greedy and cand_greedy:
        decoding, base, cand = "greedy", base_greedy, cand_greedy
    elif not base_greedy and not cand_greedy and base_sampled and cand_sampled:
        decoding, base, cand = "sampled", base_sampled, cand_sampled
    else:
        has = f"{against} has greedy episodes and this rollout none" if base_greedy else \
            f"this rollout has greedy episodes and {against} none"
        return None, f"not compared with {against}: {has}, and greedy and sampled results are not compared"
    try:
        rep = compare(base, cand, seed=seed)
    except ValueError as exc:
        raise ValueError(f"rollout {name!r} against {against} ({decoding} episodes): {exc}") from None
    o = rep["overall"]
    return Difference(decoding=decoding, difference=Interval(**o["difference"]), tasks=rep["tasks"],
                      baseline_only=rep["baseline_only"], candidate_only=rep["candidate_only"], baseline=o["baseline"],
                      candidate=o["candidate"],
                      by_domain={d: Interval(**e["difference"]) for d, e in rep.get("by_domain", {}).items()}), None


def _rank(rows: list[Row]) -> list[Row]:
    """Rows with a headline ranked on it (then on its lower bound; ties share a rank), then the rest unranked,
    best sampled pass@1 first."""
    def key(r: Row) -> tuple[float, float]:
        assert r.success is not None
        return (r.success.value, r.success.low)

    def sampled_key(r: Row) -> float:
        return r.sampled.success.value if r.sampled is not None and r.sampled.success is not None else float("-inf")

    ranked = sorted((r for r in rows if r.success is not None), key=lambda r: (-key(r)[0], -key(r)[1], r.rollout))
    out: list[Row] = []
    for i, r in enumerate(ranked):
        rank = out[-1].rank if out and key(out[-1]) == key(r) else i + 1
        out.append(r.model_copy(update={"rank": rank}))
    unranked = sorted((r for r in rows if r.success is None), key=lambda r: (-sampled_key(r), r.rollout))
    return out + [r.model_copy(update={"rank": None}) for r in unranked]


def leaderboard(rollouts: Mapping[str, Sequence[Episode]], baseline: str | None = None,
                scores: Mapping[str, Mapping[str, float]] | None = None, ks: Sequence[int] = KS,
                n_boot: int = 2000, seed: int = 0, parents: Mapping[str, str] | None = None) -> Leaderboard:
    """One row per rollout (name -> its episodes), ranked on the greedy headline; `baseline`, when given, names one
    of them, and every other row carries its paired difference against it on the same decoding. `scores` maps a
    rollout to its verifier scores (episode_id -> score over its finished episodes) and adds best@k over that
    rollout's sampled episodes. `parents` maps a rollout to the rollout of the model it was trained from (both
    among `rollouts`): its row carries that paired difference too."""
    if not rollouts:
        raise ValueError("leaderboard needs at least one rollout")
    if baseline is not None and baseline not in rollouts:
        raise ValueError(f"the baseline {baseline!r} is not one of the rollouts ({', '.join(rollouts)})")
    for child, parent in (parents or {}).items():
        if child not in rollouts or parent not in rollouts:
            raise ValueError(f"parents: {child!r} -> {parent!r} names a rollout the leaderboard does not hold "
                             f"({', '.join(rollouts)})")
    rows = []
    for name, episodes in rollouts.items():
        row = _row(name, episodes, ks, (scores or {}).get(name), n_boot, seed)
        if baseline is not None and name != baseline:
            row.versus_baseline, row.versus_baseline_note = _difference(name, episodes, baseline, rollouts[baseline], seed)
        if (parent := (parents or {}).get(name)) is not None:
            row.parent = parent
            row.versus_parent, row.versus_parent_note = _difference(name, episodes, parent, rollouts[parent], seed,
                                                                    against=f"`{parent}`")
        rows.append(row)
    datasets = sorted({d for r in rows for d in r.datasets})
    domains = sorted({d for r in rows for d in r.domains})
    classes = class_order(c for r in rows for c in r.taxonomy)
    return Leaderboard(baseline=baseline, ks=[int(k) for k in ks], datasets=datasets, domains=domains,
                       classes=classes, rows=_rank(rows))
