"""The fused ratio op on logits [N, V]: per-token log-prob, entropy and policy loss, reading the logits once per pass.

Forward: one kernel pass gives logp, entropy and lse per token of logits / temperature (O(N) numbers; lse is
saved; no scaled copy of the logits is made). The surrogate runs in PyTorch on those O(N) numbers
(`surrogate.py`), so autograd hands the backward coef_t = d loss / d logp_t, and one kernel pass writes
d loss / d x_tv = coef_t / T (1[v = id_t] - softmax_tv), recomputing the softmax from the saved lse tile by tile
(a row with coef_t = 0 is written as zeros without being read). No float32 [N, V] tensor is ever made.

In-place gradient (`inplace_grad=True`, off by default): the backward writes the gradient into the logits buffer
itself and returns it, saving one [N, V] allocation (2.5 GB at N = 8192, V = 151936, bf16). Only for a caller
that owns the logits and drops them after the backward (the trainer): a leaf tensor is refused, and an autograd
node that saved them (e.g. a tanh soft-cap) raises PyTorch's "modified by an inplace operation" error, because
the version counter is bumped. Logits with a non-unit last stride are copied first, and then the copy is
overwritten, not them.
"""
from __future__ import annotations

import torch

from . import rows
from .reference import reference_token_logprobs
from .surrogate import surrogate


class _TokenLogprob(torch.autograd.Function):
    """logits [N, V] -> (logp [N] differentiable, entropy [N] not), through the row kernels."""

    @staticmethod
    def forward(ctx, logits, ids, inplace, block_v, scale):
        logits = logits if logits.stride(-1) == 1 else logits.contiguous()
        logp, entropy, lse = rows.stats(logits, ids, "triton", block_v, scale)
        ctx.save_for_backward(logits, ids, lse)
        ctx.inplace, ctx.block_v, ctx.scale = inplace, block_v, scale
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        logits, ids, lse = ctx.saved_tensors
        out = logits if ctx.inplace else torch.empty_like(logits)
        rows.grad(logits, ids, lse, grad_logp, out, "triton", ctx.block_v, ctx.scale)
        if ctx.inplace:
            torch.autograd.graph.increment_version(logits)  # any later reader of the old values now fails loudly
        return out, None, None, None, None


def _logprobs(logits, ids, backend, inplace, block_v, temperature):
    if logits.dim() != 2 or ids.shape != logits.shape[:1]:
        raise ValueError(f"want logits [N, V] and ids [N]; got {tuple(logits.shape)} and {tuple(ids.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature={temperature} must be > 0")
    if inplace and logits.is_leaf and logits.requires_grad:
        raise ValueError("inplace_grad=True would overwrite a leaf tensor the caller owns with its gradient; pass "
                         "logits computed inside the graph (e.g. the lm_head output) or use inplace_grad=False")
    rows.check_ids(ids, logits.shape[1])
    if rows.resolve_backend(backend, logits) == "torch":
        return reference_token_logprobs(logits, ids, temperature)
    return _TokenLogprob.apply(logits, ids, inplace, block_v, 1.0 / temperature)


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, *, temperature: float = 1.0, backend: str = "auto",
                   inplace_grad: bool = False, block_v: int | None = None):
    """(logp, entropy), float32 [N] each, of logits [N, V] / temperature (bf16/fp16/fp32), ids [N] in [0, V).

    logp_t = x_t,id - logsumexp(x_t) <= 0, entropy_t = logsumexp(x_t) - sum_v p_tv x_tv, x = logits / T.
    logp is differentiable (gradient written to a fresh buffer, or into the logits with inplace_grad); entropy is
    not. Ids outside [0, V) raise ValueError.
    """
    return _logprobs(logits, ids, backend, inplace_grad, block_v, temperature)


def fused_policy_loss(logits, ids, behavior_logp, advantages, mask, objective, prox_logp=None, *,
                      temperature: float = 1.0, backend: str = "auto", inplace_grad: bool = False,
                      block_v: int | None = None, **params):
    """(loss, tokens) for flat token tensors [N]; the loss's gradient reaches the logits.

    Same objectives, parameters and numbers as `rlbook.objectives.policy_loss` (see `surrogate.py`); `tokens`
    holds detached [N] tensors logp, entropy, ratio, clipped_low, clipped_high, masked. `inplace_grad` (triton
    backend only) overwrites the logits with their gradient in the backward (see the module note).
    """
    logp, entropy = _logprobs(logits, ids, backend, inplace_grad, block_v, temperature)
    return surrogate(logp, entropy, behavior_logp, advantages, mask, objective, prox_logp, **params)
