"""Chapter 3: the three M2PO rules in circulation, compared on the same stale batches.

Chapter 3: the three M2PO rules in circulation, compared on the same stale batches and each trained on its own:
Algorithm 1 (m2po, arXiv 2510.01161), the authors' released code (m2po_cap) and AReaL's (m2po_areal)."""
from __future__ import annotations

import math
import statistics

from .. import stats
from .verdicts import per_seed, token_share

VARIANTS = ("m2po", "m2po_cap", "m2po_areal")


def variant_removals(runs, first_updates_only: bool = True) -> dict[str, tuple[stats.Estimate, stats.Estimate]]:
    """What each M2PO variant removes from the same stale batches (recorded on every update of every run): per
    variant, the removed share of tokens and those tokens' mean entropy, over seeds (runs of training version 2 did not
    record it: with none that did, {}). AReaL's variant measures drift
    against the policy at the start of the step, which is the current one at a step's first update: with
    `first_updates_only` only those updates count, so the three act on the same numbers."""
    def mean_over(run, key):
        per = run.config.updates_per_step
        values = [row[key] for row in run.metrics
                  if row.get(key) is not None and row.get("update", 0) > run.config.staleness
                  and (not first_updates_only or (row["update"] - 1) % per == 0)]
        return statistics.fmean(values) if values else math.nan

    recorded = [r for r in runs if any(f"removed_frac_{VARIANTS[0]}" in row for row in r.metrics)]  # not older code's
    if not recorded:
        return {}
    return {v: (per_seed(recorded, lambda r, v=v: mean_over(r, f"removed_frac_{v}")),
                per_seed(recorded, lambda r, v=v: mean_over(r, f"entropy_removed_{v}"))) for v in VARIANTS}


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
