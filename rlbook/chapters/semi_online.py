"""Chapter 7's analysis: the stored runs of GRPO and online DPO at each generator sync interval.

Semi-online RL ("Bridging Offline and Online Reinforcement Learning for LLMs", arXiv 2506.21495): the runs of GRPO
and online DPO trained with the generator synced every k updates.

A run's sync interval is `RunConfig.sync_every` (1: online; 0: never, offline from the warm start). Every metrics row
records the lag of its batch's generator (`policy_lag`) and the seconds spent sampling (`sample_s`) and updating
(`update_s`). The paper's own numbers are in `rlbook.chapters.papers`.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from .. import stats
from ..experiments import DEFAULT_TAU, PAPER_RUN_STEPS_PROXY
from .run_groups import aggregate, finish, group_runs
from . import tables
from .style import METRICS as STYLE_METRICS

OBJECTIVE_COLORS = {"grpo": "tab:blue", "dpo": "tab:red"}
SYNC_STYLES = {1: "-", 0: ":"}  # online solid, offline dotted, semi-online dashed
METRICS = {**STYLE_METRICS, "loss": ("Training loss", "loss of the update's objective"),
           "policy_lag": ("Generator lag", "updates behind the policy")}


def sync_label(sync_every: int) -> str:
    return {1: "online", 0: "offline"}.get(sync_every, f"sync every {sync_every}")


def sync_order(sync_every: int) -> float:
    """Online first, offline (never synced) last, semi-online by interval in between."""
    return float("inf") if sync_every == 0 else sync_every


def setting(run) -> tuple:
    return run.config.objective, run.config.sync_every


def grouped(runs) -> dict:
    """{(objective, sync_every): [runs]}, objectives grpo then dpo, intervals online -> offline."""
    groups = group_runs(runs, key=setting)
    order = lambda key: (list(OBJECTIVE_COLORS).index(key[0]) if key[0] in OBJECTIVE_COLORS else 9, sync_order(key[1]))
    return {key: groups[key] for key in sorted(groups, key=order)}


def lag_figure(runs, updates: int = 250):
    """The generator's lag at each update, one run per sync interval: the sawtooth of semi-online RL, the rising
    line of offline training, online flat at 0."""
    fig, ax = plt.subplots(figsize=(11, 4))
    shown = set()
    for (objective, sync), seeds in grouped(runs).items():
        if sync in shown:
            continue
        shown.add(sync)
        rows = [r for r in seeds[0].metrics if r["update"] > 0][:updates]
        ax.plot([r["update"] for r in rows], [r["policy_lag"] for r in rows],
                              ls=SYNC_STYLES.get(sync, "--"), label=sync_label(sync))
    last = max((r["update"] for run in runs for r in run.metrics), default=0)
    cut = f" (the first {updates} of {last} updates)" if last > updates else ""
    ax.set(title=f"How stale each batch's generator is, update by update{cut}", xlabel="model updates",
           ylabel="generator lag (updates behind the policy)")
    return finish(fig, ax, ncols=4)


def accuracy_curves(runs, metric: str = "eval_greedy_acc", window: int = 10):
    """One panel per objective: accuracy (or another metric, a `window`-update mean) over updates, one line per sync
    interval (mean over seeds, band: min-max)."""
    groups = grouped(runs)
    objectives = list(dict.fromkeys(objective for objective, _ in groups))
    fig, axes = plt.subplots(1, len(objectives), figsize=(6.5 * len(objectives), 4.5), squeeze=False, sharey=True)
    for ax, objective in zip(axes.flat, objectives):
        for (obj, sync), seeds in groups.items():
            if obj != objective:
                continue
            evaluation = metric.startswith("eval")
            x, mean, low, high = aggregate(seeds, metric, 1 if evaluation else window)
            line, = ax.plot(x, mean, ls=SYNC_STYLES.get(sync, "--"), marker="o" if evaluation else None, ms=4,
                            label=f"{sync_label(sync)} ({len(seeds)} seed{'s' * (len(seeds) > 1)})")
            if len(seeds) > 1:
                ax.fill_between(x, low, high, color=line.get_color(), alpha=0.12, lw=0)
        title, unit = METRICS.get(metric, (metric, metric))
        ax.set(title=f"{objective.upper()}: {title[0].lower() + title[1:]}", xlabel="model updates", ylabel=unit)
    fig.suptitle(f"{'Accuracy' if metric.startswith('eval') else METRICS.get(metric, (metric,))[0]} over training by "
                 "how often the generator is synced (mean over seeds, band: min-max)")
    return finish(fig, axes.flat, ncols=4)


def _over_updates(run, key: str, reduce=np.mean) -> float:
    return float(reduce([r[key] for r in run.metrics if r["update"] > 0 and key in r]))


def seconds_per_update(run, key: str) -> float:
    """The median over a run's updates of `sample_s` or `update_s`: robust to the moments another process took the
    core (the reference runs trained two or more at a time on two cores)."""
    return _over_updates(run, key, np.median)


def score_and_cost_figure(runs):
    """Left: each setting's score (mean of the last 3 evaluations) against the sync interval, seed mean ± 1 s.e.
    Right: seconds per update spent generating and updating (medians over updates), seed means."""
    groups = grouped(runs)
    syncs = sorted({sync for _, sync in groups}, key=sync_order)
    x = {sync: i for i, sync in enumerate(syncs)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    objectives = list(dict.fromkeys(objective for objective, _ in groups))
    width = 0.8 / max(len(objectives), 1)
    for j, objective in enumerate(objectives):
        cells = [(sync, seeds) for (obj, sync), seeds in groups.items() if obj == objective]
        scores = [stats.estimate([stats.score(r) for r in seeds]) for _, seeds in cells]
        left.errorbar([x[s] for s, _ in cells], [e.mean for e in scores], yerr=[e.se for e in scores], capsize=4,
                      marker="o", color=OBJECTIVE_COLORS.get(objective), label=objective.upper())
        offsets = [x[s] + (j - (len(objectives) - 1) / 2) * width for s, _ in cells]
        sample = [np.mean([seconds_per_update(r, "sample_s") for r in seeds]) for _, seeds in cells]
        update = [np.mean([seconds_per_update(r, "update_s") for r in seeds]) for _, seeds in cells]
        color = OBJECTIVE_COLORS.get(objective)
        right.bar(offsets, sample, width, color=color, alpha=0.45, label=f"{objective.upper()}: generating")
        right.bar(offsets, update, width, bottom=sample, color=color, label=f"{objective.upper()}: updating")
    bases = [stats.base_score(r) for seeds in groups.values() for r in seeds]
    if bases:
        left.axhline(np.mean(bases), color="gray", ls="--", lw=1.5, label="warm start (before RL)")
    for ax in (left, right):
        ax.set_xticks(range(len(syncs)), [sync_label(s).replace("every ", "every\n") for s in syncs])  # no overlap
        ax.set_xlabel("generator synced with the policy")
    left.set(title="Score by sync interval", ylabel="greedy accuracy, mean of last 3 evaluations")
    right.set(title="Cost of an update", ylabel="seconds per update (one core)")
    return finish(fig, (left, right), ncols=4)


def score_table(runs) -> str:
    """Markdown: per objective x sync interval, the seeds, the greedy and sampled scores (seed mean ± s.e.), the
    gain over the warm start, the mean generator lag and the seconds per update spent generating and updating
    (medians over updates)."""
    over_seeds, plus_minus, mean = tables.over_seeds, tables.plus_minus, lambda digits: lambda e: f"{e.mean:.{digits}f}"
    columns = {"seeds": len, "greedy score": over_seeds(stats.score, plus_minus()),
               "gain over warm start": over_seeds(lambda r: stats.score(r) - stats.base_score(r), plus_minus(3, "+")),
               "sampled score": over_seeds(lambda r: stats.score(r, "eval_sampled_acc"), plus_minus()),
               "mean lag": over_seeds(lambda r: _over_updates(r, "policy_lag"), mean(1)),
               "s/update generating": over_seeds(lambda r: seconds_per_update(r, "sample_s"), mean(3)),
               "s/update updating": over_seeds(lambda r: seconds_per_update(r, "update_s"), mean(3))}
    groups = {(objective, sync_label(sync)): seeds for (objective, sync), seeds in grouped(runs).items()}
    return tables.score_table(groups, columns, ("objective", "generator"))


def explorer(sources: dict, metrics=("eval_greedy_acc", "eval_sampled_acc", "reward", "loss", "kl_k3",
                                      "policy_lag", "zero_std_frac")):
    """Explorer: pick a set of runs, an objective and a metric; one line per sync interval (mean over
    seeds; training metrics as a 10-update mean)."""
    from .explorer import Control, Explorer, line

    sources = {name: runs for name, runs in sources.items() if runs}
    objectives = sorted({r.config.objective for runs in sources.values() for r in runs},
                        key=lambda o: list(OBJECTIVE_COLORS).index(o) if o in OBJECTIVE_COLORS else 9)
    labels = {k: v[0] for k, v in METRICS.items()}

    def view(source, objective, metric):
        traces = []
        for (obj, sync), seeds in grouped(sources[source]).items():
            if obj != objective:
                continue
            x, mean, _, _ = aggregate(seeds, metric, 1 if metric.startswith("eval") else 10)
            traces.append(line(x, mean, f"{sync_label(sync)} ({len(seeds)} seed{'s' * (len(seeds) > 1)})",
                               None, markers=metric.startswith("eval")))
        short = source.split(" (")[0]  # the set's name; its seeds and code are in the menu beside
        return {"data": traces, "layout": {"title": {"text": f"{labels.get(metric, metric)}: {objective}, {short}"},
                                           "xaxis": {"title": {"text": "model updates"}},
                                           "yaxis": {"title": {"text": METRICS.get(metric, (0, metric))[1]}}}}

    controls = [Control("source", "runs", list(sources)), Control("objective", "objective", objectives),
                Control("metric", "metric", list(metrics), labels={m: labels.get(m, m) for m in metrics})]
    return Explorer("Explore the semi-online runs (stored runs)",
                    "Pick the runs, an objective and a metric: one line per sync interval (mean over seeds). Look at "
                    "where the offline line leaves the others, and whether the semi-online ones ever do.", controls,
                    view)


def drift_before_sync(run) -> float:
    """M2 / tau of the batches a semi-online run trains on just before each sync (generator lag k - 1: the furthest
    its policy moves from the generator's), mean over those updates; offline: the batches of the run's last tenth."""
    k, rows = run.config.sync_every, [r for r in run.metrics if r.get("update", 0) > 0 and r.get("m2") is not None]
    last = max(r["update"] for r in rows)
    picked = [r["m2"] for r in rows if (r["policy_lag"] == k - 1 if k > 1 else r["update"] > 0.9 * last)]
    if k == 1 or not picked:
        raise ValueError(f"{run.path}: sync_every={k} has no lagging batches (online runs sample every batch fresh)")
    return float(np.mean(picked)) / DEFAULT_TAU


def _score(runs) -> stats.Estimate:
    return stats.estimate([stats.score(r) for r in runs])


def sync_scale_table(runs) -> str:
    """Markdown: per objective and sync interval (semi-online and offline), the interval as a share of the run's
    updates, the paper's interval at that share of a run of PAPER_RUN_STEPS_PROXY steps (a proxy: the paper's run
    length is not known to us), and the drift the policy reaches from its generator before a sync (M2 / tau, seed
    mean ± s.e.), beside the score's distance from online."""
    paper_column = f"the paper's s at that share (a {PAPER_RUN_STEPS_PROXY:,}-step run)"
    rows = [f"| objective | sync interval | share of the run | {paper_column} | M2 / tau before a sync | score minus "
            "online |", "|---|---|---|---|---|---|"]
    groups = grouped(runs)
    for (objective, sync), seeds in groups.items():
        if sync == 1:
            continue
        updates = seeds[0].config.total_updates
        share = "whole run" if sync == 0 else f"{sync / updates:.1%} ({sync} of {updates})"
        paper = "∞ (offline)" if sync == 0 else f"{sync / updates * PAPER_RUN_STEPS_PROXY:g}"
        drift = tables.over_seeds(drift_before_sync)(seeds)
        online = groups.get((objective, 1))
        gap = "–" if not online else str(_score(seeds) - _score(online))
        rows.append(f"| {objective} | {sync_label(sync)} | {share} | {paper} | {drift} | {gap} |")
    return "\n".join(rows)
