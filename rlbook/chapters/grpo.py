"""Chapter 1 figures (GRPO, DeepSeekMath, arXiv 2402.03300): learning curves of one run."""
from __future__ import annotations

import matplotlib.pyplot as plt


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

