"""Triton kernels of the fused ratio op: one program per token row, a loop over vocabulary tiles.

Imported lazily (only when the triton backend is chosen), so `rlbook` imports without triton.
Tokens are grid axis 0 (up to 2^31 - 1 programs; axes 1 and 2 stop at 65535); row offsets are int64
because N * V passes 2^31 at N = 16384, V = 151936. Every accumulator is float32 whatever the logits dtype.
`scale` = 1 / temperature multiplies every logit as it is read (no scaled copy of the logits is made).
On a GPU the stats kernel's tile width and warps are autotuned per vocabulary size over CONFIGS (under the
interpreter, or when a caller passes block_v, one tile is used); the gradient kernel, which may overwrite its
input and so cannot be re-run to time it, streams with a fixed tile. Triton specialises row strides divisible by
16 (aligned, vector loads); a vocabulary that is not (the nano presets) still runs, with narrower loads.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BLOCK_V = 4096  # vocabulary tile when not autotuned: 37 tiles for Qwen3's V = 151936
NUM_WARPS = 8
CONFIGS = [triton.Config({"BLOCK": block}, num_warps=warps) for block in (2048, 4096, 8192) for warps in (4, 8, 16)]


@triton.jit
def _stats_kernel(logits_ptr, ids_ptr, logp_ptr, ent_ptr, lse_ptr, row_stride, V, scale, BLOCK: tl.constexpr):
    """Online log-sum-exp over tiles (online softmax, arXiv 1805.02867), with one block reduction per tile (the max).

    Running max m (a scalar), and per lane s = sum exp(x - m), t = sum exp(x - m) (x - m). When the max moves from
    m to m', s' = s e^(m-m') and t' = e^(m-m') (t + (m - m') s), lane by lane; the lanes are summed once, after the
    last tile. Then lse = m + log s, logp = (x_id - m) - log s, entropy H = log s - t / s (no cancellation against
    m, even at logits of 1e4).
    """
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * row_stride
    m = tl.full([], -1.0e30, tl.float32)  # a finite floor for the running max: no inf - inf below
    s = tl.zeros([BLOCK], tl.float32)
    t = tl.zeros([BLOCK], tl.float32)
    for start in range(0, V, BLOCK):
        cols = tl.max_contiguous(tl.multiple_of(start + tl.arange(0, BLOCK), BLOCK), BLOCK)
        x = tl.load(base + cols, mask=cols < V, other=float("-inf")).to(tl.float32) * scale
        m_new = tl.maximum(m, tl.max(x, axis=0))
        rescale = tl.exp(m - m_new)
        d = tl.maximum(x - m_new, -1.0e30)  # -inf logits and padding: e = 0 and e * d = 0, not nan
        e = tl.exp(d)
        t = rescale * (t + (m - m_new) * s) + e * d
        s = rescale * s + e
        m = m_new
    s_sum = tl.sum(s, axis=0)
    tok = tl.minimum(tl.maximum(tl.load(ids_ptr + row), 0), V - 1)  # memory safety only: ids are checked before
    x_id = tl.load(base + tok).to(tl.float32) * scale
    log_s = tl.log(s_sum)
    tl.store(logp_ptr + row, tl.minimum((x_id - m) - log_s, 0.0))  # log p <= 0, always
    tl.store(ent_ptr + row, tl.maximum(log_s - tl.sum(t, axis=0) / s_sum, 0.0))
    tl.store(lse_ptr + row, m + log_s)


@triton.jit
def _grad_kernel(logits_ptr, ids_ptr, lse_ptr, coef_ptr, out_ptr, row_stride, out_stride, V, scale,
                 BLOCK: tl.constexpr):
    """d loss / d x_v = coef_t scale (1[v = id_t] - softmax_v), softmax_v = exp(scale x_v - lse_t), tile by tile.

    A row with coef_t = 0 (padding, a zero advantage) is written with zeros without reading its logits.
    out may be the logits buffer itself: each tile is read before it is written, by the same program.
    """
    row = tl.program_id(0).to(tl.int64)
    tok = tl.minimum(tl.maximum(tl.load(ids_ptr + row), 0), V - 1)
    lse = tl.load(lse_ptr + row)
    coef = tl.load(coef_ptr + row)
    readable = tl.where(coef != 0.0, V, 0)  # columns to read: none in a row without a gradient
    for start in range(0, V, BLOCK):
        cols = tl.max_contiguous(tl.multiple_of(start + tl.arange(0, BLOCK), BLOCK), BLOCK)
        inside = cols < V
        x = tl.load(logits_ptr + row * row_stride + cols, mask=cols < readable, other=0.0).to(tl.float32)
        g = (coef * scale) * (tl.where(cols == tok, 1.0, 0.0) - tl.exp(x * scale - lse))
        tl.store(out_ptr + row * out_stride + cols, g.to(out_ptr.dtype.element_ty), mask=inside)


_stats_tuned = triton.autotune(CONFIGS, key=["V"])(_stats_kernel)  # the grad kernel may write in place: not tuned


def _tuned(block_v) -> bool:
    return block_v is None and os.environ.get("TRITON_INTERPRET") != "1"


def row_stats(logits: torch.Tensor, ids: torch.Tensor, block_v: int | None = None, scale: float = 1.0):
    """(logp, entropy, lse), float32 [N] each, of scale * logits [N, V] (a unit last stride)."""
    n, v = logits.shape
    logp, ent, lse = (torch.empty(n, device=logits.device, dtype=torch.float32) for _ in range(3))
    if n and _tuned(block_v):
        _stats_tuned[(n,)](logits, ids, logp, ent, lse, logits.stride(0), v, scale)
    elif n:
        _stats_kernel[(n,)](logits, ids, logp, ent, lse, logits.stride(0), v, scale,
                            BLOCK=block_v or BLOCK_V, num_warps=NUM_WARPS)
    return logp, ent, lse


def row_grad(logits, ids, lse, coef, out, block_v: int | None = None, scale: float = 1.0) -> torch.Tensor:
    """Writes coef_t d logp_t / d logits (of scale * logits) into out [N, V] (may be logits itself); returns out."""
    n, v = logits.shape
    if n:
        _grad_kernel[(n,)](logits, ids, lse, coef, out, logits.stride(0), out.stride(0), v, scale,
                           BLOCK=block_v or BLOCK_V, num_warps=NUM_WARPS)
    return out
