"""One look for every figure of the book, sized for a projector: large fonts, thick lines, light grids, and the
PNG + SVG files under build/figures/<chapter>/ that slides use."""
from __future__ import annotations

import os
from pathlib import Path

import matplotlib as mpl

FIGURE_DIR = Path(os.environ.get("RLBOOK_FIGURES", Path(__file__).resolve().parents[2] / "build" / "figures"))

STYLE = {
    "font.size": 12, "axes.titlesize": 13, "axes.titleweight": "bold", "axes.labelsize": 12,
    "xtick.labelsize": 11, "ytick.labelsize": 11, "legend.fontsize": 10, "legend.framealpha": 0.9,
    "lines.linewidth": 2.0, "lines.markersize": 5, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100, "savefig.dpi": 150,
    "figure.constrained_layout.use": False,
}
mpl.rcParams.update(STYLE)


def save_figure(fig, chapter: str, name: str) -> Path:
    """Write fig as build/figures/<chapter>/<name>.png and .svg; returns the PNG path."""
    folder = FIGURE_DIR / chapter
    folder.mkdir(parents=True, exist_ok=True)
    fig.savefig(folder / f"{name}.svg", bbox_inches="tight")
    fig.savefig(folder / f"{name}.png", bbox_inches="tight")
    return folder / f"{name}.png"
