"""Chapter 1 on two trainers: rlbook's runs and TRL's runs of the same config (rlbook.trl_backend), side by side."""
from __future__ import annotations

from dataclasses import fields

import matplotlib.pyplot as plt
import numpy as np

from .. import stats
from ..config import RunConfig
from ..experiments import grpo_from_scratch
from ..runset import provenance
from ..trl_backend import ENGINE_OPTIONS
from . import tables
from .verdicts import gain
from .style import axis_label, legend_below, title

TRL_EXPERIMENT = "01_grpo_trl"


def trl_config(profile: str, seed: int) -> RunConfig:
    """Chapter 1's config as the TRL backend trains it: rlbook's engine options at their defaults (TRL runs its own
    generation and forward), stored under its own experiment."""
    defaults = {f.name: f.default for f in fields(RunConfig) if f.name in ENGINE_OPTIONS}
    return grpo_from_scratch(profile, seed, experiment=TRL_EXPERIMENT, name=f"grpo-trl-{profile}-seed{seed}",
                             **defaults)


def mean_band(runs, metric: str, window: int = 1):
    """(updates, mean, standard error) of a metric over runs, at the updates every run recorded, each run's values
    first averaged over the last `window` of them."""
    series = [dict(zip(*run.series(metric))) for run in runs]
    updates = sorted(set.intersection(*(set(s) for s in series)))
    values = np.array([[s[u] for u in updates] for s in series])
    if window > 1:
        sums = np.cumsum(np.pad(values, ((0, 0), (1, 0))), axis=1)
        counts = np.minimum(np.arange(1, len(updates) + 1), window)
        values = (sums[:, 1:] - sums[:, np.maximum(np.arange(1, len(updates) + 1) - window, 0)]) / counts
    se = values.std(0, ddof=1) / np.sqrt(len(runs)) if len(runs) > 1 else np.zeros(len(updates))
    return np.array(updates), values.mean(0), se


def backends_figure(rlbook_runs, trl_runs, metrics=("eval_greedy_acc", "reward"), window: int = 20):
    """One panel per metric: the mean over seeds of each trainer's runs, shaded +- one standard error; training
    metrics averaged over the last `window` updates (evaluations are not)."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4.2), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for runs, label in ((rlbook_runs, "rlbook's trainer"), (trl_runs, "TRL's GRPOTrainer")):
            x, mean, se = mean_band(runs, metric, 1 if metric.startswith("eval") else window)
            line, = ax.plot(x, mean, marker="o" if metric.startswith("eval") else None, ms=3,
                            label=f"{label} ({len(runs)} seeds, mean +- s.e.)")
            ax.fill_between(x, mean - se, mean + se, color=line.get_color(), alpha=0.2)
        smoothed = "" if metric.startswith("eval") or window == 1 else f"\n(average of the last {window} updates)"
        ax.set(title=title(metric) + smoothed, xlabel="model updates", ylabel=axis_label(metric))
    return legend_below(fig, axes, ncols=2)


def provenance_line(rlbook_runs, trl_runs) -> str:
    """The provenance line of a figure of both trainers' runs: each trainer's seeds and the code that made them."""
    return f"rlbook's trainer: {provenance(rlbook_runs)}. TRL's GRPOTrainer: {provenance(trl_runs)}"


def score_table(rlbook_runs, trl_runs) -> str:
    """Markdown: each trainer's score (mean of the last 3 evaluations) and its gain over the base, over its seeds."""
    seeds = lambda runs: ", ".join(str(r.config.seed) for r in runs)
    columns = {"score (greedy)": tables.over_seeds(stats.score, tables.plus_minus()),
               "gain over the base": tables.over_seeds(gain, tables.plus_minus(sign="+"))}
    return tables.score_table({("rlbook's trainer", seeds(rlbook_runs)): rlbook_runs,
                               ("TRL's GRPOTrainer", seeds(trl_runs)): trl_runs}, columns, ("trainer", "seeds"))
