"""The ratio op fused with a frozen lm_head: logits made `chunk_size` tokens at a time, never all at once.

Pass 1 (forward): per chunk, logits_c = hidden_c W^T, then (logp, entropy, lse) per token of logits_c / T; only
O(N) numbers are kept. The surrogate then sees every token's ratio at once (the M2PO mask needs all of them) and
autograd gives coef_t = d loss / d logp_t. Pass 2 (backward): only the rows with coef_t != 0 (padding and
zero-advantage tokens have none), per chunk: logits_c is recomputed, overwritten in place with
coef_t / T (onehot - softmax) and d hidden_c = d logits_c W. The weight is frozen (LoRA): no weight gradient.
Cost: the forward matmul twice plus the backward one, i.e. 3 x 2NHV flops; memory: one chunk of logits.
"""
from __future__ import annotations

import torch

from . import rows
from .surrogate import surrogate


def _chunks(n: int, size: int):
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


class _ChunkedLogprob(torch.autograd.Function):
    """hidden [N, H], weight [V, H] -> (logp [N] differentiable w.r.t. hidden, entropy [N] not)."""

    @staticmethod
    def forward(ctx, hidden, weight, ids, chunk_size, backend, block_v, scale):
        parts = [rows.stats(hidden[c] @ weight.T, ids[c], backend, block_v, scale)
                 for c in _chunks(len(ids), chunk_size)]
        logp, entropy, lse = (torch.cat(p) for p in zip(*parts))
        ctx.save_for_backward(hidden, weight, ids, lse)
        ctx.chunk_size, ctx.backend, ctx.block_v, ctx.scale = chunk_size, backend, block_v, scale
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, ids, lse = ctx.saved_tensors
        grad_hidden = torch.zeros_like(hidden)
        live = grad_logp.nonzero().squeeze(1)  # rows without a gradient are never recomputed
        for c in _chunks(len(live), ctx.chunk_size):
            at = live[c]
            logits = hidden[at] @ weight.T  # recomputed, then overwritten with its own gradient
            rows.grad(logits, ids[at], lse[at], grad_logp[at], logits, ctx.backend, ctx.block_v, ctx.scale)
            grad_hidden[at] = logits @ weight  # d hidden = d logits W
        return grad_hidden, None, None, None, None, None, None


def _apply(hidden, weight, ids, chunk_size, backend, block_v, temperature):
    if weight.requires_grad:
        raise ValueError("the chunked op computes no lm_head weight gradient: pass a frozen weight (LoRA), or "
                         "use fused_policy_loss on full logits to train the head")
    if hidden.dim() != 2 or weight.dim() != 2 or ids.shape != hidden.shape[:1] or chunk_size < 1:
        raise ValueError(f"want hidden [N, H], weight [V, H], ids [N], chunk_size >= 1; got {tuple(hidden.shape)}, "
                         f"{tuple(weight.shape)}, {tuple(ids.shape)}, {chunk_size}")
    if not temperature > 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    rows.check_ids(ids, weight.shape[0])
    return _ChunkedLogprob.apply(hidden, weight, ids, chunk_size, rows.resolve_backend(backend, hidden), block_v,
                                 1.0 / temperature)


def chunked_token_logprobs(hidden, weight, ids, *, temperature: float = 1.0, chunk_size: int = 2048,
                           backend: str = "auto", block_v: int | None = None):
    """(logp, entropy), float32 [N], of logits = hidden W^T / T without holding more than one chunk of them."""
    return _apply(hidden, weight, ids, chunk_size, backend, block_v, temperature)


def chunked_policy_loss(hidden, weight, ids, behavior_logp, advantages, mask, objective, prox_logp=None, *,
                        temperature: float = 1.0, chunk_size: int = 2048, backend: str = "auto",
                        block_v: int | None = None, **params):
    """(loss, tokens) as `fused_policy_loss` on logits = hidden W^T / T; the gradient reaches hidden only."""
    logp, entropy = _apply(hidden, weight, ids, chunk_size, backend, block_v, temperature)
    return surrogate(logp, entropy, behavior_logp, advantages, mask, objective, prox_logp, **params)
