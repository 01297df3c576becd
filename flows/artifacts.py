"""Prefect artifacts: what a person opening a flow run in the UI looks for, beside its logs. The leaderboard (a
table), the registry's decision (markdown) and each stage's headline figures (a table), each under a stable key
(`<profile>-leaderboard`, `<profile>-registry-decision`, `<profile>-stage-<stage>`), so that the UI's Artifacts
page keeps one history per key across scheduled runs.

Published only inside a flow run: a flow called as a plain function (`.fn`, tests) has no run to attach them to,
and its callers read the same figures from its return value."""

from __future__ import annotations

import re
from typing import Any

DECIDED = "registry-decision"


def artifact_key(*parts: str) -> str:
    """A key Prefect accepts (lowercase letters, digits and dashes) from names such as `diag-demo` or `round1_valid`."""
    return "-".join(s for s in (re.sub(r"[^a-z0-9]+", "-", p.lower()).strip("-") for p in parts) if s)


def in_run() -> bool:
    import sys

    if "prefect" not in sys.modules:  # not imported: no run can be going on
        return False
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


def publish_table(key: str, rows: list[dict[str, Any]], description: str) -> str | None:
    """A table artifact of `rows` (one dict a row, the same keys in each) under `key`; its id, None outside a run."""
    if not in_run() or not rows:
        return None
    from prefect.artifacts import create_table_artifact

    return str(create_table_artifact(table=rows, key=key, description=description))


def publish_markdown(key: str, markdown: str, description: str) -> str | None:
    if not in_run():
        return None
    from prefect.artifacts import create_markdown_artifact

    return str(create_markdown_artifact(markdown=markdown, key=key, description=description))


def publish_stage(profile: str, stage: str, status: str, wall_s: float, figures: dict[str, Any]) -> str | None:
    """A stage's headline figures (what its runner returned and the parent MLflow run logs), one row each."""
    rows = [{"figure": "status", "value": status}, {"figure": "wall_s", "value": round(wall_s, 1)}]
    rows += [{"figure": k, "value": _cell(v)} for k, v in figures.items() if v is not None]
    return publish_table(artifact_key(profile, "stage", stage), rows, f"{stage}: headline figures ({profile}, {status})")


def publish_leaderboard(profile: str, name: str, board: Any) -> str | None:
    """The leaderboard's ranking (components.evaluation.leaderboard.Leaderboard): one row per rollout, best first,
    the headline with its 95% interval and the difference to the baseline with its own."""
    rows = []
    for r in board.rows:
        vs = r.versus_baseline
        rows.append({
            "rank": r.rank if r.rank is not None else "",
            "rollout": r.rollout + (" (baseline)" if r.rollout == board.baseline else ""),
            "greedy pass@1": _cell(r.success.value) if r.success else "", "low": _cell(r.success.low) if r.success else "",
            "high": _cell(r.success.high) if r.success else "", "pooled": _cell(r.pooled.value) if r.pooled else "",
            "tasks": r.n_tasks, "episodes": r.n_episodes,
            "vs baseline": _cell(vs.difference.value) if vs else "",
            "vs low": _cell(vs.difference.low) if vs else "", "vs high": _cell(vs.difference.high) if vs else "",
        })
    return publish_table(artifact_key(profile, name), rows,
                         f"{name} ({profile}): greedy pass@1, the mean over datasets, with 95% intervals"
                         + (f"; differences against {board.baseline}" if board.baseline else ""))


def decision_markdown(decisions: list[dict[str, Any]], selection_reason: str | None = None) -> str:
    """The registry's decisions (components.registry.Decision, as JSON) as a page: what was registered, the alias
    it got and why, and the paired test behind it."""
    lines = ["# Registry decision", ""]
    if selection_reason:
        lines += [f"**Chosen for registration:** {selection_reason}", ""]
    for d in decisions:
        lines += [f"## {d['name']} v{d['version']} → `{d['alias']}`", "",
                  f"- promoted: **{'yes' if d['promoted'] else 'no'}**",
                  f"- previous champion: {d.get('previous_champion') or 'none'}",
                  f"- model: `{d['model_uri']}` (MLflow run `{d['run_id']}`)", f"- reason: {d['reason']}"]
        comparison = d.get("comparison")
        if comparison:
            t = comparison["test"]
            lines += ["", "| against | metric | paired tasks | difference | 95% CI | p (one-sided) | alpha | wins | "
                      "losses | promote |", "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |",
                      f"| {comparison['against']}{' v' + comparison['against_version'] if comparison.get('against_version') else ''} "
                      f"| {t['metric']} | {t['n_tasks']} | {t['difference']:+.4f} | [{t['low']:+.4f}, {t['high']:+.4f}] "
                      f"| {t['p_value']:.4g} | {t['alpha']:.4g} | {t['wins']} | {t['losses']} | {t['promote']} |"]
        lines.append("")
    return "\n".join(lines)


def publish_decision(profile: str, decisions: list[dict[str, Any]], selection_reason: str | None = None) -> str | None:
    return publish_markdown(artifact_key(profile, DECIDED), decision_markdown(decisions, selection_reason),
                            f"what the registry did with this run's model ({profile})")


def _cell(value: Any) -> Any:
    """Floats to 4 decimals (the UI shows the table as given), anything that is no number or string as text."""
    if isinstance(value, float):
        return round(value, 4)
    return value if isinstance(value, (int, str, bool)) else str(value)
