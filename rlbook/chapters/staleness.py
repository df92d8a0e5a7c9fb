"""Chapter 2 figures: accuracy against staleness (M2PO, arXiv 2510.01161, Figs. 1-3 and 11).

Every figure takes stored `Run`s and returns a matplotlib figure; the seeds of one setting are drawn as their mean
with a min-max band.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .m2po import COLORS, batch_rewards, band, errorbars, final, finish, group_runs, run_label, setting, smooth

def accuracy_curves(runs, metric: str = "eval_greedy_acc", window: int = 1):
    """Accuracy over model updates, one panel per objective, one line per staleness (M2PO Figs. 1-3 and 11)."""
    by_objective = group_runs(runs, key=lambda r: r.config.objective)
    stalenesses = sorted({r.config.staleness for r in runs})
    fig, axes = plt.subplots(1, max(len(by_objective), 1), figsize=(3.6 * max(len(by_objective), 1), 3.2),
                             sharey=True, squeeze=False)
    for ax, (objective, group) in zip(axes.flat, by_objective.items()):
        for (_, s, _), seeds in group_runs(group, key=setting).items():
            color = plt.get_cmap("viridis")(0.9 * stalenesses.index(s) / max(len(stalenesses) - 1, 1))
            label = run_label(seeds[0], seed=False).split(" ", 1)[1] + f" ({len(seeds)} seeds)"
            band(ax, seeds, metric, window, color=color, marker="o", ms=3, label=label)
        ax.set(title=objective, xlabel="model updates")
    axes[0, 0].set_ylabel(metric + (f" (mean of {window})" if window > 1 else ""))
    return finish(fig, axes)


def final_vs_staleness(runs, metric: str = "eval_greedy_acc"):
    """Final accuracy vs staleness per objective, mean with min-max error bars (the summary of Figs. 1-3)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for objective, group in group_runs(runs, key=lambda r: r.config.objective).items():
        errorbars(ax, group_runs(group, key=lambda r: r.config.staleness), lambda r: final(r, metric), marker="o",
                   color=COLORS.get(objective), label=objective)
    if runs:
        ax.axhline(np.mean([r.metrics[0][metric] for r in runs]), color="grey", ls=":", lw=1, label="base model")
    ticks = sorted({r.config.staleness for r in runs})
    ax.set_xscale("symlog", linthresh=4)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set(xlabel="staleness s (model updates)", ylabel=metric, title=f"final {metric}")
    return finish(fig, ax)


def prosperity_before_collapse(runs, metric: str = "eval_greedy_acc", window: int = 3):
    """Accuracy over updates and reward per rollout batch (at the update of the policy that sampled it), each run's
    best point after the start starred (M2PO Figs. 1-2: without a trust region s=256 rises fast, then collapses)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.3))
    for run in runs:
        for ax, (x, y), w in ((axes[0], run.series(metric), 1), (axes[1], batch_rewards(run), window)):
            y = smooth(y, w)
            line, = ax.plot(x, y, marker="o", ms=2, label=run_label(run), color=COLORS.get(run.config.objective))
            i = int(np.nanargmax(y[1:])) + 1 if len(y) > 1 else 0
            ax.plot(x[i], y[i], "*", ms=12, color=line.get_color())
            ax.annotate(f"{y[i]:.2f} @ {x[i]}", (x[i], y[i]), textcoords="offset points", xytext=(5, 3), fontsize=7)
    axes[0].set(title=f"{metric} (update 0: the base model)", xlabel="model updates")
    axes[1].set(title=f"reward per rollout batch (mean of {window})", xlabel="update of the policy that sampled it")
    return finish(fig, axes)


