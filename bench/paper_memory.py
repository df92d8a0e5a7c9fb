"""Computed GPU memory of the paper profile's LoRA update on Qwen3-1.7B, per micro-batch, LoRA rank and length.

    python bench/paper_memory.py            # prints the table and writes bench/results/paper_memory/

Arithmetic, not a measurement: rlbook.memory's model (the one that refuses a run that cannot fit), for one update of
the paper profile: bf16 weights; LoRA weights, gradients and AdamW moments in float32; gradient checkpointing (each
layer's input kept, one layer's activations recomputed in the backward); the chunked loss path (one CHUNK_TOKENS x V
chunk of logits overwritten by its gradient, plus the response hidden states and their gradient); CUDA context and
allocator slack. The CPU measurement of the loss path (bench/lora_step.py --cpu) checks the loss-path term's order of
magnitude. Sampling holds a KV cache per token of every sequence sampled at once: `max_rollout_seqs` is how many
sequences of prompt + response tokens fit next to the weights and the LoRA state.
"""
from __future__ import annotations

import os
import sys

from rlbook.losspath import CHUNK_TOKENS
from rlbook.memory import CUDA_OVERHEAD, GB, Shape, trainable_bytes, update_parts
from rlbook.models import QWEN3_1_7B

SHAPE = Shape.of(QWEN3_1_7B)
PROMPT_LEN = 256


def update_memory(micro_batch: int, rank: int, response_len: int) -> dict:
    parts = {"weights_bf16": SHAPE.parameters * SHAPE.dtype_bytes,
             "lora_fp32_weights_grads_adam": trainable_bytes(SHAPE, "lora", rank),
             **update_parts(SHAPE, micro_batch, PROMPT_LEN, response_len, "chunked"), "cuda_overhead": CUDA_OVERHEAD}
    return {k: v / GB for k, v in parts.items()} | {"total_gb": sum(parts.values()) / GB}


def max_rollout_seqs(gpu_gb: float, rank: int, response_len: int) -> int:
    """Sequences whose KV cache fits in 90% of the GPU next to the weights, the LoRA state and the overhead."""
    fixed = update_memory(1, rank, response_len)
    free = 0.9 * gpu_gb - fixed["weights_bf16"] - fixed["lora_fp32_weights_grads_adam"] - fixed["cuda_overhead"]
    return int(free * GB / (SHAPE.kv_bytes_per_token * (PROMPT_LEN + response_len)))


def main() -> int:
    rows = []
    print(f"{'micro-batch':>11} {'rank':>5} {'response':>8} {'update GB':>9}   fits in (90%)   "
          "rollout seqs 24/40/80 GB")
    for micro_batch in (8, 16, 32, 64):
        for rank in (16, 64):
            for response_len in (1024, 2048, 4096):
                row = {"micro_batch": micro_batch, "rank": rank, "response_len": response_len,
                       **update_memory(micro_batch, rank, response_len)}
                row["fits"] = [gpu for gpu in (24, 40, 80) if row["total_gb"] <= 0.9 * gpu]
                row["max_rollout_seqs"] = {gpu: max_rollout_seqs(gpu, rank, response_len) for gpu in (24, 40, 80)}
                rows.append(row)
                print(f"{micro_batch:>11} {rank:>5} {response_len:>8} {row['total_gb']:>9.1f}   "
                      f"{str(row['fits']):<14}  {list(row['max_rollout_seqs'].values())}")
    sys.path.insert(0, os.path.dirname(__file__))
    from record import save_result

    save_result("paper_memory", "computed", {"prompt_len": PROMPT_LEN, "chunk_tokens": CHUNK_TOKENS,
                                             "layer_bytes_per_token": SHAPE.activation_bytes_per_token,
                                             "kv_bytes_per_token": SHAPE.kv_bytes_per_token, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
