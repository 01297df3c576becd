"""The leaderboard as PNG figures (matplotlib's Agg canvas: no display, no pyplot state), each written atomically.

success_plot       success per rollout, in rank order, with its 95% interval as error bars
domain_plot        success per domain, one bar per rollout in each domain's group, with 95% intervals
taxonomy_plot      the outcome classes as stacked shares of each rollout's episodes (code_error kinds folded)

and as data series DVC draws and compares across commits and experiments (`dvc plots show`, `dvc plots diff`):
write_series       success.json (a row per ranked rollout, with its interval) and success_by_domain.json
"""

from __future__ import annotations

import json
from pathlib import Path

from components.common.io import atomic_write
from components.evaluation.figures import figure, save
from components.evaluation.leaderboard import Interval, Leaderboard
from components.evaluation.taxonomy import class_order, family

SUCCESS_PNG, DOMAINS_PNG, TAXONOMY_PNG = "success.png", "success_by_domain.png", "taxonomy.png"
SUCCESS_JSON, DOMAINS_JSON = "success.json", "success_by_domain.json"
# one colour per outcome family, so a class looks the same in every figure
FAMILY_COLORS = {"success": "tab:green", "wrong_answer": "tab:red", "format_error": "tab:orange",
                 "code_error": "tab:purple", "parse_error": "tab:brown", "stuck_loop": "tab:pink",
                 "no_submission": "tab:gray", "context_limit": "tab:olive", "unfinished": "tab:cyan"}


def _errors(estimates: list[Interval | None]) -> tuple[list[float], list[list[float]]]:
    values = [e.value if e is not None else 0.0 for e in estimates]
    below = [max(0.0, e.value - e.low) if e is not None else 0.0 for e in estimates]
    above = [max(0.0, e.high - e.value) if e is not None else 0.0 for e in estimates]
    return values, [below, above]


def success_plot(board: Leaderboard, path: Path | str) -> Path:
    names = board.names()
    values, err = _errors([r.success for r in board.rows])
    fig, ax = figure(max(4.0, 1.0 + 0.9 * len(names)), 3.6)
    colors = ["tab:gray" if n == board.baseline else "tab:blue" for n in names]
    ax.bar(range(len(names)), values, yerr=err, capsize=4, color=colors)
    for i, r in enumerate(board.rows):
        if r.success is not None:
            ax.text(i, min(r.success.high + 0.02, 1.02), f"{r.success.value:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(names)), names, rotation=30 if len(names) > 4 else 0, ha="right" if len(names) > 4 else "center")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("success (95% CI)")
    ax.set_title("Success by rollout" + (f" (baseline {board.baseline} in gray)" if board.baseline else ""))
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def domain_plot(board: Leaderboard, path: Path | str) -> Path:
    domains, rows = board.domains, board.rows
    width = 0.8 / max(1, len(rows))
    fig, ax = figure(max(4.5, 1.2 + 0.5 * len(domains) * len(rows)), 3.8)
    for j, r in enumerate(rows):
        values, err = _errors([r.domains.get(d) for d in domains])
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(domains))]
        ax.bar(xs, values, width=width, yerr=err, capsize=3, label=r.rollout)
    ax.set_xticks(range(len(domains)), domains)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("success (95% CI)")
    ax.set_title("Success by domain")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def taxonomy_plot(board: Leaderboard, path: Path | str) -> Path:
    names = board.names()
    folded: list[dict[str, int]] = []
    for r in board.rows:
        counts: dict[str, int] = {}
        for c, n in r.taxonomy.items():
            counts[family(c)] = counts.get(family(c), 0) + n
        folded.append(counts)
    classes = class_order(c for counts in folded for c in counts)
    fig, ax = figure(max(4.5, 1.5 + 0.9 * len(names)), 3.8)
    bottoms = [0.0] * len(names)
    for c in classes:
        shares = [counts.get(c, 0) / max(1, sum(counts.values())) for counts in folded]
        color = FAMILY_COLORS.get(c, "tab:blue")
        ax.bar(range(len(names)), shares, bottom=bottoms, label=c, color=color)
        bottoms = [b + s for b, s in zip(bottoms, shares, strict=True)]
    ax.set_xticks(range(len(names)), names, rotation=30 if len(names) > 4 else 0, ha="right" if len(names) > 4 else "center")
    ax.set_ylim(0, 1.0)
    ax.set_ylabel("share of episodes")
    ax.set_title("Outcome classes")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return save(fig, path)


def write_plots(board: Leaderboard, out_dir: Path | str) -> list[Path]:
    """The three figures in out_dir (success.png, success_by_domain.png, taxonomy.png), each written atomically."""
    out = Path(out_dir)
    return [success_plot(board, out / SUCCESS_PNG), domain_plot(board, out / DOMAINS_PNG),
            taxonomy_plot(board, out / TAXONOMY_PNG)]


def write_series(board: Leaderboard, out_dir: Path | str) -> list[Path]:
    """success.json and success_by_domain.json in out_dir: lists of flat rows (DVC's plot format), in rank order,
    rollouts without greedy episodes left out as the figures leave them out."""
    out = Path(out_dir)
    ranked = sorted((r for r in board.rows if r.success is not None), key=lambda r: r.rank or 0)
    success = [{"rollout": r.rollout, "success": r.success.value, "low": r.success.low, "high": r.success.high}
               for r in ranked if r.success is not None]
    domains = [{"rollout": r.rollout, "domain": d, "success": e.value, "low": e.low, "high": e.high}
               for r in ranked for d, e in r.domains.items() if e is not None]
    paths = []
    for name, rows in ((SUCCESS_JSON, success), (DOMAINS_JSON, domains)):
        with atomic_write(out / name) as fh:
            json.dump(rows, fh, indent=1)
        paths.append(out / name)
    return paths
