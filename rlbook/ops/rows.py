"""Per-row vocabulary work, two backends: Triton kernels or closed-form PyTorch (one chunk at a time).

`stats` gives (logp, entropy, lse) per token; `grad` writes d loss / d logits = coef (onehot - softmax).
Both take logits [n, V] of any float dtype with a unit last stride (out too) and keep float32 per-token numbers.
"""
from __future__ import annotations

import functools
import os

import torch

BACKENDS = ("auto", "triton", "torch")


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


def stats(logits: torch.Tensor, ids: torch.Tensor, backend: str, block_v: int | None = None):
    """(logp, entropy, lse) float32 [n]: logp = x_id - lse, H = lse - sum_v p_v x_v."""
    if backend == "triton":
        from . import kernels
        return kernels.row_stats(logits, ids.contiguous(), block_v)
    x = logits.float()
    lse = x.logsumexp(-1)
    logq = x - lse[:, None]
    logp = logq.gather(1, ids[:, None]).squeeze(1).clamp(max=0.0)
    entropy = -(logq.exp() * logq).sum(-1)
    return logp, entropy, lse


def grad(logits, ids, lse, coef, out, backend: str, block_v: int | None = None) -> torch.Tensor:
    """out[t, v] = coef_t (1[v = id_t] - exp(x_tv - lse_t)); out may be logits itself (read before written)."""
    if backend == "triton":
        from . import kernels
        return kernels.row_grad(logits, ids.contiguous(), lse, coef.float().contiguous(), out, block_v)
    g = (logits.float() - lse[:, None]).exp_().mul_(-coef[:, None])
    g.scatter_add_(1, ids[:, None], coef[:, None].float())
    return out.copy_(g)
