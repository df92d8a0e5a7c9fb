"""Chapter 3 figures: which tokens clipping and masking remove, and M2PO's threshold tau (arXiv 2510.01161,
Figs. 4, 7b, 8 and 9)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .m2po import (CLIP_DEVIATION, COLORS, band, errorbars, final, finish, group_runs, mean_of, pooled_ratio_bins,
                   removal_key, removed_entropy, run_label, setting, tau_of)

def removed_fraction(runs, window: int = 10):
    """Share of tokens taken out of the gradient over updates: clipped (grpo ...) or masked (m2po) (M2PO Fig. 7b)."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for (objective, _, _), seeds in group_runs(runs, key=setting).items():
        key = removal_key(objective)
        verb = "masked" if key == "mask_frac" else "clipped"
        band(ax, seeds, key, window, scale=100, label=f"{run_label(seeds[0], seed=False)}: {verb}")
    ax.set(xlabel="model updates", ylabel="% of response tokens",
           title=f"tokens removed from the gradient (mean of {window} updates)")
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
    ax_entropy.set(title=f"updates {first_update}-{last_update or 'end'}; dashed: the clip at |r-1| = 0.2",
                   ylabel="mean token entropy")
    ax_share.set(xlabel="|r - 1|", ylabel="% of tokens", yscale="log")


def entropy_by_deviation(runs, first_update: int = 1, last_update: int | None = None):
    """Mean token entropy (top) and share of tokens (bottom) per |r - 1| bin, one line per setting (seeds pooled),
    the clip line at |r - 1| = 0.2 (M2PO Fig. 4: the tokens far from r = 1 are the high-entropy ones)."""
    fig, axes = plt.subplots(2, 1, figsize=(7, 5.2), sharex=True)
    for seeds in group_runs(runs, key=setting).values():
        edges = _draw_bins(axes[0], axes[1], seeds, first_update, last_update, run_label(seeds[0], seed=False))
    if runs:
        _decorate_bins(axes[0], axes[1], edges, first_update, last_update)
    return finish(fig, axes)


def run_detail(run, first_update: int = 1, last_update: int | None = None, window: int = 10):
    """One run: entropy and share of tokens per |r - 1| bin over an update window, and the clipped or masked share
    over updates with the window shaded (what `widgets.run_explorer` draws)."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    edges = _draw_bins(axes[0], axes[1], [run], first_update, last_update, run_label(run))
    _decorate_bins(axes[0], axes[1], edges, first_update, last_update)
    key = removal_key(run.config.objective)
    band(axes[2], [run], key, window, scale=100, label=key)
    axes[2].axvspan(first_update, last_update or len(run.metrics) - 1, color="grey", alpha=0.2, label="window")
    axes[2].set(title=f"{run_label(run)}: {key} (mean of {window})", xlabel="model updates", ylabel="% of tokens")
    return finish(fig, axes)


def entropy_removed_vs_kept(runs):
    """Entropy of all, removed (clipped or masked) and kept tokens, bars per run (the argument of M2PO Fig. 4)."""
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(runs) + 2), 3.4))
    values = np.array([removed_entropy(r) for r in runs]).reshape(len(runs), 3)
    for i, name in enumerate(("all tokens", "clipped or masked", "kept")):
        ax.bar(np.arange(len(runs)) + (i - 1) * 0.27, values[:, i], width=0.27, label=name)
    ax.set_xticks(range(len(runs)), [run_label(r).replace(" seed", "\nseed") for r in runs], fontsize=7)
    ax.margins(y=0.25)
    ax.set(title="token entropy: removed vs kept", ylabel="mean token entropy")
    return finish(fig, ax)


def m2_before_after(runs, window: int = 10):
    """M2 = mean (log r)^2 over all response tokens and, for M2PO, over the tokens kept after masking, with tau
    (M2PO Fig. 9). tau bounds M2 of the kept trust-region tokens only, so the kept-token curve can sit above it."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for seeds in group_runs(runs, key=setting).values():
        line = band(ax, seeds, "m2", window, label=f"{run_label(seeds[0], seed=False)}: all tokens")
        if seeds[0].config.objective == "m2po":
            band(ax, seeds, "m2_kept", window, ls="--", color=line.get_color(), label="after masking")
    for tau in sorted({tau_of(r) for r in runs if r.config.objective == "m2po"}):
        ax.axhline(tau, color="grey", ls=":", lw=1, label=f"tau = {tau:g}")
    ax.set(xlabel="model updates", ylabel="M2 = mean (log r)^2", yscale="log",
           title=f"M2 before and after masking (mean of {window} updates)")
    ax.set_ylim(bottom=max(ax.get_ylim()[0], 1e-4))
    return finish(fig, ax)


def tau_sweep_figure(runs, metric: str = "eval_greedy_acc", references=()):
    """Final accuracy and masked share vs M2PO's tau, mean with min-max bars (M2PO Fig. 8); `references` (e.g. GRPO
    at s=0) are drawn as horizontal lines."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.3))
    groups = group_runs(runs, key=tau_of)
    for ax, value in ((axes[0], lambda r: final(r, metric)), (axes[1], lambda r: 100 * mean_of(r, "mask_frac"))):
        if groups:
            errorbars(ax, groups, value, marker="o", color=COLORS["m2po"], label="m2po")
        ax.set(xscale="log", xlabel="tau")
    for seeds, ls in zip(group_runs(references).values(), ("--", ":", "-.") * 3):
        axes[0].axhline(np.mean([final(r, metric) for r in seeds]), ls=ls, lw=1,
                        color=COLORS.get(seeds[0].config.objective), label=run_label(seeds[0], seed=False))
    axes[0].set(title=f"final {metric}", ylabel=metric)
    axes[1].set(title="masked tokens (mean over updates)", ylabel="% of response tokens")
    return finish(fig, axes)


