"""Plain PyTorch reference of the ratio op: float32 log_softmax + gather + entropy, gradients by autograd.

The CPU path and the test oracle. It materialises float32 [N, V] copies, which is what the fused op avoids.
"""
from __future__ import annotations

import torch

from .rows import check_ids, entropy_terms
from .surrogate import surrogate


def reference_token_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0):
    """logp_t = log softmax(x_t)[id_t] (differentiable), x = logits / T; entropy_t = -sum_v p_tv log p_tv (no grad).

    Ids outside [0, V) raise ValueError; -inf logits (probability 0) give finite log-probs and entropies."""
    check_ids(ids, logits.shape[-1])
    x = logits.float() if temperature == 1.0 else logits.float() / temperature
    logq = x.log_softmax(-1)
    logp = logq.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = entropy_terms(logq)
    return logp, entropy


def reference_policy_loss(logits, ids, behavior_logp, advantages, mask, objective, prox_logp=None, *,
                          temperature: float = 1.0, **params):
    """Same contract as `fused_policy_loss`, through autograd on the float32 log-softmax."""
    logp, entropy = reference_token_logprobs(logits, ids, temperature)
    return surrogate(logp, entropy, behavior_logp, advantages, mask, objective, prox_logp, **params)


def reference_chunked_policy_loss(hidden, weight, ids, behavior_logp, advantages, mask, objective,
                                  prox_logp=None, *, temperature: float = 1.0, **params):
    """Same contract as `chunked_policy_loss`: logits = hidden W^T in full, then the reference loss."""
    return reference_policy_loss(hidden @ weight.T, ids, behavior_logp, advantages, mask, objective, prox_logp,
                                 temperature=temperature, **params)
