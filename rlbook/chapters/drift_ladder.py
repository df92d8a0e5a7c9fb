"""Chapters 2-3, the drift ladder: how much of staleness's cost M2PO recovers, and how GRPO's clip compares with M2PO's
mask, as the drift per update falls toward the papers' regime (M2PO, arXiv 2510.01161, Table 1 and Fig. 5).

A rung is one learning rate. Its runs: on-policy GRPO, and GRPO, M2PO and no trust region at the rung's largest
staleness (rlbook.experiments.drift_ladder_sweep). The drift of a rung is measured, not assumed: the M2 (mean squared
log-ratio) between consecutive policies, read off on-policy GRPO's updates that train on a batch sampled one update
earlier (policy_lag 1).
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

import matplotlib.pyplot as plt

from .. import stats
from .style import legend_below
from .verdicts import Signature, cell, clip_share, per_seed, token_share

PAPER_SHARE = (36.6 - 30.4) / (33.0 - 30.4)  # M2PO Table 1, Qwen3-Base-1.7B: M2PO s=256, GRPO s=256, GRPO s=0
PAPER_FRACTIONS = {"GRPO clips, s = 256": 0.0066, "GRPO clips, on-policy": 0.0007, "M2PO masks, s = 256": 0.0002}
BOOTSTRAP = 2000  # resamples of each cell's seeds for the share's and the slope's standard errors


def drift(run) -> float:
    """M2 between consecutive policies: mean (log r)^2 of the updates trained on a batch one update old."""
    values = [row["m2"] for row in run.metrics if row.get("policy_lag") == 1 and row.get("m2") is not None]
    if not values:
        raise ValueError(f"{run.path}: no update trained on a batch one update old (an on-policy run with "
                         "updates_per_step > 1 has them)")
    return statistics.fmean(values)


def stale_m2(run) -> float:
    """M2 of the stale batches: mean over the updates after the first `staleness` (which train on base rollouts)."""
    values = [row["m2"] for row in run.metrics if row.get("update", 0) > run.config.staleness
              and row.get("m2") is not None]
    return statistics.fmean(values) if values else math.nan


@dataclass
class Rung:
    """The runs of one learning rate, by role (lists of runs, one per seed)."""
    lr: float
    staleness: int
    on_policy: list
    grpo: list
    m2po: list
    no_clip: list

    @property
    def complete(self) -> bool:
        return all(len(cells) >= stats.MIN_SEEDS for cells in (self.on_policy, self.grpo, self.m2po))


def rungs(runs) -> list[Rung]:
    """The ladder's rungs present in runs, from the fastest drift (largest rate) to the slowest."""
    out = []
    for lr in sorted({r.config.lr for r in runs}, reverse=True):
        at = [r for r in runs if r.config.lr == lr]
        staleness = max(r.config.staleness for r in at)
        out.append(Rung(lr, staleness, cell(at, "grpo", 0), cell(at, "grpo", staleness), cell(at, "m2po", staleness),
                        cell(at, "no_clip", staleness)))
    return out


def recovered_share(on_policy: list[float], grpo: list[float], m2po: list[float]) -> float:
    """(M2PO at s - GRPO at s) / (GRPO on-policy - GRPO at s): 1 when M2PO gets back all that staleness cost."""
    cost = statistics.fmean(on_policy) - statistics.fmean(grpo)
    return (statistics.fmean(m2po) - statistics.fmean(grpo)) / cost if cost else math.nan


def _resample(values, rng):
    return [rng.choice(values) for _ in values]


def share_estimate(rung: Rung, seed: int = 0) -> stats.Estimate:
    """The recovered share of one rung, its standard error from resampling each cell's seeds."""
    scores = [[stats.score(r) for r in cells] for cells in (rung.on_policy, rung.grpo, rung.m2po)]
    rng = random.Random(seed)
    draws = [recovered_share(*(_resample(s, rng) for s in scores)) for _ in range(BOOTSTRAP)]
    draws = [d for d in draws if math.isfinite(d)]
    return stats.Estimate(recovered_share(*scores), statistics.stdev(draws) if len(draws) > 1 else math.inf,
                          min(len(s) for s in scores))


def _slope(xs, ys) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def share_trend(ladder: list[Rung], seed: int = 0) -> stats.Estimate:
    """Least-squares slope of the recovered share against log10 of the measured drift, over the complete rungs,
    with the standard error of resampling every cell's seeds together (the drift is resampled with its runs)."""
    ladder = [r for r in ladder if r.complete]
    if len(ladder) < 3:
        raise ValueError(f"a trend needs at least 3 complete rungs; {len(ladder)} have >= {stats.MIN_SEEDS} seeds "
                         "in every cell")
    cells = [([stats.score(r) for r in g.on_policy], [stats.score(r) for r in g.grpo], [stats.score(r) for r in g.m2po],
              [drift(r) for r in g.on_policy]) for g in ladder]

    def slope(samples):
        xs = [math.log10(statistics.fmean(d)) for *_, d in samples]
        return _slope(xs, [recovered_share(o, g, m) for o, g, m, _ in samples])

    rng = random.Random(seed)
    draws = []
    for _ in range(BOOTSTRAP):
        resampled = []
        for on, grpo, m2po, d in cells:
            pick = [rng.randrange(len(on)) for _ in on]
            resampled.append(([on[i] for i in pick], _resample(grpo, rng), _resample(m2po, rng), [d[i] for i in pick]))
        draws.append(slope(resampled))
    draws = [d for d in draws if math.isfinite(d)]
    return stats.Estimate(slope(cells), statistics.stdev(draws), min(len(c[0]) for c in cells))


def signatures(ladder: list[Rung]) -> list[Signature]:
    """Per rung: staleness costs GRPO, M2PO beats GRPO there, M2PO matches on-policy GRPO; then the trend."""
    from .verdicts import MATCH_BOUND

    out = []
    paper = "Qwen3-Base-1.7B, s=256: GRPO 33.0 on-policy, 30.4 stale; M2PO 36.6"
    for g in ladder:
        where = f"lr {g.lr:g}, s = {g.staleness}"
        if not g.complete:
            out.append(Signature(f"{where}: staleness cost and M2PO's recovery", paper,
                                 "fewer than 3 seeds in a cell", "no runs"))
            continue
        cost = per_seed(g.on_policy, stats.score) - per_seed(g.grpo, stats.score)
        gain = per_seed(g.m2po, stats.score) - per_seed(g.grpo, stats.score)
        gap = per_seed(g.m2po, stats.score) - per_seed(g.on_policy, stats.score)
        out += [Signature(f"{where}: staleness costs GRPO", paper, f"cost {cost.mean:+.3f} ± {cost.se:.3f}",
                          stats.verdict(cost, +1)),
                Signature(f"{where}: M2PO beats GRPO at s = {g.staleness}", paper,
                          f"{gain.mean:+.3f} ± {gain.se:.3f}", stats.verdict(gain, +1)),
                Signature(f"{where}: M2PO matches on-policy GRPO", paper, f"{gap.mean:+.3f} ± {gap.se:.3f}",
                          stats.matches(gap, MATCH_BOUND))]
    try:
        trend = share_trend(ladder)
    except ValueError as error:
        return out + [Signature("M2PO recovers more as the drift falls", "the papers sit at the small-drift end",
                                str(error), "no runs")]
    return out + [Signature("M2PO recovers more of staleness's cost as the drift per update falls",
                            f"M2PO recovers {PAPER_SHARE:.1f}x the cost at lr 1e-6 on a 1.7B model",
                            f"slope {trend.mean:+.2f} ± {trend.se:.2f} per decade of drift",
                            stats.verdict(trend, -1))]


def _errorbar(ax, xs, estimates, **style):
    ax.errorbar(xs, [e.mean for e in estimates], yerr=[e.se for e in estimates], capsize=4, ms=8, lw=2, **style)


def share_figure(ladder: list[Rung]):
    """(a) The share of staleness's cost that M2PO recovers, against the measured drift per update."""
    done = [g for g in ladder if g.complete]
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [statistics.fmean(drift(r) for r in g.on_policy) for g in done]
    _errorbar(ax, xs, [share_estimate(g) for g in done], marker="o", color="tab:green", label="M2PO, our rungs")
    for x, g in zip(xs, done):
        ax.annotate(f"lr {g.lr:g}\ns = {g.staleness}", (x, 0), textcoords="offset points", xytext=(0, -34),
                    ha="center", fontsize=10, color="dimgray")
    ax.axhline(1.0, color="black", ls="--", lw=1.5, label="recovers all of it")
    ax.axhline(0.0, color="tab:blue", ls=":", lw=1.5, label="recovers nothing (GRPO at the same staleness)")
    ax.set_xscale("log")
    ax.set(xlabel="drift per update: M2 of consecutive policies (log scale)",
           ylabel="share of staleness's cost recovered",
           title="M2PO recovers more as each update moves the policy less")
    return legend_below(fig, [ax], ncols=2)


def fractions_figure(ladder: list[Rung]):
    """(b) GRPO's clip fraction at the largest staleness, M2PO's mask fraction there, and on-policy GRPO's clip
    fraction, against the same drift; the paper's three numbers as dashed lines (its drift per update is not
    reported, so they are drawn across the axis)."""
    done = [g for g in ladder if g.on_policy and g.grpo and g.m2po]
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [statistics.fmean(drift(r) for r in g.on_policy) for g in done]
    series = {"GRPO clips, s = largest": ([per_seed(g.grpo, clip_share) for g in done], "tab:blue", "o"),
              "GRPO clips, on-policy": ([per_seed(g.on_policy, clip_share) for g in done], "tab:cyan", "s"),
              "M2PO masks, s = largest": ([per_seed(g.m2po, lambda r: token_share(r, "mask_frac")) for g in done],
                                          "tab:green", "D")}
    for label, (estimates, color, marker) in series.items():
        percent = [stats.Estimate(100 * e.mean, 100 * e.se, e.n) for e in estimates]
        _errorbar(ax, xs, percent, marker=marker, color=color, label=label)
    for (label, value), color in zip(PAPER_FRACTIONS.items(), ("tab:blue", "tab:cyan", "tab:green")):
        ax.axhline(100 * value, color=color, ls="--", lw=1.2, label=f"paper: {label}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="drift per update: M2 of consecutive policies (log scale)",
           ylabel="share of response tokens (%, log scale)",
           title="GRPO's clip and M2PO's mask as the drift falls")
    return legend_below(fig, [ax], ncols=2)


def rung_table(ladder: list[Rung]) -> str:
    """One row per rung: the measured drift, the stale batches' M2, each cell's score (mean ± s.e. over seeds), the
    recovered share, and the token fractions."""
    rows = ["| lr | s | seeds | drift per update | M2 of stale batches | GRPO s=0 | GRPO at s | M2PO at s | "
            "no trust region at s | share recovered | GRPO clips at s | M2PO masks at s | GRPO clips, s=0 |",
            "|---" * 13 + "|"]

    def est(runs, quantity, scale=1.0, digits=3):
        if not runs:
            return "–"
        e = per_seed(runs, quantity)
        return f"{scale * e.mean:.{digits}f} ± {scale * e.se:.{digits}f}"

    for g in ladder:
        share = share_estimate(g) if g.complete else None
        rows.append(f"| {g.lr:g} | {g.staleness} | {min(map(len, (g.on_policy, g.grpo, g.m2po)))} | "
                    f"{est(g.on_policy, drift, digits=5)} | {est(g.grpo, stale_m2)} | {est(g.on_policy, stats.score)} | "
                    f"{est(g.grpo, stats.score)} | {est(g.m2po, stats.score)} | {est(g.no_clip, stats.score)} | "
                    f"{'–' if share is None else f'{share.mean:.2f} ± {share.se:.2f}'} | "
                    f"{est(g.grpo, clip_share, 100, 2)}% | {est(g.m2po, lambda r: token_share(r, 'mask_frac'), 100, 2)}% | "
                    f"{est(g.on_policy, clip_share, 100, 2)}% |")
    return "\n".join(rows)


VARIANTS = ("m2po", "m2po_cap", "m2po_areal")


def variant_removals(runs, first_updates_only: bool = True) -> dict[str, tuple[stats.Estimate, stats.Estimate]]:
    """What each M2PO variant removes from the same stale batches (recorded on every update of every run): per
    variant, the removed share of tokens and those tokens' mean entropy, over seeds. AReaL's variant measures drift
    against the policy at the start of the step, which is the current one at a step's first update: with
    `first_updates_only` only those updates count, so the three act on the same numbers."""
    def mean_over(run, key):
        per = run.config.updates_per_step
        values = [row[key] for row in run.metrics if row.get(key) is not None and row.get("update", 0) > run.config.staleness
                  and (not first_updates_only or (row["update"] - 1) % per == 0)]
        return statistics.fmean(values) if values else math.nan

    return {v: (per_seed(runs, lambda r, v=v: mean_over(r, f"removed_frac_{v}")),
                per_seed(runs, lambda r, v=v: mean_over(r, f"entropy_removed_{v}"))) for v in VARIANTS}


def variants_table(same_batches, by_variant: dict) -> str:
    """The three M2PO variants side by side: on the same batches (`same_batches`, e.g. GRPO's runs at the staleness)
    what each removes and the entropy of what it removes; trained on their own rule (`by_variant`: variant -> runs),
    their score and the share of tokens their own rule removed."""
    removed = variant_removals(same_batches) if same_batches else {}
    names = {"m2po": "Algorithm 1 (mask, trust-region candidates)", "m2po_cap": "released code (one cap, clip)",
             "m2po_areal": "AReaL (mask, every token a candidate)"}
    rows = ["| variant | removed on the same batches | entropy of removed tokens | score trained with it | "
            "removed when trained with it |", "|---|---|---|---|---|"]
    for v in VARIANTS:
        share, entropy = removed.get(v, (None, None))
        own = by_variant.get(v) or []
        key = "mask_frac" if v != "m2po_cap" else "clip_frac"
        rows.append(f"| `{v}`: {names[v]} | "
                    f"{'–' if share is None else f'{100 * share.mean:.2f}% ± {100 * share.se:.2f}'} | "
                    f"{'–' if entropy is None else f'{entropy.mean:.2f} ± {entropy.se:.2f}'} | "
                    f"{'–' if not own else str(per_seed(own, stats.score))} | "
                    f"{'–' if not own else f'{100 * per_seed(own, lambda r: token_share(r, key)).mean:.2f}%'} |")
    return "\n".join(rows)
