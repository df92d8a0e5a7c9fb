"""Chapter 5 figures (PMA, arXiv 2505.12082): the merge explorer's view of one merge."""
from __future__ import annotations

import matplotlib.pyplot as plt

from ..merging import merge_weights
from .pma import run_merges


def merge_figure(traj, checkpoints: dict, method: str = "sma", n: int | None = None,
               alpha: float | None = None, end: int | None = None):
    """Chapter 5, the merge explorer's figure: the weights w_i of a merge, and its held-out loss against the trajectory's
    (a stored merge replays at once; a new one is merged, evaluated and stored)."""
    n, alpha, end = n or traj.config.focus_n, alpha or traj.config.alpha, end or traj.stable[-1]
    merge = next(iter(run_merges(traj, [(method, n, end)], alpha, progress=False).values()))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.3), gridspec_kw={"width_ratios": [1, 2]})
    left.bar([str(s) for s in traj.stable if s <= end][-n:], merge_weights(method, n, alpha), color="C2")
    left.set(title=f"{method.upper()} weights $w_i$" + (f" (α={alpha})" if method == "ema" else ""),
             xlabel="checkpoint step")
    left.tick_params(axis="x", labelrotation=90)
    right.plot(traj.stable, [checkpoints[str(s)]["loss"] for s in traj.stable], "o-", ms=3, color="grey")
    points = [(end, merge, "D", "C2", "merge"), (end, checkpoints[str(end)], "s", "k", f"step {end}"),
              (traj.stable[-1], checkpoints["annealed_equal"], "P", "C4", "annealed, equal tokens"),
              (traj.config.max_steps, checkpoints["annealed"], "*", "C3", "annealed, final")]
    for x, r, marker, color, label in points:
        right.plot([x], [r["loss"]], marker, ms=9, color=color,
                   label=f"{label}: loss {r['loss']:.3f}, acc {r['acc']:.2f}")
    right.set(title="held-out loss", xlabel="step", yscale="log")
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    fig.tight_layout()
    return fig
