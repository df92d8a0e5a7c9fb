"""Chapter 3's lead figure and verdicts: GRPO's clip and M2PO's mask against the stale batches' M2 / tau.

M2PO (arXiv 2510.01161, Fig. 5; the numbers in papers.M2PO_REMOVED_TOKENS) reports that GRPO at s = 256 clips
tens of times the tokens M2PO masks. Both fractions depend on how far the batches drifted from the policy being
trained: their M2, the mean (log r)^2 over response tokens, against M2PO's budget tau = 0.04. M2PO masks nothing
while a batch's M2 is under tau, so its mask is tiny only where the batches' M2 is well below tau. The axis of
this module is that M2 / tau.

How fractions are averaged: a batch holds about 470 response tokens (128 completions of 3-4 tokens), so one masked
token is about 0.21% of a batch. A run's fraction is the mean over its stale batches (the updates after the first
`staleness`, which train on base-model rollouts) of each batch's share; a cell's is the seed mean of those, with its
standard error. The pooled curves put every batch of every run in one M2 / tau bin and average the batch shares in
each bin.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np

from .. import stats
from ..experiments import DEFAULT_TAU
from .drift_ladder import CLIP_OVER_MASK, PAPER_CLIP_OVER_MASK, PAPER_MASK_VS_ON_POLICY, rate, stale_m2
from .papers import M2PO_REMOVED_TOKENS, M2PO_STALENESS_COST
from .run_groups import select
from .style import legend_below, plain_log_ticks
from .verdicts import Signature, entropy_signature, per_seed

M2_BINS = np.geomspace(0.002, 50, 23)  # edges of M2 / tau for the pooled curves
MIN_BATCHES = 20  # a pooled bin with fewer batches is not drawn
PREDICTION = {"mask": 0.0005, "m2": 0.02, "clip": (0.01, 0.03)}  # at s = 8 (bench/results/pilots/fixed-rate-*)
PAPER = M2PO_REMOVED_TOKENS.values


def stale_rows(run) -> list[dict]:
    """The rows of a run's stale batches: updates after the first `staleness` that record an M2."""
    staleness = run.config.staleness  # read once: each read of run.config is a copy
    return [row for row in run.metrics if row.get("update", 0) > staleness and row.get("m2") is not None]


def stale_share(run, key: str) -> float:
    """Mean over the stale batches of each batch's share of response tokens in `key` (clip_frac, mask_frac, or
    removed_frac_m2po: what Algorithm 1's mask would remove from that batch)."""
    values = [row[key] for row in stale_rows(run) if row.get(key) is not None]
    if not values:
        raise ValueError(f"{run.path}: no stale batch records {key!r}")
    return statistics.fmean(values)


def removed_share(run) -> float:
    """The share a run's own objective removes from its stale batches: masked (M2PO) or clipped (the others)."""
    return stale_share(run, "mask_frac" if run.config.objective == "m2po" else "clip_frac")


def batch_tokens(runs) -> float | None:
    """Response tokens in a stale batch, averaged over the runs' stale batches that count them (one token is 1 / this
    of a batch); None without such a batch."""
    counts = ("tokens_pos_adv", "tokens_neg_adv", "tokens_zero_adv")
    sizes = [sum(row[k] for k in counts) for run in runs for row in stale_rows(run) if all(k in row for k in counts)]
    return statistics.fmean(sizes) if sizes else None


def m2_over_tau(run) -> float:
    return stale_m2(run) / DEFAULT_TAU


@dataclass
class Cell:
    """The seeds of one (learning rate, objective, staleness)."""
    lr: float
    objective: str
    staleness: int
    runs: list

    @property
    def label(self) -> str:
        return f"{'GRPO' if self.objective == 'grpo' else 'M2PO'}, s = {self.staleness}"

    def share(self) -> stats.Estimate:
        return per_seed(self.runs, removed_share)

    def m2(self) -> stats.Estimate:
        return per_seed(self.runs, m2_over_tau)


def cells(runs, objectives=("grpo", "m2po")) -> list[Cell]:
    """The cells of runs, by learning rate, objective and staleness (sorted)."""
    keys = sorted({(r.config.lr, r.config.objective, r.config.staleness) for r in runs
                   if r.config.objective in objectives})
    return [Cell(lr, o, s, [r for r in runs if (r.config.lr, r.config.objective, r.config.staleness) == (lr, o, s)])
            for lr, o, s in keys]


def pooled(runs, key: str, edges=M2_BINS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bin centres of M2 / tau, mean share of `key` per bin, batches per bin) over every stale batch of runs."""
    pairs = np.array([(row["m2"] / DEFAULT_TAU, row[key]) for run in runs for row in stale_rows(run)
                      if row.get(key) is not None])
    if not len(pairs):
        raise ValueError(f"no stale batch of {len(runs)} runs records {key!r}")
    index = np.digitize(pairs[:, 0], edges) - 1
    inside = (index >= 0) & (index < len(edges) - 1)
    counts = np.bincount(index[inside], minlength=len(edges) - 1)
    sums = np.bincount(index[inside], weights=pairs[inside, 1], minlength=len(edges) - 1)
    centres = np.sqrt(edges[:-1] * edges[1:])
    return centres, np.where(counts > 0, sums / np.maximum(counts, 1), np.nan), counts


def place(xs, ys, value: float) -> float | None:
    """Where a rising curve (xs, ys) reaches `value`, interpolated on log-log axes; None outside its range."""
    keep = [(x, y) for x, y in zip(xs, ys) if y > 0 and math.isfinite(y)]
    for (x0, y0), (x1, y1) in zip(keep, keep[1:]):
        if min(y0, y1) <= value <= max(y0, y1) and y0 != y1:
            t = (math.log(value) - math.log(y0)) / (math.log(y1) - math.log(y0))
            return math.exp(math.log(x0) + t * (math.log(x1) - math.log(x0)))
    return None


def paper_position(pool, value: float = PAPER["grpo_s256"]) -> float | None:
    """The M2 / tau at which the GRPO batches of `pool` clip `value` of their tokens (binned, MIN_BATCHES or more a
    bin): where a clip fraction the paper reports sits on our axis; None outside the curve's range."""
    x, clip, n = pooled([r for r in pool if r.config.objective == "grpo"], "clip_frac")
    return place(x[n >= MIN_BATCHES], clip[n >= MIN_BATCHES], value)


def axis_figure(fixed: list[Cell], pool: list) -> plt.Figure:
    """The lead figure: share of tokens removed against the stale batches' M2 / tau (log-log).

    Curves: every stale batch of the GRPO runs in `pool`, binned by M2 / tau; what GRPO's clip removed from them, and
    what M2PO's mask (Algorithm 1) would have removed from the same batches. Points: the cells of the fixed-rate
    sweep (each objective on its own batches; include on-policy GRPO as a cell of staleness 0), mean +- s.e. over
    seeds; a share of 0 sits on the axis floor. Stars: the paper's GRPO clip at s = 256 and
    at s = 0, placed where our GRPO curve clips as much, and its M2PO mask at the x of its GRPO s = 256 point."""
    fig, ax = plt.subplots(figsize=(10, 6))
    grpo = [r for r in pool if r.config.objective == "grpo"]
    x, clip, n = pooled(grpo, "clip_frac")
    _, mask, _ = pooled(grpo, "removed_frac_m2po")
    shown = n >= MIN_BATCHES
    ax.plot(x[shown], 100 * clip[shown], "-", color="tab:blue", lw=2, alpha=0.6,
            label=f"GRPO clips: its batches pooled ({len(grpo)} runs)")
    masked = shown & (mask > 0)
    ax.plot(x[masked], 100 * mask[masked], "-", color="tab:green", lw=2, alpha=0.6,
            label="M2PO's mask on those batches (Algorithm 1)")
    ax.plot(x[shown & (mask == 0)], np.full((shown & (mask == 0)).sum(), 0.0), "v", color="tab:green", alpha=0.6,
            clip_on=False, transform=ax.get_xaxis_transform(), label="M2PO's mask there: none in the bin")
    grpo_order = sorted(c.staleness for c in fixed if c.objective == "grpo")
    for cell in fixed:
        m2, share = cell.m2(), cell.share()
        color, marker = ("tab:blue", "o") if cell.objective == "grpo" else ("tab:green", "D")
        if share.mean <= 0:  # nothing masked: on the axis floor, as the pooled bins
            ax.plot(m2.mean, 0.0, marker, color=color, ms=9, clip_on=False, transform=ax.get_xaxis_transform())
            continue
        ax.errorbar(m2.mean, 100 * share.mean, xerr=m2.se, yerr=100 * share.se, marker=marker, color=color,
                    fillstyle="full" if cell.staleness else "none", ms=8, capsize=3, ls="none")
        # GRPO's points sit close along its curve: their labels alternate above-left and below-right of them
        dx, dy, ha = ((-6, 6, "right"), (6, -14, "left"))[grpo_order.index(cell.staleness) % 2] \
            if cell.objective == "grpo" else (6, -12, "left")
        ax.annotate(f"s={cell.staleness}", (m2.mean, 100 * share.mean), textcoords="offset points",
                    xytext=(dx, dy), ha=ha, fontsize=10, color=color)
    if fixed:
        ax.plot([], [], "o", color="tab:blue", label=f"GRPO clips, lr {rate(fixed[0].lr)} (hollow: s = 0)")
        ax.plot([], [], "D", color="tab:green", label=f"M2PO masks, lr {rate(fixed[0].lr)}")
    paper_x = paper_position(pool)
    for value, label, color, at in ((PAPER["grpo_s256"], "paper: GRPO clips, s = 256", "tab:blue", paper_x),
                                    (PAPER["grpo_s0"], "paper: GRPO clips, on-policy", "tab:cyan",
                                     paper_position(pool, PAPER["grpo_s0"])),
                                    (PAPER["m2po_s256"], "paper: M2PO masks, s = 256", "tab:green", paper_x)):
        if at is not None:
            ax.plot(at, 100 * value, "*", ms=18, color=color, markeredgecolor="black", label=label, zorder=5)
    ax.axvline(1.0, color="gray", ls=":", lw=1.5, label="M2 = tau: M2PO starts masking")
    tokens = batch_tokens(pool)
    if tokens is not None:
        ax.axhline(100 / tokens, color="gray", ls="--", lw=1, label=f"1 token of a {tokens:.0f}-token batch")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax, minor=False)
    ax.set(xlabel="M2 of the batches trained on / tau (log scale; tau = 0.04)",
           ylabel="response tokens removed (%, log scale)",
           title="Tokens GRPO clips and M2PO masks, by how far the batches drifted")
    return legend_below(fig, [ax], ncols=2)


def fixed_rate_signatures(runs, on_policy: list) -> list[Signature]:
    """Chapter 3 on the fixed-rate sweep, per staleness: GRPO clips at least CLIP_OVER_MASK times what M2PO masks;
    M2PO masks no more than on-policy GRPO clips (`on_policy`: GRPO at s = 0, same rate); staleness costs GRPO."""
    paper = M2PO_REMOVED_TOKENS.text
    clip0 = per_seed(on_policy, removed_share) if on_policy else None
    out = []
    for s in sorted({r.config.staleness for r in runs if r.config.staleness > 0}):
        grpo, m2po = select(runs, "grpo", s), select(runs, "m2po", s)
        where = f"s = {s}"
        if not (grpo and m2po and on_policy):
            out.append(Signature(f"{where}: GRPO's clip vs M2PO's mask", paper, "a cell has no runs yet", "no runs"))
            continue
        clip, mask = per_seed(grpo, removed_share), per_seed(m2po, removed_share)
        m2 = per_seed(m2po, m2_over_tau)
        scaled = stats.Estimate(CLIP_OVER_MASK * mask.mean, CLIP_OVER_MASK * mask.se, mask.n)
        ratio = f"{clip.mean / mask.mean:.0f}x" if mask.mean else "no token masked"
        cost = per_seed(on_policy, stats.score) - per_seed(grpo, stats.score)
        seeds = seed_count(min(clip.n, mask.n))
        out += [Signature(f"{where}: GRPO clips at least {CLIP_OVER_MASK}x what M2PO masks", PAPER_CLIP_OVER_MASK,
                          f"{percent_pm(clip)} vs {percent_pm(mask)} ({ratio}; M2PO's M2 = {mean_pm(m2)} tau; "
                          f"{seeds})", stats.verdict(clip - scaled, +1)),
                Signature(f"{where}: M2PO masks no more than on-policy GRPO clips", PAPER_MASK_VS_ON_POLICY,
                          f"{percent_pm(mask)} vs {percent_pm(clip0)} ({seeds})", stats.verdict(clip0 - mask, +1)),
                Signature(f"{where}: staleness costs GRPO", M2PO_STALENESS_COST.text,
                          f"on-policy minus s = {s}: {mean_pm(cost, digits=3, sign='+')} ({seeds})",
                          stats.verdict(cost, +1))]
    return out


def signatures(runs) -> list[Signature]:
    """The fixed-rate verdicts of runs of experiments.fixed_rate_axis (on-policy GRPO among them)."""
    return fixed_rate_signatures(runs, select(runs, "grpo", 0))


def chapter_signatures(runs) -> list[Signature]:
    """Chapter 3's one verdict table: the fixed-rate verdicts per staleness (signatures), then which tokens move on
    the same runs (signature d: token entropy against |r - 1|, GRPO at the largest staleness)."""
    return signatures(runs) + entropy_signature(runs)


def prediction(runs, staleness: int = 8) -> tuple[bool | None, str]:
    """The prediction recorded before the sweep (PREDICTION, at s = 8): (held, what was measured); held is None
    while a cell has no runs."""
    grpo, m2po = select(runs, "grpo", staleness), select(runs, "m2po", staleness)
    if not (grpo and m2po):
        return None, f"no runs at s = {staleness} yet"
    mask, m2 = per_seed(m2po, removed_share), per_seed(m2po, stale_m2)
    clip = per_seed(grpo, removed_share)
    low, high = PREDICTION["clip"]
    held = mask.mean <= PREDICTION["mask"] and m2.mean <= PREDICTION["m2"] and low <= clip.mean <= high
    return held, (f"M2PO masks {percent_pm(mask)} (predicted <= {100 * PREDICTION['mask']:.2f}%), "
                  f"its M2 {mean_pm(m2, digits=4)} (<= {PREDICTION['m2']}), "
                  f"GRPO clips {percent_pm(clip)} (predicted {100 * low:.0f}-{100 * high:.0f}%); "
                  f"{seed_count(min(mask.n, clip.n))}")


def seed_count(n: int) -> str:
    """"1 seed", "5 seeds"."""
    return f"{n} seed{'s' * (n != 1)}"


def mean_pm(e: stats.Estimate, scale: float = 1.0, digits: int = 2, sign: str = "") -> str:
    """mean ± s.e., without the ± for one seed (whose standard error is not measured)."""
    spread = f" ± {scale * e.se:.{digits}f}" if e.n > 1 else ""
    return f"{scale * e.mean:{sign}.{digits}f}{spread}"


def percent_pm(e: stats.Estimate) -> str:
    """A share as a percentage, mean ± s.e. to three decimals."""
    return mean_pm(e, 100, 3).replace(" ±", "% ±", 1) if e.n > 1 else f"{mean_pm(e, 100, 3)}%"


def table(fixed: list[Cell]) -> str:
    """One row per cell of the fixed-rate axis: seeds, M2 / tau of its batches, the share it removes, its score."""
    rows = ["| cell | seeds | M2 / tau of its stale batches | tokens removed (clip or mask) | greedy score |",
            "|---|---|---|---|---|"]
    for cell in fixed:
        m2, share, score = cell.m2(), cell.share(), per_seed(cell.runs, stats.score)
        rows.append(f"| {cell.label} | {len(cell.runs)} | {mean_pm(m2)} | {percent_pm(share)} "
                    f"| {mean_pm(score, digits=3)} |")
    return "\n".join(rows)
