"""The O(N) part of the ratio op: the policy surrogate on per-token log-probs, shared by every path.

It calls `rlbook.objectives.policy_loss` itself on [1, N] views, so the fused, chunked and reference paths
cannot drift from the objectives module: autograd through it gives the backward kernels coef_t = d loss / d logp_t.
All token-separable objectives are fused (grpo, no_clip, m2po, m2po_cap, tis, decoupled); M2PO's mask is
decided inside it from the forward's ratios of all N tokens. Advantage Reweighting and Lopti need nothing
here: they arrive as already transformed advantages (Lopti: advantages times the stage mask).
"""
from __future__ import annotations

import torch

from ..objectives import FLAG_KEYS, OBJECTIVES, policy_loss

NOT_FUSED = {"gspo": "its ratio is per sequence: compute logp [B, T] with rlbook.ops.token_logprobs (or the "
                     "model's log_softmax) and call rlbook.objectives.policy_loss('gspo', ...) on [B, T] tensors"}
FUSED_OBJECTIVES = tuple(name for name in OBJECTIVES if name not in NOT_FUSED)


def surrogate(logp, entropy, behavior_logp, advantages, mask, objective, prox_logp=None, **params):
    """(loss, tokens) from flat [N] tensors; loss = policy_loss(objective) on the [1, N] views.

    tokens: detached [N] tensors logp, entropy, ratio = exp(logp - behavior_logp) (1 where mask = 0) and the
    bool flags clipped_low, clipped_high, masked; plus policy_loss's scalar extras (dual_clip_frac, m2po_cap_c).
    """
    if objective in NOT_FUSED:
        raise ValueError(f"objective {objective!r} is not fused: {NOT_FUSED[objective]}")
    if prox_logp is not None:
        params["prox_logp"] = prox_logp.reshape(1, -1)
    as_row = [t.reshape(1, -1) for t in (logp, behavior_logp, advantages, mask)]
    loss, flags = policy_loss(objective, *as_row, **params)
    logp = logp.detach()
    ratio = torch.where(mask != 0, torch.exp(logp - behavior_logp.detach()), torch.ones_like(logp))
    tokens = {"logp": logp, "entropy": entropy.detach(), "ratio": ratio}
    tokens.update({key: flag.reshape(-1) if key in FLAG_KEYS else flag for key, flag in flags.items()})
    return loss, tokens
