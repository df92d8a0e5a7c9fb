"""Group stored runs by their settings and draw each group's seeds as one line with its spread.

The helpers every chapter's run figures share. A setting is what the seeds of one cell share (objective, staleness,
M2PO's tau); `group_runs` and `select` pick them out of a run list, `aggregate` reduces one metric over seeds, and
`band` / `errorbars` / `finish` draw the result.
"""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from .. import stats
from ..experiments import DEFAULT_TAU
from .style import legend_below

ORDER = ("grpo", "no_clip", "m2po", "m2po_cap", "gspo", "tis", "decoupled")
COLORS = {"grpo": "tab:blue", "no_clip": "tab:red", "m2po": "tab:green", "m2po_cap": "olive", "gspo": "tab:purple",
          "tis": "tab:orange", "decoupled": "tab:brown"}


def tau_of(run) -> float:
    return run.config.objective_params.get("tau", DEFAULT_TAU)


def setting(run) -> tuple:
    """(objective, staleness, tau): what the seeds of one setting share."""
    return run.config.objective, run.config.staleness, tau_of(run)


def variant(run) -> str:
    """A run's objective, with "+r3" when it replays the rollout's routing (chapter 6's variants)."""
    return run.config.objective + ("+r3" if run.config.router_replay else "")


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


def select(runs, objective=None, staleness=None, tau=None, **fields) -> list:
    """The runs (one per seed) of one setting: objective / staleness / tau and any other config fields given (None:
    any); staleness="max": the largest in `runs`."""
    if staleness == "max":
        staleness = max((r.config.staleness for r in runs), default=None)
    return [r for r in runs if objective in (None, r.config.objective) and staleness in (None, r.config.staleness)
            and tau in (None, tau_of(r)) and all(getattr(r.config, k) == v for k, v in fields.items())]


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


def mean_of(run, key: str) -> float:
    """Mean of a per-update metric over the run."""
    _, values = run.series(key)
    return float(np.mean(values)) if values else math.nan


# ---- drawing ----

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
