"""Chapter 3's bfloat16-rollout arm: the paper's inference/training mismatch, against a float32 control.

M2PO (arXiv 2510.01161, Fig. 5; papers.M2PO_REMOVED_TOKENS) reports that on-policy GRPO clips some response tokens.
Its rollouts come from an inference engine in bfloat16 while the trainer computes in higher precision, so even a batch
of the current policy has ratios r != 1. Our on-policy runs sample from the trained float32 model itself. The arm
(`experiments.fixed_rate_bf16_sweep`) samples with a bfloat16 copy of the policy (the behaviour log-probabilities are
the copy's) and trains the float32 one; its control samples in float32. Both run on the reference engine at the
fixed rate, and the two arms differ in the rollout precision alone. The cells: on-policy GRPO, and GRPO and M2PO at
s = 8.

Shares are averaged as on the lead figure (rlbook.chapters.m2_axis): a run's share is the mean over its stale
batches of each batch's share, and a cell's share is the seed mean of those.
"""
from __future__ import annotations

from dataclasses import replace

from .. import stats
from .m2_axis import fixed_rate_signatures, m2_over_tau, mean_pm, percent_pm, removed_share, seed_count
from .papers import M2PO_REMOVED_TOKENS
from .run_groups import select
from .verdicts import Signature, per_seed

PRECISIONS = ("bfloat16", "float32")  # the arm, then its control
CELLS = (("grpo", 0), ("grpo", 8), ("m2po", 8))  # as experiments.FIXED_RATE_BF16_CELLS
PAPER_ON_POLICY = (f"on-policy GRPO clips {100 * M2PO_REMOVED_TOKENS.values['grpo_s0']:.2f}% of tokens "
                   "(Qwen3-Base-1.7B, an inference engine's rollouts)")


def table(runs) -> str:
    """One row per cell and rollout precision: seeds, M2 / tau of its stale batches, the share of tokens its
    objective removes (GRPO's clip, M2PO's mask), its greedy score."""
    rows = ["| cell | rollouts | seeds | M2 / tau of its stale batches | tokens removed (clip or mask) | greedy score |",
            "|---|---|---|---|---|---|"]
    for objective, staleness in CELLS:
        for dtype in PRECISIONS:
            cell = select(runs, objective, staleness, rollout_dtype=dtype)
            label = f"| {objective.upper()}, s = {staleness} | {dtype} | {len(cell)} |"
            if not cell:
                rows.append(f"{label} - | - | - |")
                continue
            m2, share, score = (per_seed(cell, q) for q in (m2_over_tau, removed_share, stats.score))
            rows.append(f"{label} {mean_pm(m2, digits=3)} | {percent_pm(share)} | {mean_pm(score, digits=3)} |")
    return "\n".join(rows)


def added_by_bfloat16(runs) -> dict[tuple[str, int], stats.Estimate]:
    """Per cell stored in both precisions: the share of tokens its objective removes with bfloat16 rollouts minus the
    share with float32 ones (difference of the seed means), in cell order."""
    added = {}
    for objective, staleness in CELLS:
        low, high = (select(runs, objective, staleness, rollout_dtype=dtype) for dtype in PRECISIONS)
        if low and high:
            added[(objective, staleness)] = per_seed(low, removed_share) - per_seed(high, removed_share)
    return added


def added_sentence(runs) -> str:
    """added_by_bfloat16 in words, in percentage points of the response tokens."""
    added = added_by_bfloat16(runs)
    if not added:
        return "no cell is stored in both precisions yet"
    return "; ".join(f"{objective.upper()} at s = {staleness}: {mean_pm(e, 100, 3, '+')} points"
                     for (objective, staleness), e in added.items())


def mismatch_signature(runs) -> Signature:
    """The mismatch alone: on-policy GRPO clips more with bfloat16 rollouts than with float32 ones (seed means)."""
    claim = "bfloat16 rollouts make on-policy GRPO clip more tokens than float32 rollouts"
    low, high = (select(runs, "grpo", 0, rollout_dtype=dtype) for dtype in PRECISIONS)
    if not (low and high):
        return Signature(claim, PAPER_ON_POLICY, "a cell has no runs yet", "no runs")
    clip_low, clip_high = per_seed(low, removed_share), per_seed(high, removed_share)
    m2_low, m2_high = per_seed(low, m2_over_tau), per_seed(high, m2_over_tau)
    observed = (f"{percent_pm(clip_low)} vs {percent_pm(clip_high)} (batches' M2 = {mean_pm(m2_low, digits=3)} vs "
                f"{mean_pm(m2_high, digits=3)} tau; {seed_count(min(clip_low.n, clip_high.n))})")
    return Signature(claim, PAPER_ON_POLICY, observed, stats.verdict(clip_low - clip_high, +1))


def signatures(runs) -> list[Signature]:
    """The arm's verdicts: the mismatch itself, then the fixed-rate verdicts at s = 8 with bfloat16 rollouts (GRPO's
    clip against M2PO's mask, M2PO's mask against on-policy GRPO's clip, the cost of staleness), as the paper
    measured them: every run, on-policy included, with the mismatch."""
    low = select(runs, rollout_dtype="bfloat16")
    at_s = [replace(s, claim=f"bfloat16 rollouts, {s.claim}") for s in fixed_rate_signatures(low, select(low, "grpo", 0))]
    return [mismatch_signature(runs)] + at_s
