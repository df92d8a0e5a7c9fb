"""Figures for the book: learning curves from RunStore runs, saved as PNG and SVG under build/figures/<chapter>/."""
from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt

FIGURE_DIR = Path(os.environ.get("RLBOOK_FIGURES", Path(__file__).resolve().parent.parent / "build" / "figures"))


def save_figure(fig, chapter: str, name: str) -> Path:
    """Write fig as build/figures/<chapter>/<name>.png and .svg; returns the PNG path."""
    folder = FIGURE_DIR / chapter
    folder.mkdir(parents=True, exist_ok=True)
    fig.savefig(folder / f"{name}.svg", bbox_inches="tight")
    fig.savefig(folder / f"{name}.png", dpi=130, bbox_inches="tight")
    return folder / f"{name}.png"


def learning_curves(runs, metrics=("reward", "eval_greedy_acc", "entropy", "clip_frac"), labels=None, ncols=2):
    """One panel per metric, one line per run (x = model updates)."""
    labels = labels or [r.path.name for r in runs]
    nrows = -(-len(metrics) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5 * ncols, 3.2 * nrows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for run, label in zip(runs, labels):
            x, y = run.series(metric)
            ax.plot(x, y, marker="o" if metric.startswith("eval") else None, ms=3, label=label)
        ax.set(title=metric, xlabel="model updates")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.remove()
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    return fig

