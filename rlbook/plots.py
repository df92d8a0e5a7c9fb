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


def clip_fractions(runs, labels=None, window: int = 10):
    """Clipped (low + high) and masked fraction of response tokens over updates, smoothed over `window` updates."""
    labels = labels or [r.path.name for r in runs]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for run, label in zip(runs, labels):
        for key, style in (("clip_frac", "-"), ("mask_frac", "--")):
            x, y = run.series(key)
            if any(y):
                smooth = [sum(y[max(0, i - window + 1):i + 1]) / len(y[max(0, i - window + 1):i + 1]) for i in range(len(y))]
                ax.plot(x, [100 * v for v in smooth], style, label=f"{label}: {key.split('_')[0]}ped")
    ax.set(xlabel="model updates", ylabel="% of response tokens", title="clipped or masked tokens")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def entropy_by_ratio_deviation(run, first_update: int = 1, last_update: int | None = None):
    """Mean token entropy per |r - 1| bin, pooled over an update window (the data of M2PO's Fig. 4b)."""
    rows = [r for r in run.metrics if "ratio_bins" in r and r["update"] >= first_update
            and (last_update is None or r["update"] <= last_update)]
    if not rows:
        raise ValueError(f"run {run.path.name} has no ratio_bins rows between updates {first_update} and {last_update}")
    edges = rows[0]["ratio_bins"]["edges"]
    counts = [sum(r["ratio_bins"]["count"][i] for r in rows) for i in range(len(edges) - 1)]
    sums = [sum((r["ratio_bins"]["entropy"][i] or 0.0) * r["ratio_bins"]["count"][i] for r in rows)
            for i in range(len(edges) - 1)]
    names = [f"{lo:g}-{hi:g}" if hi is not None else f">{lo:g}" for lo, hi in zip(edges, edges[1:])]
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    means = [s / c if c else float("nan") for s, c in zip(sums, counts)]
    ax.bar(names, means, color="tab:blue", alpha=0.8)
    for i, c in enumerate(counts):
        ax.annotate(f"n={c}", (i, 0), ha="center", va="bottom", fontsize=7, rotation=90)
    ax.set(xlabel="|r - 1|", ylabel="mean token entropy", title=f"entropy vs ratio deviation: {run.path.name}")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    return fig
