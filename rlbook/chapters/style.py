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


PAGE_INCHES = 7.5  # a figure this wide shows its fonts at their size on a 1,024 px page; wider ones are scaled down
MAX_GROWTH = {1: 1.6, 2: 1.3}  # text grows at most this much by panels per row (more crowds them); 3 or more: 1.15


def fit_for_page(fig) -> float:
    """Grow every text of a figure wider than PAGE_INCHES by width / PAGE_INCHES (at most MAX_GROWTH), so that once
    the page shrinks the figure to its column the text reads near the body text's size on a projector, and lay it
    out again (the legend under the panels keeps clear of them); returns the factor."""
    from matplotlib.text import Text

    from matplotlib.ticker import AutoLocator, MaxNLocator

    columns = len({round(ax.get_position().x0, 2) for ax in fig.axes if ax.get_visible()})
    factor = min(fig.get_figwidth() / PAGE_INCHES, MAX_GROWTH.get(columns, 1.15))
    if factor <= 1:
        return 1.0
    for text in fig.findobj(Text):
        text.set_fontsize(text.get_fontsize() * factor)
    for ax in fig.axes:
        ax.tick_params(length=4 * factor, width=factor)
        for axis in (ax.xaxis, ax.yaxis):  # fewer, larger tick labels (not on log or categorical axes)
            if axis.get_scale() == "linear" and isinstance(axis.get_major_locator(), AutoLocator):
                axis.set_major_locator(MaxNLocator(nbins=4))
    bottom = 0.0
    if fig.legends:
        renderer = fig.canvas.get_renderer()
        bottom = min(max(legend.get_window_extent(renderer).height for legend in fig.legends) / fig.bbox.height
                     + 0.02, 0.5)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return factor


def save_figure(fig, chapter: str, name: str, runs=None) -> None:
    """Write fig as FIGURE_DIR/<chapter>/<name>.png and .svg (build/figures/ unless $RLBOOK_FIGURES says otherwise).

    With `runs` (a RunSet, or a list of runs), the figure first gets their provenance line above its panels: seeds,
    and whether this code or older code made them (rlbook.runset.provenance), so a slide cannot lose it.
    Returns nothing, so a notebook cell that ends with it shows the figure and no file name."""
    factor = fit_for_page(fig)
    if runs is not None:
        from ..runset import provenance

        line = runs.label() if hasattr(runs, "label") else provenance(runs)
        fig.text(0.01, 1.0, line, ha="left", va="bottom", color="0.3", transform=fig.transFigure,
                 fontsize=STYLE["font.size"] * factor)
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
