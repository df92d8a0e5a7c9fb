"""One look for every figure of the book, laid out for a projector, saved as PNG + SVG for slides.

Each figure is one page column wide, with its text at least the body text's size once the page shows it; the files
land under build/figures/<chapter>/."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import matplotlib as mpl
import numpy as np

FIGURE_DIR = Path(os.environ.get("RLBOOK_FIGURES", Path(__file__).resolve().parents[2] / "build" / "figures"))

# The page a figure must read on: a 1,024 px wide window shows the book's column 734 px wide, its body text at 17 px
# (the stylesheet in book/_static/); the notebook shows a figure at figure.dpi pixels per inch, shrunk to the column.
BODY_PX = 17
COLUMN_PX = 734
PAGE_INCHES = 7.5  # every figure is laid out this wide: at 100 dpi it fills the column, shrunk a few percent
MIN_FONT_PT = 13.5  # no text smaller: 13.5 pt at 100 dpi is 18.75 px, 17.6 px in the column if shrunk by 6%
MAX_PANELS_PER_ROW = 2  # a grid of 4 panels or more is laid out two a row; fewer panels are stacked, one a row
ROW_INCHES = {1: 3.4, 2: 3.2}  # the least height of a row of panels, by panels per row

STYLE = {
    "font.size": 14, "axes.titlesize": 14.5, "axes.titleweight": "bold", "axes.labelsize": 14,
    "xtick.labelsize": 13.5, "ytick.labelsize": 13.5, "legend.fontsize": 13.5, "legend.framealpha": 0.9,
    "figure.titlesize": 15.5, "figure.titleweight": "bold",
    "lines.linewidth": 2.2, "lines.markersize": 6, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100, "savefig.dpi": 150,
    "figure.figsize": (PAGE_INCHES, 4.2), "figure.constrained_layout.use": False,
}
mpl.rcParams.update(STYLE)


def screen_font_px(fig) -> float:
    """The smallest text of a laid-out figure, in CSS pixels, as the page shows it at a 1,024 px wide window: its
    size at figure.dpi, times the shrink that fits the figure's tight box into the column."""
    from matplotlib.text import Text

    renderer = fig.canvas.get_renderer()
    width_px = fig.get_tightbbox(renderer).width * fig.dpi
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes, default=BODY_PX * 72 / fig.dpi) * fig.dpi / 72 * min(1.0, COLUMN_PX / width_px)


def _panels(fig):
    """The figure's grid-placed axes by grid cell (a twin axis shares its host's cell, so they move together)."""
    cells = {}
    for ax in fig.axes:
        spec = ax.get_subplotspec() if ax.get_visible() else None
        if spec is not None:
            cells.setdefault((spec.get_gridspec(), spec.rowspan, spec.colspan), []).append(ax)
    return cells


def _reflow(fig) -> tuple[int, int]:
    """Lay panels side by side out again for the column: stacked one a row when there are fewer than four, else two
    a row (an odd last panel centred), in reading order; returns (rows, panels per row). A figure with a colorbar or
    nested grids keeps its layout."""
    from matplotlib.gridspec import GridSpec

    cells = _panels(fig)
    grids = {grid for grid, _, _ in cells}
    if not cells:
        return 1, 1
    grid = next(iter(grids))
    per_row = MAX_PANELS_PER_ROW if len(cells) >= 4 else 1
    if len(grids) > 1 or any(hasattr(ax, "_colorbar") for ax in fig.axes) or grid.ncols <= per_row:
        return grid.nrows, grid.ncols
    order = sorted(cells, key=lambda key: (key[1].start, key[2].start))
    rows = -(-len(order) // per_row)
    new = GridSpec(rows, 2 * per_row, figure=fig)
    for i, key in enumerate(order):
        row, column = divmod(i, per_row)
        last_alone = per_row > 1 and i == len(order) - 1 and column == 0
        spec = new[row, 1:3] if last_alone else new[row, 2 * column:2 * column + 2]
        for ax in cells[key]:
            ax.set_subplotspec(spec)
        host = cells[key][0]
        if column == 0:  # a row's first panel shows its y ticks and label, even when it shared them before
            host.tick_params(labelleft=True)
            if not host.get_ylabel():
                labels = [a.get_ylabel() for a in host.get_shared_y_axes().get_siblings(host) if a.get_ylabel()]
                host.set_ylabel(labels[0] if labels else "")
    return rows, per_row


def _wrap(text, width_px: float, renderer) -> None:
    """Break a title or label onto more lines when it is wider than width_px (never inside $math$)."""
    words = text.get_text()
    if not words or "$" in words:
        return
    box = text.get_window_extent(renderer)
    extent = max(box.width, box.height)  # the text's length, across or up (a y label)
    if extent > width_px:
        longest = max(len(line) for line in words.split("\n"))
        chars = max(12, int(longest * width_px / extent * 0.95))
        text.set_text(textwrap.fill(words.replace("\n", " "), chars))


def fit_for_page(fig):
    """Lay a figure out for the page column: PAGE_INCHES wide, panels stacked or two a row (_reflow), no text under
    MIN_FONT_PT, titles and labels wrapped to their panel, fewer tick labels on narrow panels, the figure's legend
    under the panels in as many columns as fit; returns the figure."""
    from matplotlib.text import Text
    from matplotlib.ticker import AutoLocator, MaxNLocator

    old_width, old_height = fig.get_size_inches()
    old_rows = max((grid.nrows for grid, _, _ in _panels(fig)), default=1)
    rows, per_row = _reflow(fig)
    per_row = min(per_row, MAX_PANELS_PER_ROW)
    row_height = max(old_height / old_rows * PAGE_INCHES / old_width, ROW_INCHES[per_row])
    fig.set_size_inches(PAGE_INCHES, min(rows * row_height, rows * max(old_height / old_rows, ROW_INCHES[per_row])))
    for text in fig.findobj(Text):
        text.set_fontsize(max(text.get_fontsize(), MIN_FONT_PT))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):  # fewer tick labels on narrow panels (not on log or categorical axes)
            if axis.get_scale() == "linear" and isinstance(axis.get_major_locator(), AutoLocator):
                axis.set_major_locator(MaxNLocator(nbins=4 if per_row > 1 else 6))
    renderer = fig.canvas.get_renderer()
    figure_px = fig.bbox.width
    for text in ([fig._suptitle] if fig._suptitle else []) + fig.texts:
        _wrap(text, 0.98 * figure_px, renderer)
    for _ in range(2):  # lay out, wrap to the panels, and again (wrapping frees room)
        fig.tight_layout()
        for ax in fig.axes:
            width = max(ax.get_window_extent(renderer).width, figure_px / (2 * per_row))
            _wrap(ax.title, 1.1 * width, renderer)
            _wrap(ax.xaxis.label, 1.1 * width, renderer)
            _wrap(ax.yaxis.label, 1.05 * ax.get_window_extent(renderer).height, renderer)
    bottom = 0.0
    for legend in list(fig.legends):  # drawn again in fewer columns until it fits the width
        handles, labels = legend.legend_handles, [t.get_text() for t in legend.texts]
        columns = getattr(legend, "_ncols", len(labels))
        while columns > 1 and legend.get_window_extent(renderer).width > 0.98 * figure_px:
            columns -= 1
            legend.remove()
            legend = fig.legend(handles, labels, loc="lower center", ncols=columns, frameon=False,
                                bbox_to_anchor=(0.5, 0.0))
    if fig.legends:
        legend_inches = max(legend.get_window_extent(renderer).height for legend in fig.legends) / fig.dpi + 0.1
        fig.set_size_inches(PAGE_INCHES, fig.get_figheight() + legend_inches)
        bottom = legend_inches / fig.get_figheight()
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def save_figure(fig, chapter: str, name: str, runs=None) -> None:
    """Write fig as FIGURE_DIR/<chapter>/<name>.png and .svg (build/figures/ unless $RLBOOK_FIGURES says otherwise),
    laid out for the page column, and first as <name>.slide.png in the layout it was drawn in (panels side by side:
    what a slide's wide frame shows larger; rlbook.deck uses it).

    With `runs` (a RunSet, or a list of runs), the figure first gets their provenance line above its panels: seeds,
    and whether this code or older code made them (rlbook.runset.provenance), so a slide cannot lose it; a figure
    drawn from several sets passes their line, as text. Returns nothing, so a notebook cell that ends with it shows
    the figure and no file name."""
    folder = FIGURE_DIR / chapter
    folder.mkdir(parents=True, exist_ok=True)
    if runs is not None:
        from ..runset import provenance

        line = runs if isinstance(runs, str) else runs.label() if hasattr(runs, "label") else provenance(runs)
        fig.text(0.01, 1.0, line, ha="left", va="bottom", color="0.3", transform=fig.transFigure, fontsize=MIN_FONT_PT)
    fig.savefig(folder / f"{name}.slide.png", bbox_inches="tight")
    fit_for_page(fig)  # wraps the provenance line too
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


MAX_LOG_LABELS = 5  # the most labelled ticks on a log axis (more overlap on a short panel)


def plain_log_ticks(ax, minor: bool = True, axis: str = "y") -> None:
    """Tick labels of a log-scaled axis as plain numbers (1.2, not 1.2 x 10^0), at most MAX_LOG_LABELS of them so
    that none overlap: the first of 1-9, 1-2-5 or 1 per decade that gives that few (minor=False: the decades only,
    for an axis spanning several); an axis too short to hold two of them gets evenly spaced plain ticks. Call it
    once the data is drawn (it reads the axis's limits)."""
    import math

    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    low, high = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
    for multiples in ([(1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 5)] if minor else []) + [(1,)]:
        ticks = [m * 10.0 ** d for d in decades for m in multiples if low <= m * 10.0 ** d <= high]
        if len(ticks) <= MAX_LOG_LABELS:
            break
    if len(ticks) < 2:
        ticks = [t for t in MaxNLocator(4).tick_values(low, high) if low <= t <= high and t > 0]
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda value, _: plain_number(value)))
    target.set_minor_formatter(NullFormatter())


def plain_number(value: float) -> str:
    """A tick label: 0.054, 2, 150; below 0.001 a power of ten as 10^-5 or 2 x 10^-5 (typeset)."""
    if value == 0 or abs(value) >= 1e-3:
        return f"{value:.3g}"
    mantissa, exponent = f"{value:.0e}".split("e")
    return f"$10^{{{int(exponent)}}}$" if mantissa == "1" else f"${mantissa} \\times 10^{{{int(exponent)}}}$"
