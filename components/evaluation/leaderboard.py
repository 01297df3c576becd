"""A leaderboard over several held-out rollouts: success with 95% intervals, per domain, pass@k and best@k,
turns, the outcome taxonomy, and each rollout against a baseline task by task.

Success is metrics.success_report's pass@1: the mean over tasks of the share of a task's finished episodes that
ended correct, with a Wilson interval when every task has one episode and a task bootstrap otherwise. The
difference against the baseline is report.compare's: candidate − baseline over the tasks both played, with a
paired bootstrap interval over those tasks (so it is the interval of the difference, not two overlapping ones).
Rows are ranked by success, then by the interval's lower bound; rows that tie on both share a rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from components.envs.episode import Episode
from components.evaluation.metrics import success_report
from components.evaluation.report import KS, compare, finished
from components.evaluation.taxonomy import class_order, taxonomy, taxonomy_by_domain


class Interval(BaseModel):
    """A point estimate with its 95% interval; `n` counts the units behind it (tasks, or trials for Wilson)."""

    value: float
    low: float
    high: float
    n: int
    method: str | None = None  # wilson | bootstrap (the success intervals); None for differences

    def cell(self, signed: bool = False) -> str:
        f = "{:+.3f}" if signed else "{:.3f}"
        return f"{f.format(self.value)} [{f.format(self.low)}, {f.format(self.high)}]"


class Difference(BaseModel):
    """candidate − baseline over the shared tasks, overall (`difference`) and per domain."""

    difference: Interval
    tasks: int  # shared tasks
    baseline_only: int
    candidate_only: int
    baseline: float  # the baseline's success over the shared tasks
    candidate: float
    by_domain: dict[str, Interval] = Field(default_factory=dict)


class Row(BaseModel):
    rollout: str
    rank: int
    n_tasks: int
    n_episodes: int
    n_unfinished: int
    success: Interval | None  # None when the rollout has no finished episode
    domains: dict[str, Interval | None]
    pass_at_k: dict[str, float] = Field(default_factory=dict)  # k > 1 that every task reaches
    best_at_k: dict[str, float] = Field(default_factory=dict)  # with verifier scores only
    turns_mean: float | None  # over finished episodes
    taxonomy: dict[str, int]
    taxonomy_by_domain: dict[str, dict[str, int]]
    versus_baseline: Difference | None = None  # None for the baseline itself and without a baseline


class Leaderboard(BaseModel):
    baseline: str | None
    ks: list[int]
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
            out[f"{p}.rank"] = r.rank
            out[f"{p}.n_tasks"] = r.n_tasks
            out[f"{p}.n_episodes"] = r.n_episodes
            if r.success is not None:
                out.update({f"{p}.success": r.success.value, f"{p}.success_low": r.success.low,
                            f"{p}.success_high": r.success.high})
            for d, est in r.domains.items():
                if est is not None:
                    out.update({f"{p}.domain.{d}.success": est.value, f"{p}.domain.{d}.success_low": est.low,
                                f"{p}.domain.{d}.success_high": est.high})
            out.update({f"{p}.pass_at_{k}": v for k, v in r.pass_at_k.items()})
            out.update({f"{p}.best_at_{k}": v for k, v in r.best_at_k.items()})
            if r.turns_mean is not None:
                out[f"{p}.turns_mean"] = r.turns_mean
            out.update({f"{p}.taxonomy.{c}": float(n) for c, n in r.taxonomy.items()})
            if r.versus_baseline is not None:
                d = r.versus_baseline.difference
                out.update({f"{p}.versus_baseline.difference": d.value, f"{p}.versus_baseline.low": d.low,
                            f"{p}.versus_baseline.high": d.high, f"{p}.versus_baseline.tasks": d.n})
        return {k: float(v) for k, v in out.items()}

    # ------------------------------------------------------------------------------------------- markdown
    def to_markdown(self, title: str = "Leaderboard") -> str:
        at_k = sorted({int(k) for r in self.rows for k in r.pass_at_k})
        best_k = sorted({int(k) for r in self.rows for k in r.best_at_k})
        lines = [f"# {title}", ""]
        lines.append("Success: the mean over tasks of the share of each task's finished episodes that ended correct, "
                     "with its 95% interval (Wilson when every task has one episode, else a bootstrap over tasks).")
        if self.baseline is not None:
            lines.append(f"Δ: candidate − baseline (`{_md(self.baseline)}`) over the tasks both played, with a paired "
                         "95% bootstrap interval over those tasks.")
        lines += ["", "## Ranking", ""]
        head = ["#", "rollout", "success (95% CI)"]
        if self.baseline is not None:
            head.append("Δ vs baseline (95% CI)")
        head += [f"pass@{k}" for k in at_k] + [f"best@{k}" for k in best_k] + ["turns", "tasks", "episodes"]
        lines += _table_head(head)
        for r in self.rows:
            cells = [str(r.rank), _md(r.rollout) + (" (baseline)" if r.rollout == self.baseline else ""),
                     r.success.cell() if r.success is not None else "–"]
            if self.baseline is not None:
                cells.append(r.versus_baseline.difference.cell(signed=True) if r.versus_baseline is not None else "–")
            cells += [_num(r.pass_at_k.get(str(k))) for k in at_k] + [_num(r.best_at_k.get(str(k))) for k in best_k]
            cells += [_num(r.turns_mean, 2), str(r.n_tasks), str(r.n_episodes)]
            lines.append(_table_row(cells))
        lines += ["", "## Success by domain", ""]
        lines += _table_head(["rollout", *[_md(d) for d in self.domains]])
        for r in self.rows:
            doms = [r.domains.get(d) for d in self.domains]
            lines.append(_table_row([_md(r.rollout), *[e.cell() if e is not None else "–" for e in doms]]))
        lines += ["", "## Outcome classes", "", "Episodes per class (see components/evaluation/taxonomy.py).", ""]
        lines += _table_head(["rollout", *[_md(c) for c in self.classes], "total"])
        for r in self.rows:
            total = sum(r.taxonomy.values())
            lines.append(_table_row([_md(r.rollout), *[str(r.taxonomy.get(c, 0)) for c in self.classes], str(total)]))
        return "\n".join(lines) + "\n"


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


def _row(name: str, episodes: Sequence[Episode], ks: Sequence[int], scores: Mapping[str, float] | None,
         n_boot: int, seed: int) -> Row:
    report = success_report(episodes, ks=ks, scores=scores, n_boot=n_boot, seed=seed)
    overall = report["overall"]
    done = finished(episodes)
    return Row(
        rollout=name, rank=0, n_tasks=overall["n_tasks"], n_episodes=overall["n_episodes"],
        n_unfinished=overall["n_unfinished"], success=_interval(overall["pass@1"]),
        domains={d: _interval(g["pass@1"]) for d, g in report["by_domain"].items()},
        pass_at_k={k: v for k, v in overall["pass@k"].items() if int(k) > 1},
        best_at_k={k: v for k, v in overall.get("best@k", {}).items() if int(k) > 1},
        turns_mean=sum(len(e.turns) for e in done) / len(done) if done else None,
        taxonomy=taxonomy(episodes), taxonomy_by_domain=taxonomy_by_domain(episodes),
    )


def _difference(name: str, baseline: Sequence[Episode], candidate: Sequence[Episode], seed: int) -> Difference:
    try:
        rep = compare(baseline, candidate, seed=seed)
    except ValueError as exc:
        raise ValueError(f"rollout {name!r} against the baseline: {exc}") from None
    o = rep["overall"]
    return Difference(difference=Interval(**o["difference"]), tasks=rep["tasks"], baseline_only=rep["baseline_only"],
                      candidate_only=rep["candidate_only"], baseline=o["baseline"], candidate=o["candidate"],
                      by_domain={d: Interval(**e["difference"]) for d, e in rep.get("by_domain", {}).items()})


def _rank(rows: list[Row]) -> list[Row]:
    def key(r: Row) -> tuple[float, float]:
        return (r.success.value, r.success.low) if r.success is not None else (float("-inf"), float("-inf"))

    ordered = sorted(rows, key=lambda r: (-key(r)[0], -key(r)[1], r.rollout))
    out: list[Row] = []
    for i, r in enumerate(ordered):
        rank = out[-1].rank if out and key(out[-1]) == key(r) else i + 1
        out.append(r.model_copy(update={"rank": rank}))
    return out


def leaderboard(rollouts: Mapping[str, Sequence[Episode]], baseline: str | None = None,
                scores: Mapping[str, Mapping[str, float]] | None = None, ks: Sequence[int] = KS,
                n_boot: int = 2000, seed: int = 0) -> Leaderboard:
    """One ranked row per rollout (name -> its episodes); `baseline`, when given, names one of them, and every
    other row carries its paired difference against it. `scores` maps a rollout to its verifier scores
    (episode_id -> score over its finished episodes) and adds best@k for that rollout."""
    if not rollouts:
        raise ValueError("leaderboard needs at least one rollout")
    if baseline is not None and baseline not in rollouts:
        raise ValueError(f"the baseline {baseline!r} is not one of the rollouts ({', '.join(rollouts)})")
    rows = []
    for name, episodes in rollouts.items():
        row = _row(name, episodes, ks, (scores or {}).get(name), n_boot, seed)
        if baseline is not None and name != baseline:
            row.versus_baseline = _difference(name, rollouts[baseline], episodes, seed)
        rows.append(row)
    domains = sorted({d for r in rows for d in r.domains})
    classes = class_order(c for r in rows for c in r.taxonomy)
    return Leaderboard(baseline=baseline, ks=[int(k) for k in ks], domains=domains, classes=classes, rows=_rank(rows))
