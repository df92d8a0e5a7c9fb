"""Chapter 1 figures (GRPO, DeepSeekMath, arXiv 2402.03300): learning curves, the clipped surrogate, the explorer."""
from __future__ import annotations

import matplotlib.pyplot as plt

from .style import axis_label, legend_below, title


def learning_curves(runs, metrics=("reward", "eval_greedy_acc", "entropy", "clip_frac"), labels=None, ncols=2):
    """One panel per metric, one line per run (x = model updates)."""
    labels = labels or [r.path.name for r in runs]
    nrows = -(-len(metrics) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 4.2 * nrows), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for run, label in zip(runs, labels):
            x, y = run.series(metric)
            ax.plot(x, y, marker="o" if metric.startswith("eval") else None, ms=4, label=label)
        ax.set(title=title(metric), xlabel="model updates", ylabel=axis_label(metric))
    for ax in list(axes.flat)[len(metrics):]:
        ax.remove()
    return legend_below(fig, axes.flat[0], ncols=3)


def run_explorer(runs, metrics=("eval_greedy_acc", "eval_sampled_acc", "reward", "entropy", "zero_std_frac")):
    """Explorer: pick a metric (drop-down) and a seed (slider); that seed's run is drawn over the other seeds (grey)."""
    from .explorer import Control, Explorer, line

    by_seed = {run.config.seed: run for run in runs}

    def view(metric, seed):
        others = [line(*run.series(metric), f"seed {s}", "0.75", showlegend=False)
                  for s, run in by_seed.items() if s != seed]
        chosen = line(*by_seed[seed].series(metric), f"seed {seed}", "C0", markers=metric.startswith("eval"))
        return {"data": [*others, chosen], "layout": {"title": {"text": f"{title(metric)}: seed {seed}"},
                                                       "xaxis": {"title": {"text": "model updates"}},
                                                       "yaxis": {"title": {"text": axis_label(metric)}}}}

    controls = [Control("metric", "metric", list(metrics), labels={m: title(m) for m in metrics}),
                Control("seed", "seed", sorted(by_seed), kind="slider")]
    return Explorer("Explore the reference runs (stored runs)",
                    "Pick a metric and a seed: that run in blue, the other seeds in grey. Before you move the seed, "
                    "predict how far apart two seeds end.", controls, view, {"height": 560})


def clipped_surrogate_figure(eps: float = 0.2):
    """GRPO's clipped surrogate of one token against its ratio r, for A = +1 and A = -1, beside r A (no clip)."""
    import torch

    from ..objectives import policy_loss

    ratios = torch.linspace(0.4, 1.8, 141)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    for ax, sign, heading in zip(axes, (1.0, -1.0), ("A positive (A = +1)", "A negative (A = -1)")):
        per_token = [-policy_loss("grpo", r.log().view(1, 1), torch.zeros(1, 1), torch.tensor([[sign]]),
                                  torch.ones(1, 1), eps_low=eps, eps_high=eps)[0].item() for r in ratios]
        ax.plot(ratios, per_token, label="clipped surrogate (GRPO)")
        ax.plot(ratios, sign * ratios, "--", alpha=0.7, label="r A, no trust region")
        for edge in (1 - eps, 1 + eps):
            ax.axvline(edge, color="grey", lw=1)
        ax.set(title=f"Advantage {heading}", xlabel="ratio r = new / old probability of the token",
               ylabel="objective per token")
    return legend_below(fig, axes, ncols=2)
