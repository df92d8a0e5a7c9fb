"""Chapters 2 and 3 (M2PO, "Stable Off-Policy RL for LLMs", arXiv 2510.01161): reading stored runs.

Grouping runs by setting, seed means, per-run statistics, plotting helpers shared by the two chapters' figures and
the "paper reports / we observe" tables. The only numbers written here are the paper's published ones (`PAPER`).
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from .. import stats
from .style import legend_below

ORDER = ("grpo", "no_clip", "m2po", "m2po_cap", "gspo", "tis", "decoupled")
COLORS = {"grpo": "tab:blue", "no_clip": "tab:red", "m2po": "tab:green", "m2po_cap": "olive", "gspo": "tab:purple",
          "tis": "tab:orange", "decoupled": "tab:brown"}
CLIP_DEVIATION = 0.2  # GRPO's eps: a token is clipped beyond |r - 1| = 0.2 (in the rewarded direction)
# ---- pure helpers ----

def tau_of(run) -> float:
    return run.config.objective_params.get("tau", 0.04)


def setting(run) -> tuple:
    """(objective, staleness, tau): what the seeds of one setting share."""
    return run.config.objective, run.config.staleness, tau_of(run)


def run_label(run, seed: bool = True) -> str:
    c = run.config
    tau = f" tau={tau_of(run):g}" if "tau" in c.objective_params else ""
    return f"{c.objective} s={c.staleness}{tau}" + (f" seed {c.seed}" if seed else "")


def group_runs(runs, key=lambda r: (r.config.objective, r.config.staleness)) -> dict:
    """{key: [runs]} (the seeds of one setting together); keys sorted, objectives in ORDER."""
    groups = defaultdict(list)
    for run in runs:
        groups[key(run)].append(run)
    rank = lambda p: ((ORDER.index(p), "") if p in ORDER else (len(ORDER), p)) if isinstance(p, str) else (0, p)
    return {k: groups[k] for k in sorted(groups, key=lambda k: tuple(map(rank, k if isinstance(k, tuple) else (k,))))}


def select(runs, objective=None, staleness=None, tau=None) -> list:
    """The runs of one objective / staleness / tau (None: any); staleness="max": the largest in `runs`."""
    if staleness == "max":
        staleness = max((r.config.staleness for r in runs), default=None)
    return [r for r in runs if objective in (None, r.config.objective) and staleness in (None, r.config.staleness)
            and tau in (None, tau_of(r))]


def smooth(values, window: int = 1) -> list:
    """Trailing mean over `window` values (None: missing)."""
    v = np.array([np.nan if x is None else x for x in values], dtype=float)
    return [float(np.nanmean(v[max(0, i - window + 1):i + 1])) if np.isfinite(v[max(0, i - window + 1):i + 1]).any()
            else math.nan for i in range(len(v))]


def aggregate(runs, key: str, window: int = 1):
    """(updates, mean, min, max) of one metric over seeds, on the updates every run recorded."""
    series = [dict(zip(x, smooth(y, window))) for x, y in (run.series(key) for run in runs)]
    updates = sorted(set.intersection(*(set(s) for s in series))) if series else []
    values = np.array([[s[u] for u in updates] for s in series], dtype=float).reshape(len(series), len(updates))
    return updates, values.mean(0), values.min(0), values.max(0)


def removal_key(objective: str) -> str:
    """The metric of the tokens an objective takes out of the gradient: masked (m2po) or clipped (the others)."""
    return "mask_frac" if objective == "m2po" else "clip_frac"


def mean_of(run, key: str) -> float:
    """Mean of a per-update metric over the run."""
    _, values = run.series(key)
    return float(np.mean(values)) if values else math.nan


def batch_rewards(run):
    """(update of the sampling policy, mean reward) per rollout batch: a stale batch's reward measures the policy
    that sampled it, `policy_lag` updates before the update that trains on it."""
    by_version = defaultdict(list)
    for row in run.metrics[1:]:
        by_version[row["update"] - 1 - row["policy_lag"]].append(row["reward"])
    return sorted(by_version), [float(np.mean(by_version[v])) for v in sorted(by_version)]


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


# ---- plotting helpers of chapters 2 and 3 ----

def finish(fig, axes, ncols: int | None = None):
    """Grids on, one legend under the panels (clear of the data)."""
    for ax in np.atleast_1d(axes).flat:
        ax.grid(alpha=0.3)
    return legend_below(fig, axes, ncols)


def band(ax, runs, key, window=1, scale=1.0, **style):
    x, mean, lo, hi = aggregate(runs, key, window)
    line, = ax.plot(x, scale * mean, **style)
    if len(runs) > 1:
        ax.fill_between(x, scale * lo, scale * hi, color=line.get_color(), alpha=0.2)
    return line


def errorbars(ax, groups, value, **style):
    """Seed mean of value(run) per group at x = the group's key, with one-standard-error bars."""
    estimates = [stats.estimate([value(r) for r in seeds]) for seeds in groups.values()]
    return ax.errorbar(list(groups), [e.mean for e in estimates], yerr=[e.se for e in estimates], capsize=3, **style)
