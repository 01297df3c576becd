"""The diagnostic evaluation as PNG figures, one bar per agent with its 95% interval (matplotlib's Agg canvas,
as components.evaluation.plots draws the leaderboard)."""

from __future__ import annotations

from pathlib import Path

from components.diag.evaluate import DiagReport
from components.evaluation.figures import figure, save

ACCURACY_PNG, F1_PNG = "accuracy.png", "exam_f1.png"


def metric_plot(report: DiagReport, metric: str, label: str, path: Path | str) -> Path:
    names = [a.agent for a in report.agents]
    estimates = [a.metrics[metric] for a in report.agents]
    fig, ax = figure(max(4.0, 1.0 + 0.9 * len(names)), 3.6)
    ax.bar(range(len(names)), [e.value for e in estimates], capsize=4, color="tab:blue",
           yerr=[[max(0.0, e.value - e.low) for e in estimates], [max(0.0, e.high - e.value) for e in estimates]])
    for i, e in enumerate(estimates):
        ax.text(i, min(e.high + 0.02, 1.02), f"{e.value:.2f}", ha="center", va="bottom", fontsize=8)
    tilt = len(names) > 4
    ax.set_xticks(range(len(names)), names, rotation=30 if tilt else 0, ha="right" if tilt else "center")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel(f"{label} (95% CI)")
    ax.set_title(f"{label}: {report.cases} {report.split} cases x {report.samples}, world {report.world}")
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def write_plots(report: DiagReport, out_dir: Path | str) -> list[Path]:
    """accuracy.png (diagnosis accuracy) and exam_f1.png (mean per-case exam F1) in `out_dir`."""
    out = Path(out_dir)
    return [metric_plot(report, "accuracy", "diagnosis accuracy", out / ACCURACY_PNG),
            metric_plot(report, "f1_mean", "exam F1", out / F1_PNG)]
