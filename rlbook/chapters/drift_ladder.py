"""The drift ladder of chapters 2-3: M2PO's recovered share and the clip / mask fractions against the drift per update.

How much of staleness's cost M2PO recovers, and how GRPO's clip compares with M2PO's mask, as the drift per update
falls toward the papers' regime (M2PO, arXiv 2510.01161, Table 1 and Fig. 5). A rung is one learning rate. Its runs:
on-policy GRPO, and GRPO, M2PO and no trust region at the rung's largest staleness
(rlbook.experiments.drift_ladder_sweep). The drift of a rung is measured, not assumed: the M2 (mean squared log-ratio)
between consecutive policies, read off on-policy GRPO's updates that train on a batch sampled one update earlier
(policy_lag 1).
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, replace

import matplotlib.pyplot as plt

from .. import stats
from .papers import (M2PO_BEATS_STALE_GRPO, M2PO_MATCHES_ON_POLICY, M2PO_REMOVED_TOKENS, M2PO_SCORES,
                     M2PO_STALENESS_COST)
from .run_groups import select
from .style import legend_below, plain_log_ticks
from .verdicts import Signature, clip_share, collapse_signatures, per_seed, token_share

_SCORE = M2PO_SCORES.values
PAPER_SHARE = (_SCORE["m2po_s256"] - _SCORE["grpo_s256"]) / (_SCORE["grpo_s0"] - _SCORE["grpo_s256"])
PAPER_FRACTIONS = {"GRPO clips, s = 256": M2PO_REMOVED_TOKENS.values["grpo_s256"],
                   "GRPO clips, on-policy": M2PO_REMOVED_TOKENS.values["grpo_s0"],
                   "M2PO masks, s = 256": M2PO_REMOVED_TOKENS.values["m2po_s256"]}
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
    staleness = run.config.staleness
    values = [row["m2"] for row in run.metrics if row.get("update", 0) > staleness and row.get("m2") is not None]
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


def rate(lr: float) -> str:
    """A learning rate in one notation on every rung: 6.25e-5, 1.25e-4, 1e-3 (Python's :g writes 0.000125)."""
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def rungs(runs) -> list[Rung]:
    """The ladder's rungs present in runs, from the fastest drift (largest rate) to the slowest. A rung's staleness is
    the largest its configs ask for (a RunSet's): a rung whose stale runs are not stored yet shows them missing."""
    asked = getattr(runs, "configs", None) or [r.config for r in runs]
    out = []
    for lr in sorted({r.config.lr for r in runs}, reverse=True):
        at = [r for r in runs if r.config.lr == lr]
        staleness = max(c.staleness for c in asked if c.lr == lr)
        out.append(Rung(lr, staleness, select(at, "grpo", 0), select(at, "grpo", staleness),
                        select(at, "m2po", staleness), select(at, "no_clip", staleness)))
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
    """Per rung: staleness costs GRPO, M2PO beats GRPO there, M2PO matches on-policy GRPO, no trust region's
    prosperity and collapse against GRPO and M2PO there (verdicts.collapse_signatures); then the trend."""
    from .verdicts import MATCH_BOUND

    out = []
    for g in ladder:
        where = f"lr {rate(g.lr)}, s = {g.staleness}"
        if not g.complete:
            out.append(Signature(f"{where}: staleness cost and M2PO's recovery", M2PO_SCORES.text,
                                 "fewer than 3 seeds in a cell", "no runs"))
            continue
        cost = per_seed(g.on_policy, stats.score) - per_seed(g.grpo, stats.score)
        gain = per_seed(g.m2po, stats.score) - per_seed(g.grpo, stats.score)
        gap = per_seed(g.m2po, stats.score) - per_seed(g.on_policy, stats.score)
        out += [Signature(f"{where}: staleness costs GRPO", M2PO_STALENESS_COST.text,
                          f"cost {cost.mean:+.3f} ± {cost.se:.3f}", stats.verdict(cost, +1)),
                Signature(f"{where}: M2PO beats GRPO at s = {g.staleness}", M2PO_BEATS_STALE_GRPO.text,
                          f"{gain.mean:+.3f} ± {gain.se:.3f}", stats.verdict(gain, +1)),
                Signature(f"{where}: M2PO matches on-policy GRPO", M2PO_MATCHES_ON_POLICY.text,
                          f"{gap.mean:+.3f} ± {gap.se:.3f}", stats.matches(gap, MATCH_BOUND))]
        out += [replace(s, claim=f"{where}: {s.claim}")
                for s in collapse_signatures(g.no_clip, g.staleness, {"GRPO": g.grpo, "M2PO": g.m2po})]
    try:
        trend = share_trend(ladder)
    except ValueError as error:
        return out + [Signature("M2PO recovers more as the drift falls", "the papers sit at the small-drift end",
                                str(error), "no runs")]
    return out + [Signature("M2PO recovers more of staleness's cost as the drift per update falls",
                            f"M2PO recovers {PAPER_SHARE:.1f}x the cost at lr 1e-6 on a 1.7B model",
                            f"slope {trend.mean:+.2f} ± {trend.se:.2f} per decade of drift",
                            stats.verdict(trend, -1))]


# chapter 3's bar: GRPO clips at least 5 times what M2PO masks (the paper: 33x, papers.M2PO_REMOVED_TOKENS)
CLIP_OVER_MASK = 5
_REMOVED = M2PO_REMOVED_TOKENS.values
# the paper's numbers for chapter 3's two token claims, each row its own (Qwen3-Base-1.7B, Fig. 5)
PAPER_CLIP_OVER_MASK = (f"GRPO at s=256 clips {100 * _REMOVED['grpo_s256']:.2f}%, M2PO masks "
                        f"{100 * _REMOVED['m2po_s256']:.2f}% ({_REMOVED['grpo_s256'] / _REMOVED['m2po_s256']:.0f}x)")
PAPER_MASK_VS_ON_POLICY = (f"M2PO at s=256 masks {100 * _REMOVED['m2po_s256']:.2f}%, on-policy GRPO clips "
                           f"{100 * _REMOVED['grpo_s0']:.2f}%")


def mask_and_on_policy_clip(g: Rung) -> tuple[stats.Estimate, stats.Estimate]:
    """A rung's M2PO mask share at its staleness and on-policy GRPO's clip share, over seeds."""
    return per_seed(g.m2po, lambda r: token_share(r, "mask_frac")), per_seed(g.on_policy, clip_share)


def token_signatures(ladder: list[Rung]) -> list[Signature]:
    """Per rung (chapter 3): GRPO's clip at the staleness at least CLIP_OVER_MASK times M2PO's mask there, and
    M2PO's mask no more than on-policy GRPO's clip."""
    paper = M2PO_REMOVED_TOKENS.text
    out = []
    for g in ladder:
        where = f"lr {rate(g.lr)}, s = {g.staleness}"
        if not g.complete:
            out.append(Signature(f"{where}: GRPO's clip vs M2PO's mask", paper, "fewer than 3 seeds in a cell",
                                 "no runs"))
            continue
        clip = per_seed(g.grpo, clip_share)
        mask, clip0 = mask_and_on_policy_clip(g)
        scaled = stats.Estimate(CLIP_OVER_MASK * mask.mean, CLIP_OVER_MASK * mask.se, mask.n)
        out += [Signature(f"{where}: GRPO clips at least {CLIP_OVER_MASK}x what M2PO masks", PAPER_CLIP_OVER_MASK,
                          f"{100 * clip.mean:.2f}% vs {100 * mask.mean:.2f}% "
                          f"({clip.mean / mask.mean if mask.mean else math.inf:.1f}x)",
                          stats.verdict(clip - scaled, +1)),
                Signature(f"{where}: M2PO masks no more than on-policy GRPO clips", PAPER_MASK_VS_ON_POLICY,
                          f"{100 * mask.mean:.2f}% vs {100 * clip0.mean:.2f}%", stats.verdict(clip0 - mask, +1))]
    return out


def mask_account(ladder: list[Rung]) -> str:
    """Chapter 3's account read along the ladder: if M2PO's mask grows with the drift, "M2PO masks no more than
    on-policy GRPO clips" should fail on the fast rungs and hold on the slow ones. Which rungs it holds on, and the two
    shares at the fastest and the slowest complete rung."""
    done = [g for g in ladder if g.complete]  # fastest first
    if not done:
        return "cannot be read yet (no rung has 3 seeds in each cell)"
    shares = [mask_and_on_policy_clip(g) for g in done]
    held = [stats.verdict(clip0 - mask, +1) == stats.REPRODUCED for mask, clip0 in shares]
    (mask_fast, clip_fast), (mask_slow, clip_slow) = shares[0], shares[-1]
    numbers = (f"M2PO masks {100 * mask_fast.mean:.2f}% of tokens at the fastest rung and "
               f"{100 * mask_slow.mean:.2f}% at the slowest; on-policy GRPO clips {100 * clip_fast.mean:.2f}% and "
               f"{100 * clip_slow.mean:.2f}%")
    if not any(held):
        trend = ("the mask shrinks as the drift falls, but on-policy GRPO's clip shrinks faster"
                 if mask_slow.mean < mask_fast.mean else "the mask does not shrink as the drift falls")
        return (f"it holds on none of the {len(done)} rungs: {numbers}. So {trend}, and down to our slowest rung the "
                "account is not borne out")
    first_held = held.index(True)
    if all(held[first_held:]) and first_held:
        return (f"it fails on the {first_held} fastest rungs and holds on the {len(done) - first_held} slowest, the "
                f"pattern the account predicts: {numbers}")
    return f"it holds on {sum(held)} of the {len(done)} rungs, not only on the slow ones: {numbers}"


def _drift_axis(ax, xs, done: list[Rung]) -> None:
    """A log axis of drift per update with one tick per rung, labelled by its measured drift and, under it, the rung's
    learning rate and staleness (log minor labels, or labels beside the points, would overlap)."""
    from matplotlib.ticker import NullFormatter, NullLocator

    ax.set_xscale("log")
    ax.set_xticks(xs, [f"{_sci(x)}\nlr {rate(g.lr)}\ns = {g.staleness}" for x, g in zip(xs, done)])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("drift per update (M2 of consecutive policies, log scale)")


def _errorbar(ax, xs, estimates, **style):
    ax.errorbar(xs, [e.mean for e in estimates], yerr=[e.se for e in estimates], capsize=4, ms=8, lw=2, **style)


def share_figure(ladder: list[Rung]):
    """(a) The share of staleness's cost that M2PO recovers, against the measured drift per update."""
    done = [g for g in ladder if g.complete]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    xs = [statistics.fmean(drift(r) for r in g.on_policy) for g in done]
    shares = [share_estimate(g) for g in done]
    _errorbar(ax, xs, shares, marker="o", ls="none", color="tab:green", label="M2PO, one point per rung")
    ax.axhline(1.0, color="black", ls="--", lw=1.5, label="recovers all of it")
    ax.axhline(0.0, color="tab:blue", ls=":", lw=1.5, label="recovers nothing (GRPO at the same staleness)")
    _drift_axis(ax, xs, done)
    ax.set(ylabel="share of staleness's cost recovered",
           title="Share of staleness's cost that M2PO recovers, by drift per update")
    return legend_below(fig, [ax], ncols=2)


def fractions_figure(ladder: list[Rung]):
    """(b) GRPO's clip fraction at the largest staleness, M2PO's mask fraction there, and on-policy GRPO's clip
    fraction, against the same drift; the paper's three numbers as dashed lines (its drift per update is not
    reported, so they are drawn across the axis)."""
    done = [g for g in ladder if g.on_policy and g.grpo and g.m2po]
    fig, ax = plt.subplots(figsize=(9, 5.5))
    xs = [statistics.fmean(drift(r) for r in g.on_policy) for g in done]
    series = {"GRPO clips, s = largest": ([per_seed(g.grpo, clip_share) for g in done], "tab:blue", "o"),
              "GRPO clips, on-policy": ([per_seed(g.on_policy, clip_share) for g in done], "tab:cyan", "s"),
              "M2PO masks, s = largest": ([per_seed(g.m2po, lambda r: token_share(r, "mask_frac")) for g in done],
                                          "tab:green", "D")}
    for label, (estimates, color, marker) in series.items():
        percent = [stats.Estimate(100 * e.mean, 100 * e.se, e.n) for e in estimates]
        _errorbar(ax, xs, percent, marker=marker, ls="none", color=color, label=label)
    for (label, value), color in zip(PAPER_FRACTIONS.items(), ("tab:blue", "tab:cyan", "tab:green")):
        ax.axhline(100 * value, color=color, ls="--", lw=1.2, label=f"paper: {label}")
    _drift_axis(ax, xs, done)
    ax.set_yscale("log")
    plain_log_ticks(ax, minor=False)
    ax.set(ylabel="share of response tokens (%, log scale)",
           title="GRPO's clip and M2PO's mask as the drift falls")
    return legend_below(fig, [ax], ncols=2)


def _estimate(runs, quantity, scale=1.0, digits=3, suffix="") -> str:
    if not runs:
        return "–"
    e = per_seed(runs, quantity)
    spread = f" ± {scale * e.se:.{digits}f}" if e.n > 1 else ""  # one seed has no standard error
    return f"{scale * e.mean:.{digits}f}{spread}{suffix}" + (" (1 seed)" if e.n == 1 else "")


def _sci(x: float, digits: int = 1) -> str:
    """x in scientific notation without padded exponents (4.3e-3, not 4.3e-03): a table cell that fits its column."""
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _rate_cell(lr: float) -> str:
    """A learning rate in a table cell, with non-breaking hyphens: a narrow column never wraps 1.25e-4 after its e-."""
    return rate(lr).replace("-", "\u2011")


def _drift(runs) -> str:
    if not runs:
        return "–"
    e = per_seed(runs, drift)
    return f"{_sci(e.mean)} ± {_sci(e.se, 0)}" if e.n > 1 else f"{_sci(e.mean)} (1 seed)"


def rung_table(ladder: list[Rung]) -> str:
    """Chapter 2's table, one row per rung: the measured drift, each cell's score (mean ± s.e. over seeds) and the
    share of staleness's cost that M2PO recovers (the seeds are on the provenance line above it)."""
    rows = ["| lr | s | drift per update | GRPO s=0 | GRPO at s | M2PO at s | no trust region at s | share recovered |",
            "|---" * 8 + "|"]
    for g in ladder:
        share = share_estimate(g) if g.complete else None
        rows.append(f"| {_rate_cell(g.lr)} | {g.staleness} | {_drift(g.on_policy)} | "
                    f"{_estimate(g.on_policy, stats.score)} | {_estimate(g.grpo, stats.score)} | "
                    f"{_estimate(g.m2po, stats.score)} | {_estimate(g.no_clip, stats.score)} | "
                    f"{'–' if share is None else f'{share.mean:.2f} ± {share.se:.2f}'} |")
    return "\n".join(rows)


def token_table(ladder: list[Rung]) -> str:
    """Chapter 3's table, one row per rung: the drift, the stale batches' M2, and the share of response tokens GRPO
    clips at the rung's staleness, M2PO masks there, and on-policy GRPO clips."""
    rows = ["| lr | s | drift per update | M2 of stale batches | GRPO clips at s | M2PO masks at s | GRPO clips, s=0 |",
            "|---" * 7 + "|"]
    for g in ladder:
        rows.append(f"| {_rate_cell(g.lr)} | {g.staleness} | {_drift(g.on_policy)} | {_estimate(g.grpo, stale_m2)} | "
                    f"{_estimate(g.grpo, clip_share, 100, 2, '%')} | "
                    f"{_estimate(g.m2po, lambda r: token_share(r, 'mask_frac'), 100, 2, '%')} | "
                    f"{_estimate(g.on_policy, clip_share, 100, 2, '%')} |")
    return "\n".join(rows)
