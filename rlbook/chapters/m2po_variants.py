"""Chapter 3: the three M2PO rules in circulation, compared on the same stale batches and each trained on its own.

Algorithm 1 (m2po, arXiv 2510.01161), the authors' released code (m2po_cap) and AReaL's (m2po_areal)."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from .. import stats
from . import mechanism
from .mechanism import FEW_SEEDS, reading
from .verdicts import difference, per_seed, token_share

VARIANTS = ("m2po", "m2po_cap", "m2po_areal")


def variant_removals(runs, first_updates_only: bool = True) -> dict[str, tuple[stats.Estimate, stats.Estimate]]:
    """What each M2PO variant removes from the same stale batches (recorded on every update of every run): per
    variant, the removed share of tokens and those tokens' mean entropy, over seeds (runs of training version 2 did not
    record it: with none that did, {}). AReaL's variant measures drift
    against the policy at the start of the step, which is the current one at a step's first update: with
    `first_updates_only` only those updates count, so the three act on the same numbers."""
    def mean_over(run, key):
        config = run.config
        values = [row[key] for row in run.metrics
                  if row.get(key) is not None and row.get("update", 0) > config.staleness
                  and (not first_updates_only or (row["update"] - 1) % config.updates_per_step == 0)]
        return statistics.fmean(values) if values else math.nan

    recorded = [r for r in runs if any(f"removed_frac_{VARIANTS[0]}" in row for row in r.metrics)]  # not older code's
    if not recorded:
        return {}
    return {v: (per_seed(recorded, lambda r, v=v: mean_over(r, f"removed_frac_{v}")),
                per_seed(recorded, lambda r, v=v: mean_over(r, f"entropy_removed_{v}"))) for v in VARIANTS}


# Reading a variant against Algorithm 1. No paper compares the three rules, so this is a reading of our runs, not a
# verdict: the difference of seed means and whether it lies beyond two standard errors (rlbook.stats' rule). Each is
# glued after "<the variant's quantity> is".
ABOVE, BELOW, WITHIN = mechanism.readings("Algorithm 1's")
NOT_STORED = "not read (no runs stored)"


def against_algorithm_1(by_variant: dict, quantity=stats.score) -> dict[str, tuple[stats.Estimate | None, str]]:
    """Each other variant's `quantity` (a run's score by default) minus Algorithm 1's (`m2po`), seed means with
    standard errors in quadrature, and its reading: variant -> (difference, reading); (None, NOT_STORED) where either
    side has no stored runs."""
    reference = by_variant.get(VARIANTS[0]) or []
    out = {}
    for v in VARIANTS[1:]:
        own = by_variant.get(v) or []
        d = difference(own, reference, quantity) if own and reference else None
        out[v] = (d, NOT_STORED if d is None else reading(d, "Algorithm 1's"))
    return out


def m2_met(run) -> float:
    """The M2 of the stale batches a run trained on: the mean over updates of the per-update `m2` (all response
    tokens, before any removal), after the first `staleness` updates (less stale batches, while the queue fills)."""
    staleness = run.config.staleness
    values = [row["m2"] for row in run.metrics if row.get("m2") is not None and row.get("update", 0) > staleness]
    return statistics.fmean(values) if values else math.nan


def own_removal(run) -> float:
    """The share of response tokens a run's own rule removed: clipped for the cap, masked for the masks."""
    return token_share(run, "clip_frac" if run.config.objective == "m2po_cap" else "mask_frac")


@dataclass(frozen=True)
class TrainedWith:
    """What a variant's own runs show, over seeds: score, the share of tokens its rule removed, the M2 it met."""
    score: stats.Estimate
    removed: stats.Estimate
    m2: stats.Estimate


def trained_with(by_variant: dict) -> dict[str, TrainedWith | None]:
    """Per variant (VARIANTS), from its own runs (`by_variant`: variant -> runs): a TrainedWith, None where none is
    stored."""
    return {v: TrainedWith(per_seed(runs, stats.score), per_seed(runs, own_removal), per_seed(runs, m2_met))
            if (runs := by_variant.get(v)) else None for v in VARIANTS}


def share_text(e: stats.Estimate) -> str:
    return f"{100 * e.mean:.2f}%"


def m2_text(e: stats.Estimate) -> str:
    return f"{e.mean:.3g} ± {e.se:.2g}"


NAMES = {"m2po": "Algorithm 1 (mask, trust-region candidates)", "m2po_cap": "released code (one cap, clip)",
         "m2po_areal": "AReaL (mask, every token a candidate)"}


def variants_table(removed: dict, by_variant: dict) -> str:
    """The three M2PO variants side by side: on the same batches (`removed`, the output of variant_removals, e.g. on
    GRPO's runs at the staleness; {} where none recorded it) what each removes and the entropy of what it removes;
    trained on their own rule (`by_variant`: variant -> runs, see trained_with), their score, the share of tokens
    their own rule removed and the M2 of the stale batches they met ('–' where a variant has no stored runs)."""
    rows = ["| variant | removed on the same batches | entropy of removed tokens | score trained with it | "
            "removed when trained with it | M2 met when trained with it |", "|---|---|---|---|---|---|"]
    for v, own in trained_with(by_variant).items():
        share, entropy = removed.get(v, (None, None))
        rows.append(f"| `{v}`: {NAMES[v]} | "
                    f"{'–' if share is None else f'{100 * share.mean:.2f}% ± {100 * share.se:.2f}'} | "
                    f"{'–' if entropy is None else f'{entropy.mean:.2f} ± {entropy.se:.2f}'} | "
                    f"{'–' if own is None else str(own.score)} | "
                    f"{'–' if own is None else share_text(own.removed)} | "
                    f"{'–' if own is None else m2_text(own.m2)} |")
    return "\n".join(rows)


# The test of chapter 3's hypothesis: AReaL's rule drifts further than Algorithm 1's because its masked tokens leave
# the loss's denominator (each kept token then carries a larger share of the gradient). The test trains AReaL's rule
# with the masked tokens kept in the denominator (experiments.areal_denominator_sweep), the only change. Where the
# denominator is the cause, the M2 the tested rule meets falls from AReaL's to Algorithm 1's.
CONCLUSIONS = {
    mechanism.SUPPORTED: "supports the hypothesis: the denominator accounts for AReaL's extra drift",
    mechanism.PARTLY: "supports it in part: the denominator accounts for some of AReaL's extra drift, not all of it",
    mechanism.NOT_SUPPORTED: "does not support the hypothesis: most of AReaL's extra drift comes from elsewhere (its "
                             "wider candidate set, which also masks tokens whose gradient would pull the ratio back "
                             "toward 1, or its clip to the policy at the start of the step)",
    mechanism.UNDECIDED: "cannot decide it at this noise"}


@dataclass(frozen=True)
class DenominatorTest:
    """The M2 met, read as a mechanism test (rlbook.chapters.mechanism: against AReaL's rule and Algorithm 1's), the
    score against AReaL's rule beside it, and the conclusion in words."""
    m2: mechanism.MechanismTest
    score: stats.Estimate
    score_reading: str
    conclusion: str


def denominator_test(areal, tested, algorithm_1) -> DenominatorTest | None:
    """AReaL's rule with its masked tokens in the denominator (`tested`) against AReaL's own rule (`areal`) and
    Algorithm 1's (`algorithm_1`), on the same rung and seeds: the M2 met moving down from AReaL's to Algorithm 1's,
    and the score. None where a side has fewer than stats.MIN_SEEDS runs."""
    test = mechanism.mechanism_test(tested, areal, algorithm_1, m2_met, -1, whose=("AReaL's", "Algorithm 1's"))
    if test is None:
        return None
    score = difference(tested, areal, stats.score)
    return DenominatorTest(test, score, reading(score, "AReaL's"), CONCLUSIONS[test.outcome])


def denominator_texts(test: DenominatorTest | None) -> dict[str, str]:
    """What chapter 3's prose quotes of the denominator test, by name (glued as denominator_<name>)."""
    m2 = mechanism.texts(None if test is None else test.m2, m2_text)
    return {"m2": m2["moved"], "m2_reading": m2["moved_reading"], "m2_vs_m2po": m2["apart"],
            "m2_vs_m2po_reading": m2["apart_reading"],
            "score": "–" if test is None else str(test.score),
            "score_reading": FEW_SEEDS if test is None else test.score_reading,
            "conclusion": mechanism.NO_TEST if test is None else test.conclusion}
