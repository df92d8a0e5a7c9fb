"""Triton kernels of the fused ratio op: one program per token row, a loop over vocabulary tiles.

Imported lazily (only when the triton backend is chosen), so `rlbook` imports without triton.
Tokens are grid axis 0 (up to 2^31 - 1 programs; axes 1 and 2 stop at 65535); row offsets are int64
because N * V passes 2^31 at N = 16384, V = 151936. Every accumulator is float32 whatever the logits dtype.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_V = 4096  # vocabulary tile: 37 tiles for Qwen3's V = 151936
NUM_WARPS = 8


@triton.jit
def _stats_kernel(logits_ptr, ids_ptr, logp_ptr, ent_ptr, lse_ptr, row_stride, V, BLOCK: tl.constexpr):
    """Online log-sum-exp over tiles (PAPERS.md section 6).

    Running max m, s = sum exp(x - m), t = sum exp(x - m) (x - m). When the max moves from m to m',
    s' = s e^(m-m') and t' = e^(m-m') (t + (m - m') s). Then lse = m + log s, logp = (x_id - m) - log s,
    entropy H = lse - sum p x = log s - t / s (no cancellation against m, even at logits of 1e4).
    """
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * row_stride
    m = tl.full([], -1.0e30, tl.float32)  # a finite floor for the running max: no inf - inf below
    s = tl.zeros([], tl.float32)
    t = tl.zeros([], tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        scale = tl.exp(m - m_new)
        d = tl.maximum(x - m_new, -1.0e30)  # -inf logits and padding: e = 0 and e * d = 0, not nan
        e = tl.exp(d)
        t = scale * (t + (m - m_new) * s) + tl.sum(e * d, axis=0)
        s = scale * s + tl.sum(e, axis=0)
        m = m_new
    tok = tl.minimum(tl.maximum(tl.load(ids_ptr + row), 0), V - 1)  # memory safety only: ids must be valid
    x_id = tl.load(base + tok).to(tl.float32)
    log_s = tl.log(s)
    tl.store(logp_ptr + row, tl.minimum((x_id - m) - log_s, 0.0))  # log p <= 0, always
    tl.store(ent_ptr + row, tl.maximum(log_s - t / s, 0.0))
    tl.store(lse_ptr + row, m + log_s)


@triton.jit
def _grad_kernel(logits_ptr, ids_ptr, lse_ptr, coef_ptr, out_ptr, row_stride, out_stride, V, BLOCK: tl.constexpr):
    """d loss / d x_v = coef_t (1[v = id_t] - softmax_v), softmax_v = exp(x_v - lse_t), tile by tile.

    out may be the logits buffer itself: each tile is read before it is written, by the same program.
    """
    row = tl.program_id(0).to(tl.int64)
    tok = tl.minimum(tl.maximum(tl.load(ids_ptr + row), 0), V - 1)
    lse = tl.load(lse_ptr + row)
    coef = tl.load(coef_ptr + row)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        inside = cols < V
        x = tl.load(logits_ptr + row * row_stride + cols, mask=inside, other=0.0).to(tl.float32)
        g = coef * (tl.where(cols == tok, 1.0, 0.0) - tl.exp(x - lse))
        tl.store(out_ptr + row * out_stride + cols, g.to(out_ptr.dtype.element_ty), mask=inside)


def row_stats(logits: torch.Tensor, ids: torch.Tensor, block_v: int | None = None):
    """(logp, entropy, lse), float32 [N] each, for logits [N, V] with a unit last stride."""
    n, v = logits.shape
    logp, ent, lse = (torch.empty(n, device=logits.device, dtype=torch.float32) for _ in range(3))
    if n:
        _stats_kernel[(n,)](logits, ids, logp, ent, lse, logits.stride(0), v,
                            BLOCK=block_v or BLOCK_V, num_warps=NUM_WARPS)
    return logp, ent, lse


def row_grad(logits, ids, lse, coef, out, block_v: int | None = None) -> torch.Tensor:
    """Writes coef_t (onehot - softmax) into out [N, V] (may be logits itself) and returns out."""
    n, v = logits.shape
    if n:
        _grad_kernel[(n,)](logits, ids, lse, coef, out, logits.stride(0), out.stride(0), v,
                           BLOCK=block_v or BLOCK_V, num_warps=NUM_WARPS)
    return out
