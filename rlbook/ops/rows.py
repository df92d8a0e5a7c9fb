"""Per-row vocabulary work, two backends: Triton kernels or closed-form PyTorch (one chunk at a time).

`stats` gives (logp, entropy, lse) per token; `grad` writes d loss / d logits = coef scale (onehot - softmax).
Both take logits [n, V] of any float dtype with a unit last stride (out too) and keep float32 per-token numbers;
`scale` = 1 / temperature is applied to the logits as they are read. The torch backend works TORCH_ROWS rows at a
time, so its float32 temporaries stay small whatever the chunk.
"""
from __future__ import annotations

import functools
import os

import torch

BACKENDS = ("auto", "triton", "torch")
TORCH_ROWS = 64  # the torch backend's float32 temporaries cover this many rows at a time (64 x 151936 x 4 = 39 MB)


@functools.cache
def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(backend: str, tensor: torch.Tensor) -> str:
    """'auto' = triton for CUDA tensors when triton imports, else torch; 'triton' on CPU needs the interpreter."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; choose one of {BACKENDS}")
    if backend == "auto":
        return "triton" if tensor.is_cuda and _triton_importable() else "torch"
    if backend == "triton" and not _triton_importable():
        raise ImportError("backend='triton' needs triton (pip install 'rlbook[triton]'); or use backend='torch'")
    if backend == "triton" and not tensor.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("backend='triton' on a CPU tensor runs only under the Triton interpreter: set "
                           "TRITON_INTERPRET=1 before triton is imported, or use backend='torch'")
    return backend


def check_ids(ids: torch.Tensor, vocab: int) -> None:
    """Token ids must index the vocabulary (as gather demands); -100 (an ignore index) or >= V is an error."""
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"ids must be int64 or int32, got {ids.dtype}")
    if ids.numel() and not bool(((ids >= 0) & (ids < vocab)).all()):
        bad = ids[(ids < 0) | (ids >= vocab)][:3].tolist()
        raise ValueError(f"ids out of range [0, {vocab}): e.g. {bad} (mask such tokens out instead of passing them)")


def entropy_terms(logq: torch.Tensor) -> torch.Tensor:
    """-sum_v p_v log p_v from log-probs; a -inf log-prob (p = 0) adds 0, not 0 * -inf = nan."""
    return -(logq.exp() * logq.clamp(min=torch.finfo(logq.dtype).min)).sum(-1)


def stats(logits: torch.Tensor, ids: torch.Tensor, backend: str, block_v: int | None = None, scale: float = 1.0):
    """(logp, entropy, lse) float32 [n] of x = scale * logits: logp = x_id - lse, H = lse - sum_v p_v x_v."""
    if backend == "triton":
        from . import kernels
        return kernels.row_stats(logits, ids.contiguous(), block_v, scale)
    parts = []
    for at in range(0, len(logits), TORCH_ROWS):
        x = logits[at:at + TORCH_ROWS].float() * scale
        lse = x.logsumexp(-1)
        logq = x.sub_(lse[:, None])
        logp = logq.gather(1, ids[at:at + TORCH_ROWS, None]).squeeze(1).clamp(max=0.0)
        parts.append((logp, entropy_terms(logq), lse))
    return tuple(torch.cat(p) for p in zip(*parts)) if parts else (logits.new_empty(0, dtype=torch.float32),) * 3


def grad(logits, ids, lse, coef, out, backend: str, block_v: int | None = None, scale: float = 1.0) -> torch.Tensor:
    """out[t, v] = coef_t scale (1[v = id_t] - exp(scale x_tv - lse_t)); out may be logits itself (read first)."""
    if backend == "triton":
        from . import kernels
        return kernels.row_grad(logits, ids.contiguous(), lse, coef.float().contiguous(), out, block_v, scale)
    coef = coef.float() * scale
    for at in range(0, len(logits), TORCH_ROWS):
        rows = slice(at, at + TORCH_ROWS)
        g = (logits[rows].float() * scale - lse[rows, None]).exp_().mul_(-coef[rows, None])
        g.scatter_add_(1, ids[rows, None], coef[rows, None])
        out[rows] = g
    return out
