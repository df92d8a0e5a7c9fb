"""Token statistics: `summarize` against a direct numpy computation on random inputs with padding."""
import json

import numpy as np
import pytest
import torch

from rlbook.objectives import policy_loss
from rlbook.token_stats import RATIO_DEV_EDGES, summarize


def random_inputs(seed, batch=6, length=12):
    rng = np.random.default_rng(seed)
    blogp = -rng.exponential(1.0, (batch, length))
    logp = blogp + rng.normal(0, 0.5, (batch, length))
    adv = np.repeat(rng.choice([-1.0, 0.0, 0.7, 1.3], (batch, 1)), length, axis=1)
    mask = np.arange(length) < rng.integers(1, length + 1, (batch, 1))
    entropy = rng.uniform(0, 3, (batch, length))
    for array in (logp, blogp, entropy):
        array[~mask] = np.nan  # padding holds garbage; it must never count
    return logp, blogp, adv, mask, entropy


def numpy_summary(logp, blogp, adv, mask, entropy, flags, eta):
    """The statistics computed directly, one selection at a time."""
    def mean(values, selection):
        return float(values[selection].mean()) if selection.any() else None

    log_r = np.where(mask, logp - blogp, 0.0)
    r = np.exp(log_r)
    low, high, masked = (flags[key] & mask for key in ("clipped_low", "clipped_high", "masked"))
    clipped = low | high
    out = {
        "clip_frac_low": low[mask].mean(), "clip_frac_high": high[mask].mean(),
        "clip_frac": low[mask].mean() + high[mask].mean(), "mask_frac": masked[mask].mean(),
        "tr_frac": (((adv > 0) & (r > 1)) | ((adv < 0) & (r < 1)))[mask].mean(),
        "entropy": mean(entropy, mask), "entropy_clipped": mean(entropy, clipped),
        "entropy_masked": mean(entropy, masked), "entropy_kept": mean(entropy, mask & ~clipped & ~masked),
        "m2": mean(log_r ** 2, mask), "m2_kept": mean(log_r ** 2, mask & ~masked),
        "kl_k3": mean(r - 1 - log_r, mask), "low_prob_frac": (np.exp(blogp) < eta)[mask].mean(),
        "tokens_pos_adv": int((mask & (adv > 0)).sum()), "tokens_neg_adv": int((mask & (adv < 0)).sum()),
        "tokens_zero_adv": int((mask & (adv == 0)).sum()),
    }
    deviation = np.abs(r - 1)
    edges = list(RATIO_DEV_EDGES)
    in_bin = [mask & (deviation >= lo) & (deviation < hi) for lo, hi in zip(edges[:-1], edges[1:])]
    out["ratio_bins"] = {"count": [int(b.sum()) for b in in_bin], "entropy": [mean(entropy, b) for b in in_bin]}
    return out


def variant_removals(logp, blogp, adv, mask):
    """What each M2PO variant removes, from the variants' own objectives (tau 0.04): m2po's and AReaL's masks
    (AReaL's proximal policy = the current one), the clip branch of the released code's cap."""
    logp, blogp, adv = (torch.from_numpy(np.where(mask, a, 0.0)) for a in (logp, blogp, adv))
    resp = torch.from_numpy(mask)
    flags = {name: policy_loss(name, logp, blogp, adv, resp, **({"prox_logp": logp} if name == "m2po_areal" else {}))[1]
             for name in ("m2po", "m2po_cap", "m2po_areal")}
    return {"m2po": flags["m2po"]["masked"].numpy(), "m2po_areal": flags["m2po_areal"]["masked"].numpy(),
            "m2po_cap": (flags["m2po_cap"]["clipped_low"] | flags["m2po_cap"]["clipped_high"]).numpy()}


def assert_same(got, expected, path=""):
    if isinstance(expected, dict):
        for key, value in expected.items():
            assert_same(got[key], value, f"{path}.{key}")
    elif isinstance(expected, list):
        assert len(got) == len(expected), path
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{path}[{i}]")
    elif expected is None:
        assert got is None, path
    else:
        assert got == pytest.approx(float(expected), rel=1e-9, abs=1e-12), path


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("objective", ["grpo", "m2po"])
def test_summarize_matches_numpy(seed, objective):
    logp, blogp, adv, mask, entropy = random_inputs(seed)
    tensors = [torch.from_numpy(a) for a in (logp, blogp, adv, mask, entropy)]
    clean = [torch.where(tensors[3], t, 0.0) for t in tensors[:2]]  # the objective needs no NaN in padding
    params = {"eps_low": 0.1, "eps_high": 0.1} if objective == "grpo" else {"tau": 0.05}
    _, flags = policy_loss(objective, *clean, tensors[2], tensors[3], **params)
    eta = [0.5, 0.2, 0.8][seed % 3]
    got = summarize(*tensors, flags, eta=eta)
    json.dumps(got, allow_nan=False)  # strict JSON: no NaN, no infinity
    expected = numpy_summary(logp, blogp, adv, mask, entropy, {k: v.numpy() for k, v in flags.items()
                                                                if v.dtype == torch.bool}, eta)
    for variant, removed in variant_removals(logp, blogp, adv, mask).items():
        expected[f"removed_frac_{variant}"] = removed[mask].mean()
        expected[f"entropy_removed_{variant}"] = float(entropy[removed].mean()) if removed.any() else None
    assert set(got) == set(expected)
    assert_same(got, expected)
    assert got["ratio_bins"]["edges"] == list(RATIO_DEV_EDGES[:-1]) + [None]
    assert sum(got["ratio_bins"]["count"]) == int(mask.sum())


def test_summarize_empty_selections_are_none():
    ones = torch.ones(2, 3)
    flags = {key: torch.zeros(2, 3, dtype=torch.bool) for key in ("clipped_low", "clipped_high", "masked")}
    got = summarize(-ones, -ones, ones, ones, ones, flags)
    assert got["entropy_clipped"] is None and got["entropy_masked"] is None
    assert got["clip_frac"] == 0.0 and got["m2"] == 0.0 and got["kl_k3"] == 0.0
    assert got["ratio_bins"]["count"][0] == 6 and got["ratio_bins"]["entropy"][1:] == [None] * 8
    got = summarize(-ones, -ones, ones, torch.zeros(2, 3), ones, flags)  # no response token at all
    assert got["entropy"] is None and got["clip_frac"] is None and got["tokens_pos_adv"] == 0
    json.dumps(got, allow_nan=False)
