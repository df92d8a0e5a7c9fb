"""Figures and tables of chapters 2 and 3 (M2PO, arXiv 2510.01161): staleness sweeps, clip vs mask, tau.

Every figure function takes stored `Run`s and returns a matplotlib figure; the seeds of one setting are drawn as
their mean with a min-max band. The tables are lists of rows computed from the runs; the only numbers written
here are the paper's published ones (`PAPER`, quoted from PAPERS.md section 2).
"""
from __future__ import annotations

import math
from collections import defaultdict

import matplotlib.pyplot as plt
import numpy as np

ORDER = ("grpo", "no_clip", "m2po", "m2po_cap", "gspo", "tis", "decoupled")
COLORS = {"grpo": "tab:blue", "no_clip": "tab:red", "m2po": "tab:green", "m2po_cap": "olive", "gspo": "tab:purple",
          "tis": "tab:orange", "decoupled": "tab:brown"}
CLIP_DEVIATION = 0.2  # GRPO's eps: a token is clipped beyond |r - 1| = 0.2 (in the rewarded direction)
PAPER = {  # arXiv 2510.01161, Qwen3-Base-1.7B, as summarised in PAPERS.md section 2 (signatures a-f)
    "a": "GRPO gets worse as staleness grows: 8-benchmark average 33.0 at s=0, 30.4 at s=256",
    "b": "no trust region at s=256: accuracy first rises fast ('prosperity'), then collapses",
    "c": "clipped tokens: GRPO s=0 0.07%, GRPO s=256 0.66%; M2PO s=256 masks 0.02%",
    "d": "token entropy rises with |r-1|: about 0.2 below the clip line to about 1.0 at |r-1| = 0.7",
    "e": "M2PO at s=256 matches on-policy GRPO: GRPO s=0 33.0, GRPO s=256 30.4, GSPO s=256 30.1, M2PO s=256 36.6",
    "f": "tau is insensitive between about 0.02 and 0.08; very small or very large values hurt",
}


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


def final(run, key: str = "eval_greedy_acc") -> float:
    _, values = run.series(key)
    return values[-1] if values else math.nan


def mean_of(run, key: str) -> float:
    """Mean of a per-update metric over the run."""
    _, values = run.series(key)
    return float(np.mean(values)) if values else math.nan


def peak(run, key: str = "eval_greedy_acc", first_update: int = 1):
    """(update, value) of the metric's maximum from `first_update` on (1: after the base model's row 0)."""
    x, y = run.series(key)
    i = int(np.argmax([v if u >= first_update else -math.inf for u, v in zip(x, y)]))
    return x[i], y[i]


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


# ---- figures ----

def _finish(fig, axes):
    for ax in np.atleast_1d(axes).flat:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _band(ax, runs, key, window=1, scale=1.0, **style):
    x, mean, lo, hi = aggregate(runs, key, window)
    line, = ax.plot(x, scale * mean, **style)
    if len(runs) > 1:
        ax.fill_between(x, scale * lo, scale * hi, color=line.get_color(), alpha=0.2)
    return line


def _errorbars(ax, groups, value, **style):
    """Mean of value(run) per group at x = the group's key, with min-max error bars."""
    stats = [[value(r) for r in seeds] for seeds in groups.values()]
    means = [float(np.mean(v)) for v in stats]
    return ax.errorbar(list(groups), means, yerr=[[m - min(v) for m, v in zip(means, stats)],
                                                  [max(v) - m for m, v in zip(means, stats)]], capsize=3, **style)


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
            _band(ax, seeds, metric, window, color=color, marker="o", ms=3, label=label)
        ax.set(title=objective, xlabel="model updates")
    axes[0, 0].set_ylabel(metric + (f" (mean of {window})" if window > 1 else ""))
    return _finish(fig, axes)


def final_vs_staleness(runs, metric: str = "eval_greedy_acc"):
    """Final accuracy vs staleness per objective, mean with min-max error bars (the summary of Figs. 1-3)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for objective, group in group_runs(runs, key=lambda r: r.config.objective).items():
        _errorbars(ax, group_runs(group, key=lambda r: r.config.staleness), lambda r: final(r, metric), marker="o",
                   color=COLORS.get(objective), label=objective)
    if runs:
        ax.axhline(np.mean([r.metrics[0][metric] for r in runs]), color="grey", ls=":", lw=1, label="base model")
    ticks = sorted({r.config.staleness for r in runs})
    ax.set_xscale("symlog", linthresh=4)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set(xlabel="staleness s (model updates)", ylabel=metric, title=f"final {metric}")
    return _finish(fig, ax)


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
    return _finish(fig, axes)


def removed_fraction(runs, window: int = 10):
    """Share of tokens taken out of the gradient over updates: clipped (grpo ...) or masked (m2po) (M2PO Fig. 7b)."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for (objective, _, _), seeds in group_runs(runs, key=setting).items():
        key = removal_key(objective)
        verb = "masked" if key == "mask_frac" else "clipped"
        _band(ax, seeds, key, window, scale=100, label=f"{run_label(seeds[0], seed=False)}: {verb}")
    ax.set(xlabel="model updates", ylabel="% of response tokens",
           title=f"tokens removed from the gradient (mean of {window} updates)")
    return _finish(fig, ax)


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
    return _finish(fig, axes)


def run_detail(run, first_update: int = 1, last_update: int | None = None, window: int = 10):
    """One run: entropy and share of tokens per |r - 1| bin over an update window, and the clipped or masked share
    over updates with the window shaded (what `widgets.run_explorer` draws)."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    edges = _draw_bins(axes[0], axes[1], [run], first_update, last_update, run_label(run))
    _decorate_bins(axes[0], axes[1], edges, first_update, last_update)
    key = removal_key(run.config.objective)
    _band(axes[2], [run], key, window, scale=100, label=key)
    axes[2].axvspan(first_update, last_update or len(run.metrics) - 1, color="grey", alpha=0.2, label="window")
    axes[2].set(title=f"{run_label(run)}: {key} (mean of {window})", xlabel="model updates", ylabel="% of tokens")
    return _finish(fig, axes)


def entropy_removed_vs_kept(runs):
    """Entropy of all, removed (clipped or masked) and kept tokens, bars per run (the argument of M2PO Fig. 4)."""
    fig, ax = plt.subplots(figsize=(max(5, 1.4 * len(runs) + 2), 3.4))
    values = np.array([removed_entropy(r) for r in runs]).reshape(len(runs), 3)
    for i, name in enumerate(("all tokens", "clipped or masked", "kept")):
        ax.bar(np.arange(len(runs)) + (i - 1) * 0.27, values[:, i], width=0.27, label=name)
    ax.set_xticks(range(len(runs)), [run_label(r).replace(" seed", "\nseed") for r in runs], fontsize=7)
    ax.margins(y=0.25)
    ax.set(title="token entropy: removed vs kept", ylabel="mean token entropy")
    return _finish(fig, ax)


def m2_before_after(runs, window: int = 10):
    """M2 = mean (log r)^2 over all response tokens and, for M2PO, over the tokens kept after masking, with tau
    (M2PO Fig. 9). tau bounds M2 of the kept trust-region tokens only, so the kept-token curve can sit above it."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for seeds in group_runs(runs, key=setting).values():
        line = _band(ax, seeds, "m2", window, label=f"{run_label(seeds[0], seed=False)}: all tokens")
        if seeds[0].config.objective == "m2po":
            _band(ax, seeds, "m2_kept", window, ls="--", color=line.get_color(), label="after masking")
    for tau in sorted({tau_of(r) for r in runs if r.config.objective == "m2po"}):
        ax.axhline(tau, color="grey", ls=":", lw=1, label=f"tau = {tau:g}")
    ax.set(xlabel="model updates", ylabel="M2 = mean (log r)^2", yscale="log",
           title=f"M2 before and after masking (mean of {window} updates)")
    ax.set_ylim(bottom=max(ax.get_ylim()[0], 1e-4))
    return _finish(fig, ax)


def tau_sweep_figure(runs, metric: str = "eval_greedy_acc", references=()):
    """Final accuracy and masked share vs M2PO's tau, mean with min-max bars (M2PO Fig. 8); `references` (e.g. GRPO
    at s=0) are drawn as horizontal lines."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.3))
    groups = group_runs(runs, key=tau_of)
    for ax, value in ((axes[0], lambda r: final(r, metric)), (axes[1], lambda r: 100 * mean_of(r, "mask_frac"))):
        if groups:
            _errorbars(ax, groups, value, marker="o", color=COLORS["m2po"], label="m2po")
        ax.set(xscale="log", xlabel="tau")
    for seeds, ls in zip(group_runs(references).values(), ("--", ":", "-.") * 3):
        axes[0].axhline(np.mean([final(r, metric) for r in seeds]), ls=ls, lw=1,
                        color=COLORS.get(seeds[0].config.objective), label=run_label(seeds[0], seed=False))
    axes[0].set(title=f"final {metric}", ylabel=metric)
    axes[1].set(title="masked tokens (mean over updates)", ylabel="% of response tokens")
    return _finish(fig, axes)


# ---- tables: "the paper reports / we observe" ----

def summary_rows(runs, metric: str = "eval_greedy_acc") -> list[dict]:
    """One row per (objective, staleness, tau): seeds, base and final metric (mean and range), best point after
    the start, clipped and masked share of tokens (mean over updates), where the runs ran."""
    rows = []
    for (objective, s, tau), seeds in group_runs(runs, key=setting).items():
        finals, mean = [final(r, metric) for r in seeds], lambda f: float(np.mean([f(r) for r in seeds]))
        rows.append({"objective": objective, "staleness": s, "tau": tau, "seeds": len(seeds),
                     "base": mean(lambda r: r.metrics[0][metric]), "final": float(np.mean(finals)),
                     "final_min": min(finals), "final_max": max(finals), "peak": mean(lambda r: peak(r, metric)[1]),
                     "clip_pct": 100 * mean(lambda r: mean_of(r, "clip_frac")),
                     "mask_pct": 100 * mean(lambda r: mean_of(r, "mask_frac")),
                     "device": ", ".join(sorted({str(r.meta.get("device", "?")) for r in seeds}))})
    return rows


def _two_se(first, second, metric) -> float:
    """Two standard errors of the difference of two mean accuracies (binomial, eval set x seeds per side)."""
    finals = [final(r, metric) for r in (*first, *second)]
    p = min(max(float(np.mean(finals)), 1e-3), 1 - 1e-3)
    n = lambda group: sum(r.config.eval_size for r in group)
    return 2 * float(np.sqrt(p * (1 - p) * (1 / n(first) + 1 / n(second))))


def _verdict(difference: float, noise: float) -> bool | str:
    """True / False when the difference is beyond two standard errors, else "within noise"."""
    return "within noise" if abs(difference) <= noise else difference > 0


def _observe(k, runs, top, metric):
    """(we observe, same direction as the paper?) for signature k; top = the largest staleness in runs."""
    acc = lambda o, s: [final(r, metric) for r in select(runs, o, s)]
    share = lambda o, s, key: 100 * np.mean([mean_of(r, key) for r in select(runs, o, s)])
    if k == "a":
        g0, gs = np.mean(acc("grpo", 0)), np.mean(acc("grpo", top))
        noise = _two_se(select(runs, "grpo", 0), select(runs, "grpo", top), metric)
        return f"GRPO final {g0:.3f} at s=0, {gs:.3f} at s={top} (2 s.e. {noise:.3f})", _verdict(g0 - gs, noise)
    if k == "b":
        run = select(runs, "no_clip", top)[0]
        versions, rewards = batch_rewards(run)
        rewards, (at, best) = smooth(rewards, 3), peak(run, metric)
        i = int(np.argmax(rewards[1:])) + 1 if len(rewards) > 1 else 0
        return (f"no_clip s={top} (seed {run.config.seed}): rollout reward {rewards[0]:.2f} (base model) -> peak "
                f"{rewards[i]:.2f} (policy of update {versions[i]}) -> {rewards[-1]:.2f}; {metric} "
                f"{run.metrics[0][metric]:.3f} -> best {best:.3f} (update {at}) -> final {final(run, metric):.3f}",
                rewards[i] > rewards[0] > rewards[-1])
    if k == "c":
        g0, gs, m = share("grpo", 0, "clip_frac"), share("grpo", top, "clip_frac"), share("m2po", top, "mask_frac")
        return f"clipped: GRPO s=0 {g0:.2f}%, GRPO s={top} {gs:.2f}%; M2PO s={top} masks {m:.2f}%", g0 < gs > m
    if k == "d":
        _, counts, entropy, edges = pooled_ratio_bins(select(runs, "grpo", top))
        cut = edges.index(CLIP_DEVIATION)
        far = (np.nan_to_num(entropy) * counts)[cut:].sum() / max(counts[cut:].sum(), 1)
        _, removed, kept = np.nanmean([removed_entropy(r) for r in select(runs, "grpo", top)], axis=0)
        return (f"GRPO s={top}: entropy {entropy[0]:.2f} at |r-1| < {edges[1]:g}, {far:.2f} at |r-1| >= "
                f"{CLIP_DEVIATION}; clipped tokens {removed:.2f} vs kept {kept:.2f}", far > entropy[0])
    others = "".join(f", {o.upper()} s={top} {np.mean(acc(o, top)):.3f}" for o in ("grpo", "gspo", "tis")
                     if acc(o, top))
    noise = _two_se(select(runs, "grpo", 0), select(runs, "m2po", top), metric)
    gap = np.mean(acc("m2po", top)) - np.mean(acc("grpo", 0))  # e: "matches" = not worse beyond the noise
    return (f"GRPO s=0 {np.mean(acc('grpo', 0)):.3f}{others}, M2PO s={top} {np.mean(acc('m2po', top)):.3f} "
            f"(2 s.e. {noise:.3f})", gap >= -noise)


def _observe_tau(tau_runs, metric):
    by_tau = {t: np.mean([final(r, metric) for r in g]) for t, g in group_runs(tau_runs, key=tau_of).items()}
    inside, outside = ([v for t, v in by_tau.items() if (0.02 <= t <= 0.08) == flag] for flag in (True, False))
    return ("final by tau: " + ", ".join(f"{t:g}: {v:.3f}" for t, v in by_tau.items()),
            bool(inside and outside and min(inside) >= max(outside)))


NEEDS = {"a": [("grpo", 0), ("grpo", "max")], "b": [("no_clip", "max")], "d": [("grpo", "max")],
         "c": [("grpo", 0), ("grpo", "max"), ("m2po", "max")], "e": [("grpo", 0), ("m2po", "max")]}


def paper_vs_observed(runs, tau_runs=(), metric: str = "eval_greedy_acc", signatures="abcdef") -> list[list[str]]:
    """Rows [signature, the paper reports, we observe, same direction?] for M2PO's signatures a-f, computed from the
    runs of a staleness sweep (a-e; default tau only) and M2PO runs over tau (f); missing runs are said so."""
    rows = []
    for k in signatures:
        if k == "f":
            seen = _observe_tau(tau_runs, metric) if tau_runs else None
        else:
            have = runs and all(select(runs, o, s) for o, s in NEEDS[k])
            seen = _observe(k, runs, max(r.config.staleness for r in runs), metric) if have else None
        verdict = lambda v: v if isinstance(v, str) else ("yes" if v else "no")
        rows.append([k, PAPER[k], *((seen[0], verdict(seen[1])) if seen else ("not in these runs", "-"))])
    return rows


def markdown_table(header, rows) -> str:
    """A markdown table ("|" escaped inside cells; floats with 3 decimals)."""
    fmt = lambda v: (f"{v:.3f}" if isinstance(v, float) else str(v)).replace("|", "\\|")
    lines = [header, ["---"] * len(header), *[[fmt(v) for v in row] for row in rows]]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)
