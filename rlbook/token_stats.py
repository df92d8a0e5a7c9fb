"""Per-update token statistics: clip and mask fractions, entropy of clipped vs kept tokens, M2, |r-1| bins.

`summarize` takes detached [B, T] tensors and the `flags` of `rlbook.objectives.policy_loss`, computes
everything on the tensors' device and syncs once; it returns JSON-serialisable python numbers, with None
(never NaN) for a mean over an empty set.
"""
import math

import torch

from .objectives import m2po_variant_removals, trust_region

# Edges of the |r - 1| bins; bin i holds edges[i] <= |r - 1| < edges[i + 1]. In the output of `summarize`
# the last edge (infinity, an open-ended bin) is written as None so the dict stays strict JSON.
RATIO_DEV_EDGES = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, math.inf)


def summarize(logp, blogp, advantages, mask, entropy, flags, eta=0.5):
    """Statistics of one update's response tokens (mask != 0); `entropy` is the current policy's per-token
    entropy, `eta` the low-probability threshold on exp(blogp) (Lopti's 0.5 by default).

    Keys: clip_frac_low, clip_frac_high, clip_frac (= low + high), mask_frac, tr_frac (trust-region tokens
    (A>0 & r>1) | (A<0 & r<1)), low_prob_frac: fractions of the response tokens; entropy (all response tokens),
    entropy_clipped, entropy_masked, entropy_kept (neither clipped nor masked): mean entropies; m2 and m2_kept
    (not masked): mean (log r)^2; kl_k3: mean of r - 1 - log r; tokens_pos_adv, tokens_neg_adv,
    tokens_zero_adv: counts; ratio_bins: {"edges", "count", "entropy"} over RATIO_DEV_EDGES of |r - 1|;
    removed_frac_<v> and entropy_removed_<v>: what each M2PO variant v (m2po, m2po_cap, m2po_areal; tau 0.04) would
    take out of this very batch, whatever the objective that trains it.
    """
    resp = mask != 0

    def on_response(values):
        return torch.where(resp, values.detach().double(), 0.0)

    log_ratio = on_response(logp) - on_response(blogp)
    ratio = torch.exp(log_ratio)
    adv, ent = on_response(advantages), on_response(entropy)
    clipped_low, clipped_high, masked = (flags[key] & resp for key in ("clipped_low", "clipped_high", "masked"))
    clipped = clipped_low | clipped_high
    in_trust_region = trust_region(log_ratio, adv, resp)
    low_prob = resp & (torch.exp(on_response(blogp)) < eta)
    means = {  # name: (values, selection)
        "clip_frac_low": (clipped_low, resp), "clip_frac_high": (clipped_high, resp), "mask_frac": (masked, resp),
        "tr_frac": (in_trust_region, resp), "entropy": (ent, resp), "entropy_clipped": (ent, clipped),
        "entropy_masked": (ent, masked), "entropy_kept": (ent, resp & ~clipped & ~masked),
        "m2": (log_ratio.square(), resp), "m2_kept": (log_ratio.square(), resp & ~masked),
        "kl_k3": (ratio - 1 - log_ratio, resp), "low_prob_frac": (low_prob, resp),
    }
    for variant, removed in m2po_variant_removals(log_ratio, adv, resp).items():
        means[f"removed_frac_{variant}"] = (removed, resp)
        means[f"entropy_removed_{variant}"] = (ent, removed)
    sums = [(values.double() * selection).sum() for values, selection in means.values()]
    counts = [selection.sum().double() for _, selection in means.values()]
    signs = [(resp & (adv > 0)).sum(), (resp & (adv < 0)).sum(), (resp & (adv == 0)).sum()]

    inner_edges = torch.tensor(RATIO_DEV_EDGES[1:-1], dtype=torch.float64, device=ratio.device)
    bins = torch.bucketize((ratio - 1).abs(), inner_edges, right=True).flatten()
    n_bins = len(RATIO_DEV_EDGES) - 1
    empty_bins = torch.zeros(n_bins, dtype=torch.float64, device=ratio.device)
    bin_count = empty_bins.index_add(0, bins, resp.flatten().double())
    bin_entropy = empty_bins.index_add(0, bins, ent.flatten())

    parts = [torch.stack(sums), torch.stack(counts), torch.stack(signs).double(), bin_count, bin_entropy]
    sums, counts, signs, bin_count, bin_entropy = (  # the one device sync
        part.tolist() for part in torch.cat(parts).cpu().split([len(p) for p in parts]))

    out = {name: _mean(total, count) for name, total, count in zip(means, sums, counts)}
    low, high = out["clip_frac_low"], out["clip_frac_high"]
    out["clip_frac"] = None if low is None else low + high
    out.update(zip(("tokens_pos_adv", "tokens_neg_adv", "tokens_zero_adv"), map(int, signs)))
    out["ratio_bins"] = {
        "edges": [None if math.isinf(edge) else edge for edge in RATIO_DEV_EDGES],
        "count": [int(c) for c in bin_count],
        "entropy": [_mean(total, count) for total, count in zip(bin_entropy, bin_count)],
    }
    return out


def _mean(total, count):
    return total / count if count > 0 else None
