"""Chapter 2 figures: accuracy against staleness (M2PO, arXiv 2510.01161, Figs. 1-3 and 11).

Every figure takes stored `Run`s and returns a matplotlib figure; the seeds of one setting are drawn as their mean
with a min-max band.
"""
from __future__ import annotations

from collections import defaultdict

import matplotlib.pyplot as plt
import numpy as np

from .. import stats
from ..experiments import DEFAULT_TAU
from .run_groups import COLORS, ORDER, aggregate, band, finish, group_runs, mean_of, run_label, setting, smooth
from . import drift_ladder, tables, verdicts
from .style import axis_label, plain_log_ticks, title

def batch_rewards(run):
    """(update of the sampling policy, mean reward) per rollout batch: a stale batch's reward measures the policy
    that sampled it, `policy_lag` updates before the update that trains on it."""
    by_version = defaultdict(list)
    for row in run.metrics[1:]:
        by_version[row["update"] - 1 - row["policy_lag"]].append(row["reward"])
    return sorted(by_version), [float(np.mean(by_version[v])) for v in sorted(by_version)]


def collapsed_seeds(cell) -> str:
    """"k of n seeds": the runs that end at least stats.COLLAPSE_FALL below their own smoothed peak."""
    if not cell:
        return "no runs"
    return f"{sum(stats.fall_from_peak(r) >= stats.COLLAPSE_FALL for r in cell)} of {len(cell)} seeds"


def grad_clip_share(runs) -> float | None:
    """The share of the runs' updates whose gradient norm (logged before clipping) exceeds the run's `max_grad_norm`:
    how often the gradient-norm clip binds. None where no update is stored."""
    limits = [run.config.max_grad_norm for run in runs]  # one config read a run, not one a row
    binds = [row["grad_norm"] > limit
             for run, limit in zip(runs, limits) for row in run.metrics[1:] if "grad_norm" in row]
    return float(np.mean(binds)) if binds else None


def _staleness_color(s, stalenesses):
    return plt.get_cmap("viridis")(0.9 * stalenesses.index(s) / max(len(stalenesses) - 1, 1))


def accuracy_curves(runs, metric: str = "eval_greedy_acc", window: int = 1):
    """Accuracy over model updates, one panel per objective, one line per staleness (M2PO Figs. 1-3 and 11)."""
    by_objective = group_runs(runs, key=lambda r: r.config.objective)
    stalenesses = sorted({r.config.staleness for r in runs})
    panels = max(len(by_objective), 1)
    ncols = min(panels, 3)
    nrows = -(-panels // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(5 * ncols, 7), 4 * nrows), sharey=True, squeeze=False)
    for ax in axes.flat[panels:]:
        ax.remove()
    for ax, (objective, group) in zip(axes.flat, by_objective.items()):
        for (_, s, _), seeds in group_runs(group, key=setting).items():
            band(ax, seeds, metric, window, color=_staleness_color(s, stalenesses), marker="o", ms=4,
                 label=f"staleness s = {s}")
        ax.set(title="no clip" if objective == "no_clip" else objective.upper(), xlabel="model updates")
    for row in axes:
        row[0].set_ylabel(axis_label(metric) + (f", mean of {window}" if window > 1 else ""))
    fig.suptitle(f"{title(metric)} as staleness grows (band: seeds' range)")
    return finish(fig, axes.flat[:panels], ncols=min(len(stalenesses), 4))


def final_vs_staleness(runs, metric: str = "eval_greedy_acc"):
    """Each run's score (mean of its last 3 evaluations) against staleness per objective: the seed mean with one
    standard error (the summary of Figs. 1-3); objectives are shifted a little sideways so their bars do not hide
    each other."""
    fig, ax = plt.subplots(figsize=(8, 5))
    objectives = group_runs(runs, key=lambda r: r.config.objective)
    for k, (objective, group) in enumerate(objectives.items()):
        cells = group_runs(group, key=lambda r: r.config.staleness)
        estimates = [stats.estimate([stats.score(r, metric) for r in seeds]) for seeds in cells.values()]
        shift = 1 + 0.04 * (k - (len(objectives) - 1) / 2)  # a symlog axis: a relative shift looks the same
        ax.errorbar([s * shift for s in cells], [e.mean for e in estimates], yerr=[e.se for e in estimates],
                    marker="o", ms=7, capsize=3, color=COLORS.get(objective), label=objective, clip_on=False)
    if runs:
        ax.axhline(np.mean([stats.base_score(r, metric) for r in runs]), color="grey", ls=":", lw=1.5,
                   label="base model")
    ticks = sorted({r.config.staleness for r in runs})
    ax.set_xscale("symlog", linthresh=4)
    if ticks:  # room beyond the first and last staleness, so no marker is cut at the frame
        ax.set_xlim(-1, ticks[-1] * 1.5)
        ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set(xlabel="staleness s (model updates between sampling and training)",
           ylabel=axis_label(metric) + ", last 3 evaluations",
           title=f"Final {title(metric).lower()} against staleness (bars: 1 standard error over seeds)")
    return finish(fig, ax, ncols=4)


STALENESS_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")  # one marker per staleness, in increasing order


def final_vs_m2(runs, metric: str = "eval_greedy_acc", tau: float = DEFAULT_TAU):
    """Each setting's score against the drift its stale data carried: the M2 of the trained batches (the mean
    squared log-ratio of policy to sampler over all response tokens, before any clip or mask; M2PO Eq. 3), averaged
    over the run. One point per (objective, staleness): the seed mean, bars one standard error on both axes; colour
    is the objective, the marker's shape the staleness (points of one staleness sit close together, so words beside
    them would overlap). Staleness is a count of updates; M2 is what it does to the data."""
    fig, ax = plt.subplots(figsize=(9, 6.5))
    marker = {s: m for s, m in zip(sorted({r.config.staleness for r in runs}), STALENESS_MARKERS * 4)}
    for objective, group in group_runs(runs, key=lambda r: r.config.objective).items():
        cells = group_runs(group, key=lambda r: r.config.staleness)
        m2 = [stats.estimate([mean_of(r, "m2") for r in seeds]) for seeds in cells.values()]
        score = [stats.estimate([stats.score(r, metric) for r in seeds]) for seeds in cells.values()]
        color = COLORS.get(objective)
        ax.errorbar([e.mean for e in m2], [e.mean for e in score], xerr=[e.se for e in m2],
                    yerr=[e.se for e in score], capsize=3, color=color, label=objective)
        for s, x, y in zip(cells, m2, score):
            ax.plot(x.mean, y.mean, marker=marker[s], ms=9, color=color, mec="black", mew=0.6, ls="none")
    for s, m in marker.items():  # the shapes' key, in grey
        ax.plot([], [], marker=m, ms=9, color="grey", mec="black", mew=0.6, ls="none", label=f"s = {s}")
    ax.axvline(tau, color="black", ls="--", lw=1, label=f"M2PO's tau = {tau:g}")
    if runs:
        ax.axhline(np.mean([stats.base_score(r, metric) for r in runs]), color="grey", ls=":", lw=1.5,
                   label="base model")
    ax.set_xscale("log")
    ax.margins(x=0.15, y=0.15)
    ax.set(xlabel="M2 of the trained batches (mean squared log-ratio, before clip or mask; log scale)",
           ylabel=axis_label(metric) + ", last 3 evaluations",
           title="Final accuracy against the drift (M2) of the data trained on")
    return finish(fig, ax, ncols=4)


def score_table(runs, metric: str = "eval_greedy_acc") -> str:
    """Markdown: each setting's score (mean of the last 3 evaluations) as seed mean ± standard error, objectives in
    rows, staleness in columns. A setting asked for (a RunSet's configs) with no stored run reads "missing"; a
    setting not in the sweep, "-"."""
    asked = {(c.objective, c.staleness) for c in getattr(runs, "configs", [r.config for r in runs])}
    stalenesses = sorted({s for _, s in asked} | {r.config.staleness for r in runs})
    objectives = group_runs(runs, key=lambda r: r.config.objective)
    shown = [o for o in ORDER if o in {o for o, _ in asked}] if asked else objectives
    groups = {o: (o, group_runs(objectives.get(o, []), key=lambda r: r.config.staleness)) for o in shown}
    score = tables.over_seeds(lambda r: stats.score(r, metric))

    def at(s):  # the cell of staleness s: the score over seeds, else "missing" (asked for) or "-" (not in the sweep)
        return lambda group: score(group[1][s]) if s in group[1] else "missing" if (group[0], s) in asked else "-"
    return tables.score_table(groups, {f"s = {s}": at(s) for s in stalenesses}, "objective")


def prosperity_before_collapse(runs, metric: str = "eval_greedy_acc", window: int = 3):
    """Accuracy over updates and reward per rollout batch (at the update of the policy that sampled it): one thick
    line per setting (mean over seeds; thin: each seed), its best point after the start starred and labelled
    (M2PO Figs. 1-2: without a trust region a stale run rises fast, then collapses)."""
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8))
    groups = group_runs(runs, key=setting)
    for k, seeds in enumerate(groups.values()):
        color = COLORS.get(seeds[0].config.objective)
        for ax, series, w in ((axes[0], lambda r: r.series(metric), 1), (axes[1], batch_rewards, window)):
            curves = [dict(zip(x, smooth(y, w))) for x, y in map(series, seeds)]
            x = sorted(set.intersection(*(set(c) for c in curves)))
            for curve in curves if len(curves) > 1 else ():
                ax.plot(x, [curve[u] for u in x], color=color, lw=0.8, alpha=0.35)
            y = np.nanmean([[c[u] for u in x] for c in curves], axis=0)
            seeds_label = f"{len(seeds)} seed{'s' * (len(seeds) > 1)}"
            ax.plot(x, y, color=color, lw=2.5, label=f"{run_label(seeds[0], seed=False)} ({seeds_label})")
            i = int(np.nanargmax(y[1:])) + 1 if len(y) > 1 else 0
            ax.plot(x[i], y[i], "*", ms=16, color=color, markeredgecolor="black", zorder=5)
            right = x[i] > (x[0] + x[-1]) / 2  # the label leans inwards, one row per setting above the data
            ax.annotate(f"best {y[i]:.2f} at {x[i]}", (x[i], y[i]), textcoords=("data", "axes fraction"),
                        xytext=(x[i], 0.95 - 0.1 * k), ha="right" if right else "left", va="top", color=color,
                        fontweight="bold", zorder=6,
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
                        arrowprops={"arrowstyle": "-", "color": color, "lw": 0.8})
    axes[0].set(title=f"{title(metric)} (update 0: the base model)", xlabel="model updates",
                ylabel=axis_label(metric))
    axes[1].set(title=f"Reward of each rollout batch (mean of {window})", xlabel="update of the policy that sampled it",
                ylabel="reward per completion")
    for ax in axes:  # room above the data for the labels
        ax.margins(y=0.2)
        low, high = ax.get_ylim()
        ax.set_ylim(low, high + 0.15 * len(groups) * (high - low))
    return finish(fig, axes, ncols=3)


def collapse_anatomy(runs, block: int = 25, what: str = ""):
    """What happens in a collapse, one colour per run: greedy accuracy, the largest gradient norm and the mean M2 of
    the trained batches per block of `block` updates, on one axis of updates (M2PO Figs. 1-2 show the accuracy);
    `what` names the runs in the first title (e.g. "LoRA")."""
    fig, axes = plt.subplots(3, 1, figsize=(7.5, 10), sharex=True)
    for k, run in enumerate(sorted(runs, key=lambda r: r.config.seed)):
        color = plt.get_cmap("tab10")(k % 10)
        axes[0].plot(*run.series("eval_greedy_acc"), color=color, lw=1.8, label=f"seed {run.config.seed}")
        for ax, key, reduce in ((axes[1], "grad_norm", np.max), (axes[2], "m2", np.mean)):
            x, y = run.series(key)
            starts = range(0, len(y), block)
            ax.plot([x[min(i + block, len(x)) - 1] for i in starts], [reduce(y[i:i + block]) for i in starts],
                    color=color, lw=1.4)
    axes[0].set(title=f"Greedy accuracy of each run{', ' + what if what else ''} (update 0: the base model)",
                ylabel=axis_label("eval_greedy_acc"))
    axes[1].set(title=f"Largest gradient norm per {block} updates (before any clipping)", ylabel="gradient norm",
                yscale="log")
    axes[2].set(title=f"Mean M2 of the trained batches per {block} updates", ylabel="M2 (mean sq. log-ratio)",
                yscale="log", xlabel="model updates")
    for ax in axes[1:]:  # label the minor ticks only where the axis spans less than a decade
        low, high = ax.get_ylim()
        plain_log_ticks(ax, minor=bool(np.log10(high / low) < 1))
    return finish(fig, axes, ncols=5)


def staleness_explorer(runs, metrics=("eval_greedy_acc", "eval_sampled_acc", "reward", "clip_frac", "entropy")):
    """Explorer: pick an objective and a metric, one curve per staleness (mean over seeds)."""
    from .explorer import Control, Explorer, line

    stalenesses = sorted({r.config.staleness for r in runs})
    objectives = list(group_runs(runs, key=lambda r: r.config.objective))
    metrics = [m for m in metrics if any(run.series(m)[0] for run in runs)]

    def view(objective, metric):
        traces = []
        for (_, s, _), seeds in group_runs([r for r in runs if r.config.objective == objective], key=setting).items():
            x, mean, _, _ = aggregate(seeds, metric, 1 if metric.startswith("eval") else 10)
            traces.append(line(x, mean, f"s = {s} ({len(seeds)} seed{'s' * (len(seeds) > 1)})",
                               _staleness_color(s, stalenesses),
                               markers=metric.startswith("eval")))
        return {"data": traces, "layout": {"title": {"text": f"{title(metric)}: {objective}, by staleness s"},
                                           "xaxis": {"title": {"text": "model updates"}},
                                           "yaxis": {"title": {"text": axis_label(metric)}}}}

    controls = [Control("objective", "objective", objectives, value="grpo"),
                Control("metric", "metric", metrics,
                labels={m: title(m) for m in metrics})]
    return Explorer("Explore the staleness sweep (stored runs)",
                    "Pick an objective and a metric: one line per staleness s (mean over seeds; training metrics as a "
                    "10-update mean). Look at how far the curves of large s fall below s = 0.", controls, view)


def chapter_signatures(runs, ladder) -> list:
    """Chapter 2's verdicts in one table: the staleness sweep's signatures at its largest staleness (a, b's prosperity
    and collapse, e) and the drift ladder's trend (`ladder`: drift_ladder.rungs)."""
    return verdicts.staleness_signatures(runs) + drift_ladder.signatures(ladder)[-1:]


def chapter_verdict_table(runs, ladder_runs) -> str:
    """chapter_signatures as the page's verdict table, under one line naming every run it rests on (the sweep's and
    the ladder's, each run once: the ladder's reference rung is the sweep's own cells)."""
    rows = chapter_signatures(runs, drift_ladder.rungs(ladder_runs))
    shown = list({str(run.path): run for run in [*runs, *ladder_runs]}.values())
    return tables.verdict_table(rows, shown, "The staleness sweep, and the drift ladder's trend")
