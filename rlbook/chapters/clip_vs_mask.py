"""Chapter 3's figures: which tokens clipping and masking remove, and M2PO's threshold tau.

Chapter 3 figures: which tokens clipping and masking remove, and M2PO's threshold tau (arXiv 2510.01161,
Figs. 4, 7b, 8 and 9)."""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np

from .. import stats
from .run_groups import COLORS, band, errorbars, finish, group_runs, mean_of, run_label, setting, tau_of
from .style import axis_label, title

CLIP_DEVIATION = 0.2  # GRPO's eps: a token is clipped beyond |r - 1| = 0.2 (in the rewarded direction)
PLOTLY_DASH = {"--": "dash", ":": "dot", "-.": "dashdot"}  # the same line styles in plotly's names
REFERENCE_STYLES = (("tab:blue", "--"), ("tab:purple", ":"), ("tab:orange", "-."), ("tab:brown", "--"))


def reference_styles(references) -> dict[tuple, tuple[list, str, str]]:
    """The reference settings drawn beside M2PO's tau sweep (GRPO on-policy and stale), each with its own colour and
    line style: {setting: (its seeds, colour, matplotlib line style)}."""
    groups = group_runs(references, key=setting)
    return {key: (seeds, *REFERENCE_STYLES[i % len(REFERENCE_STYLES)]) for i, (key, seeds) in enumerate(groups.items())}


def removal_key(objective: str) -> str:
    """The metric of the tokens an objective takes out of the gradient: masked (m2po) or clipped (the others)."""
    return "mask_frac" if objective == "m2po" else "clip_frac"


def removed_entropy(run) -> tuple[float, float, float]:
    """(all, removed, kept) token entropy over the run; removed = clipped or masked. Each update's mean is weighted
    by its share of tokens (exact when the updates have equal token counts)."""
    sums, weights = np.zeros(3), np.zeros(3)
    for row in run.metrics[1:]:
        clip, mask = row.get("clip_frac") or 0.0, row.get("mask_frac") or 0.0
        parts = ((0, "entropy", 1.0), (1, "entropy_clipped", clip), (1, "entropy_masked", mask),
                 (2, "entropy_kept", 1.0 - clip - mask))
        for slot, key, weight in parts:
            if row.get(key) is not None and weight > 0:
                sums[slot], weights[slot] = sums[slot] + row[key] * weight, weights[slot] + weight
    return tuple(float(s / w) if w else math.nan for s, w in zip(sums, weights))


def pooled_ratio_bins(runs, first_update: int = 1, last_update: int | None = None):
    """(bin names, token counts, mean entropy, edges) of the |r - 1| bins, pooled over runs and an update window."""
    rows = [r["ratio_bins"] for run in (runs if isinstance(runs, (list, tuple)) else [runs]) for r in run.metrics
            if "ratio_bins" in r
            and first_update <= r["update"] <= (last_update or math.inf)]
    if not rows:
        raise ValueError(f"no ratio_bins rows between updates {first_update} and {last_update}")
    edges = rows[0]["edges"]
    counts = np.array([b["count"] for b in rows], dtype=float).sum(0)
    sums = np.array([[(e or 0.0) * c for e, c in zip(b["entropy"], b["count"])] for b in rows]).sum(0)
    names = [f"{lo:g}-{hi:g}" if hi is not None else f">{lo:g}" for lo, hi in zip(edges, edges[1:])]
    return names, counts, np.where(counts > 0, sums / np.maximum(counts, 1), np.nan), edges


def removed_fraction(runs, window: int = 10):
    """Share of tokens taken out of the gradient over updates: clipped (grpo ...) or masked (m2po) (M2PO Fig. 7b)."""
    fig, ax = plt.subplots(figsize=(9, 5))
    for (objective, _, _), seeds in group_runs(runs, key=setting).items():
        key = removal_key(objective)
        verb = "masked" if key == "mask_frac" else "clipped"
        band(ax, seeds, key, window, scale=100, label=f"{run_label(seeds[0], seed=False)}: {verb}")
    ax.set(xlabel="model updates", ylabel=f"% of response tokens (mean of {window} updates)",
           title="Tokens removed from the gradient: clipped or masked")
    return finish(fig, ax)


def _draw_bins(ax_entropy, ax_share, runs, first_update, last_update, label):
    names, counts, entropy, edges = pooled_ratio_bins(runs, first_update, last_update)
    line, = ax_entropy.plot(names, entropy, marker="o", label=label)
    ax_share.plot(names, 100 * counts / max(counts.sum(), 1), marker="o", color=line.get_color())
    return edges


def _decorate_bins(ax_entropy, ax_share, edges, first_update, last_update):
    for ax in (ax_entropy, ax_share):
        ax.axvline(edges.index(CLIP_DEVIATION) - 0.5, color="black", ls="--", lw=1)
        ax.tick_params(axis="x", rotation=45)
    ax_entropy.set(title=f"Entropy by the ratio's distance from 1 (updates {first_update}-{last_update or 'end'}; "
                         "dashed: the clip)", ylabel="mean entropy (nats)")
    ax_share.set(xlabel="|r - 1|, the ratio's distance from 1", ylabel="% of tokens (log)", yscale="log")


def entropy_by_deviation(runs, first_update: int = 1, last_update: int | None = None):
    """Mean token entropy (top) and share of tokens (bottom) per |r - 1| bin, one line per setting (seeds pooled),
    the clip line at |r - 1| = 0.2 (M2PO Fig. 4: the tokens far from r = 1 are the high-entropy ones)."""
    fig, axes = plt.subplots(2, 1, figsize=(10, 7.5), sharex=True)
    for seeds in group_runs(runs, key=setting).values():
        edges = _draw_bins(axes[0], axes[1], seeds, first_update, last_update, run_label(seeds[0], seed=False))
    if runs:
        _decorate_bins(axes[0], axes[1], edges, first_update, last_update)
    return finish(fig, axes)


def run_detail(run, first_update: int = 1, last_update: int | None = None, window: int = 10):
    """One run: entropy and share of tokens per |r - 1| bin over an update window, and the clipped or masked share
    over updates with the window shaded (the static figure beside `token_explorer`)."""
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    edges = _draw_bins(axes[0], axes[1], [run], first_update, last_update, run_label(run))
    _decorate_bins(axes[0], axes[1], edges, first_update, last_update)
    key = removal_key(run.config.objective)
    band(axes[2], [run], key, window, scale=100, label=key)
    axes[2].axvspan(first_update, last_update or len(run.metrics) - 1, color="grey", alpha=0.2, label="window")
    axes[2].set(title=f"{title(key)} ({run_label(run)})", xlabel="model updates",
                ylabel=f"% of tokens (mean of {window} updates)")
    return finish(fig, axes)


def entropy_removed_vs_kept(runs):
    """Entropy of all, removed (clipped or masked) and kept tokens, one group of bars per setting: the seed mean with
    one standard error (the argument of M2PO Fig. 4)."""
    groups = group_runs(runs, key=setting)
    fig, ax = plt.subplots(figsize=(max(8, 2.2 * len(groups) + 2), 5))
    for i, name in enumerate(("all tokens", "clipped or masked", "kept")):
        estimates = [stats.estimate([removed_entropy(r)[i] for r in seeds]) for seeds in groups.values()]
        ax.bar(np.arange(len(groups)) + (i - 1) * 0.27, [e.mean for e in estimates], width=0.27,
               yerr=[e.se for e in estimates], capsize=3, label=name)
    ax.set_xticks(range(len(groups)), [f"{run_label(seeds[0], seed=False)}\n({len(seeds)} seeds)"
                                       for seeds in groups.values()])
    ax.margins(y=0.1)
    ax.set(title="Entropy of the removed tokens against the kept ones (bars: 1 s.e. over seeds)",
           ylabel="mean token entropy (nats)")
    return finish(fig, ax)


def m2_before_after(runs, window: int = 10):
    """M2 = mean (log r)^2 over all response tokens and, for M2PO, over the tokens kept after masking, with tau
    (M2PO Fig. 9). tau bounds M2 of the kept trust-region tokens only, so the kept-token curve can sit above it."""
    fig, ax = plt.subplots(figsize=(9, 5))
    for seeds in group_runs(runs, key=setting).values():
        line = band(ax, seeds, "m2", window, label=f"{run_label(seeds[0], seed=False)}: all tokens")
        if seeds[0].config.objective == "m2po":
            band(ax, seeds, "m2_kept", window, ls="--", color=line.get_color(), label="after masking")
    for tau in sorted({tau_of(r) for r in runs if r.config.objective == "m2po"}):
        ax.axhline(tau, color="grey", ls=":", lw=1, label=f"tau = {tau:g}")
    ax.set(xlabel="model updates", ylabel=f"M2 = mean (log r)² (mean of {window} updates, log)", yscale="log",
           title="The second moment M2 before and after M2PO's mask")
    ax.set_ylim(bottom=max(ax.get_ylim()[0], 1e-4))
    return finish(fig, ax)


def tau_sweep_figure(runs, metric: str = "eval_greedy_acc", references=()):
    """Score (mean of the last 3 evaluations) and masked share vs M2PO's tau, seed mean with one-standard-error bars
    (M2PO Fig. 8); `references` (e.g. GRPO at s=0) are drawn as horizontal lines at their seed mean."""
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8))
    groups = group_runs(runs, key=tau_of)
    for ax, value in ((axes[0], lambda r: stats.score(r, metric)), (axes[1], lambda r: 100 * mean_of(r, "mask_frac"))):
        if groups:
            errorbars(ax, groups, value, marker="o", color=COLORS["m2po"], label="m2po")
        ax.set(xscale="log", xlabel="tau, M2PO's threshold on M2 (log scale)")
        ax.set_xticks(list(groups), [f"{t:g}" for t in groups])  # one label per tau, no overlapping decades
        ax.minorticks_off()
        ax.tick_params(axis="x", rotation=45)
    for seeds, color, ls in reference_styles(references).values():
        axes[0].axhline(np.mean([stats.score(r, metric) for r in seeds]), ls=ls, lw=2, color=color,
                        label=run_label(seeds[0], seed=False))
    axes[0].set(title=f"Final {title(metric).lower()}, mean of the last 3 evaluations (bars: 1 s.e. over seeds)",
                ylabel=axis_label(metric))
    axes[1].set(title="Tokens masked (mean over updates)", ylabel="% of response tokens")
    return finish(fig, axes)


def _windows(last: int, parts: int = 4) -> list[str]:
    edges = [1 + round(i * last / parts) for i in range(parts)] + [last + 1]
    return ["all updates"] + [f"updates {a}-{b - 1}" for a, b in zip(edges, edges[1:]) if b > a]


def token_explorer(runs):
    """Explorer: pick a run and an update window; entropy and share of tokens per |r - 1| bin."""
    from .explorer import Control, Explorer, line

    labels = {run_label(r): r for r in runs}
    last = max(len(r.metrics) - 1 for r in runs)

    def view(run, window):
        first, end = (1, None) if window == "all updates" else map(int, window.split()[1].split("-"))
        try:
            names, counts, entropy, edges = pooled_ratio_bins([labels[run]], first, end)
        except ValueError:
            return None
        clip = names[edges.index(CLIP_DEVIATION)]
        return {"data": [line(names, entropy, "mean token entropy", "#1f77b4", markers=True),
                         line(names, 100 * counts / max(counts.sum(), 1), "share of tokens", "#d62728",
                              markers=True, xaxis="x2", yaxis="y2")],
                "layout": {"title": {"text": f"{run}: which tokens move ({window})"},
                           "yaxis": {"title": {"text": "entropy (nats)"}, "domain": [0.55, 1]},
                           "yaxis2": {"title": {"text": "% of tokens"}, "domain": [0, 0.42], "type": "log"},
                           "xaxis": {"anchor": "y", "showticklabels": False, "matches": "x2"},
                           "xaxis2": {"anchor": "y2", "title": {"text": "|r - 1|, the ratio's distance from 1"}},
                           "shapes": [{"type": "line", "xref": x, "yref": f"{y} domain", "x0": clip, "x1": clip,
                                       "y0": 0, "y1": 1, "line": {"dash": "dash", "color": "black", "width": 1}}
                                      for x, y in (("x", "y"), ("x2", "y2"))]}}

    controls = [Control("run", "run", list(labels)), Control("window", "updates", _windows(last), kind="slider")]
    return Explorer("Which tokens move: entropy and share of tokens by |r - 1| (stored runs)",
                    "Pick a run and slide over its updates. Top: mean entropy of the tokens in each |r - 1| bin; "
                    "bottom: their share (log scale). Dashed: the clip at |r - 1| = 0.2. Look at how the high-entropy "
                    "tokens sit right of the dashed line.", controls, view, {"height": 560})


def tau_explorer(runs, references=(), metric_options=("eval_greedy_acc", "eval_sampled_acc", "mask_frac")):
    """Explorer: slide over M2PO's tau; its learning curve (mean over seeds) beside the reference runs."""
    from .run_groups import aggregate
    from .explorer import Control, Explorer, line

    groups = group_runs(runs, key=tau_of)

    def view(tau, metric):
        window = 1 if metric.startswith("eval") else 10
        seeds = groups[float(tau)]
        x, mean, _, _ = aggregate(seeds, metric, window)
        traces = [line(x, mean, f"M2PO tau = {tau} ({len(seeds)} seeds)", COLORS["m2po"], markers=window == 1)]
        for (objective, s, _), (group, color, ls) in reference_styles(references).items():
            x, mean, _, _ = aggregate(group, metric, window)
            traces.append(line(x, mean, f"{objective} s = {s}", color, dash=PLOTLY_DASH[ls]))
        return {"data": traces, "layout": {"title": {"text": f"{title(metric)}: M2PO with tau = {tau}"},
                                           "xaxis": {"title": {"text": "model updates"}},
                                           "yaxis": {"title": {"text": axis_label(metric)}}}}

    controls = [Control("tau", "tau", [f"{t:g}" for t in groups], kind="slider", value="0.04"),
                Control("metric", "metric", list(metric_options),
                labels={m: title(m) for m in metric_options})]
    return Explorer("M2PO's threshold tau (stored runs)",
                    "Slide over tau: M2PO's curve (green) against GRPO on-policy and stale (each in its own colour). "
                    "Look for the range of tau where the curve stays with on-policy GRPO, and at how many tokens the "
                    "mask removes.", controls, view)
