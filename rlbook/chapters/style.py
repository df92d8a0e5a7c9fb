"""One look for every figure of the book, sized for a projector: large fonts, thick lines, light grids, and the
PNG + SVG files under build/figures/<chapter>/ that slides use."""
from __future__ import annotations

import os
from pathlib import Path

import matplotlib as mpl
import numpy as np

FIGURE_DIR = Path(os.environ.get("RLBOOK_FIGURES", Path(__file__).resolve().parents[2] / "build" / "figures"))

STYLE = {
    "font.size": 12, "axes.titlesize": 13, "axes.titleweight": "bold", "axes.labelsize": 12,
    "xtick.labelsize": 11, "ytick.labelsize": 11, "legend.fontsize": 10, "legend.framealpha": 0.9,
    "lines.linewidth": 2.0, "lines.markersize": 5, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100, "savefig.dpi": 150,
    "figure.constrained_layout.use": False,
}
mpl.rcParams.update(STYLE)


def save_figure(fig, chapter: str, name: str, runs=None) -> None:
    """Write fig as FIGURE_DIR/<chapter>/<name>.png and .svg (build/figures/ unless $RLBOOK_FIGURES says otherwise).

    With `runs` (a RunSet, or a list of runs), the figure first gets their provenance line above its panels: seeds,
    and whether this code or older code made them (rlbook.runset.provenance), so a slide cannot lose it.
    Returns nothing, so a notebook cell that ends with it shows the figure and no file name."""
    if runs is not None:
        from ..runset import provenance

        line = runs.label() if hasattr(runs, "label") else provenance(runs)
        fig.text(0.01, 1.0, line, ha="left", va="bottom", fontsize=STYLE["font.size"], color="0.3",
                 transform=fig.transFigure)
    folder = FIGURE_DIR / chapter
    folder.mkdir(parents=True, exist_ok=True)
    fig.savefig(folder / f"{name}.svg", bbox_inches="tight")
    fig.savefig(folder / f"{name}.png", bbox_inches="tight")


METRICS = {  # metric key -> (what it is, in words; the axis label with its unit)
    "eval_greedy_acc": ("Greedy accuracy on the held-out problems", "accuracy (fraction correct)"),
    "eval_sampled_acc": ("Sampled accuracy on the held-out problems", "accuracy (fraction correct)"),
    "reward": ("Mean reward of the rollout batch", "reward per completion"),
    "clip_frac": ("Clipped tokens", "share of response tokens"),
    "mask_frac": ("Tokens masked by M2PO", "share of response tokens"),
    "entropy": ("Token entropy", "entropy (nats)"),
    "m2": ("Second moment of the log-ratio, M2", "mean (log r)²"),
    "kl_k3": ("KL to the sampling policy", "KL, k3 estimate (nats)"),
    "low_prob_frac": ("Low-probability tokens (p < 0.5)", "share of response tokens"),
    "zero_std_frac": ("Groups whose completions all scored the same", "share of groups"),
}


def title(metric: str) -> str:
    return METRICS.get(metric, (metric, metric))[0]


def axis_label(metric: str) -> str:
    return METRICS.get(metric, (metric, metric))[1]


def legend_below(fig, axes, ncols: int | None = None):
    """One legend for the whole figure, under its panels, so it covers no data; returns fig (laid out)."""
    entries = {}
    for ax in np.atleast_1d(axes).flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if not label.startswith("_"):
                entries.setdefault(label, handle)
    bottom = 0.0
    if entries:
        ncols = ncols or min(len(entries), 3)
        rows = -(-len(entries) // ncols)
        bottom = min(0.04 + 0.34 * rows / fig.get_figheight(), 0.45)
        fig.legend(list(entries.values()), list(entries), loc="lower center", ncols=ncols, frameon=False,
                   bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def plain_log_ticks(ax) -> None:
    """Tick labels of a log-scaled y axis as plain numbers (1.2, not 1.2 x 10^0)."""
    from matplotlib.ticker import FuncFormatter

    label = FuncFormatter(lambda value, _: f"{value:g}")
    ax.yaxis.set_major_formatter(label)
    ax.yaxis.set_minor_formatter(label)
