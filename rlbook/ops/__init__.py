"""The fused ratio op: per-token log-prob, entropy and policy loss without float32 [N, V] copies.

`token_logprobs` and `fused_policy_loss` work on logits [N, V]; `chunked_token_logprobs` and
`chunked_policy_loss` on hidden states and a frozen lm_head weight, one chunk of logits at a time.
backend="auto" runs the Triton kernels on CUDA tensors (when triton imports) and the PyTorch reference
elsewhere; "triton" forces the kernels (a CPU tensor then needs TRITON_INTERPRET=1); "torch" the reference.
"""
from .chunked import chunked_policy_loss, chunked_token_logprobs
from .fused import fused_policy_loss, token_logprobs
from .reference import reference_chunked_policy_loss, reference_policy_loss, reference_token_logprobs
from .surrogate import FUSED_OBJECTIVES

__all__ = ["token_logprobs", "fused_policy_loss", "chunked_token_logprobs", "chunked_policy_loss",
           "reference_token_logprobs", "reference_policy_loss", "reference_chunked_policy_loss", "FUSED_OBJECTIVES"]
