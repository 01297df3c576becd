"""A figure on matplotlib's Agg canvas and its atomic PNG write: what every plot of the project draws on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from components.common.io import atomic_write

DPI = 120


def figure(width: float, height: float) -> tuple[Figure, Any]:
    """A figure on the Agg canvas (the Agg backend without pyplot: nothing global, nothing to close)."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


def save(fig: Figure, path: Path | str) -> Path:
    path = Path(path)
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=DPI, bbox_inches="tight")
    return path
