"""What the Triton kernels promise against the PyTorch reference, and a random batch to check it on.

Both sides accumulate in float32, so they differ only by summation order:
  STATS_TOL: log-prob, entropy, loss (fp32 and bf16 inputs: both sides read the same bf16 values);
  GRAD_TOL: the logits' gradient; bf16 output within two bf16 ulps;
  TEMPERATURE_GRAD_TOL: the same with a sampling temperature (x / T scaled as the kernels read);
  HIDDEN_TOL: a gradient carried back to the hidden states through a (recomputed) matmul.
tests/test_ops.py holds the kernels to these through Triton's interpreter; bench/ratio_op_agreement.py on a GPU.
"""
from __future__ import annotations

import torch

from .reference import reference_token_logprobs

STATS_TOL = dict(atol=2e-5, rtol=1e-5)
GRAD_TOL = {torch.float32: dict(atol=1e-7, rtol=1e-4), torch.bfloat16: dict(atol=1e-7, rtol=1.6e-2)}
TEMPERATURE_GRAD_TOL = {torch.float32: GRAD_TOL[torch.float32], torch.bfloat16: dict(atol=1e-6, rtol=1.6e-2),
                        torch.float16: dict(atol=1e-6, rtol=1.6e-2)}
HIDDEN_TOL = dict(atol=1e-6, rtol=1e-4)


def random_batch(n: int, v: int, dtype=torch.float32, device="cpu", seed: int = 0):
    """Logits [n, v], ids (the first 0, the last v-1), behavior and proximal log-probs near the current ones,
    advantages, and a mask with about a quarter of the tokens out (the first always in)."""
    gen = torch.Generator(device).manual_seed(seed)
    logits = (3 * torch.randn(n, v, device=device, generator=gen)).to(dtype)
    ids = torch.randint(0, v, (n,), device=device, generator=gen)
    ids[0], ids[-1] = 0, v - 1
    logp, _ = reference_token_logprobs(logits, ids)
    behavior = logp + 0.4 * torch.randn(n, device=device, generator=gen)
    proximal = logp + 0.2 * torch.randn(n, device=device, generator=gen)
    advantages = torch.randn(n, device=device, generator=gen)
    mask = (torch.rand(n, device=device, generator=gen) > 0.25).float()
    mask[0] = 1.0
    return logits, ids, behavior, advantages, mask, proximal
