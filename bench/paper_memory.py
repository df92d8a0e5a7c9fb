"""Computed GPU memory of the paper profile's LoRA update on Qwen3-1.7B, per micro-batch, LoRA rank and length.

    python bench/paper_memory.py            # prints the table and writes bench/results/paper_memory/

Arithmetic, not a measurement (no GPU run yet): bf16 weights; LoRA weights, gradients and AdamW moments in float32
(peft keeps adapters in float32); gradient checkpointing (each layer's input kept, one layer's activations
recomputed in the backward, LAYER_BYTES_PER_TOKEN); the chunked loss path (one CHUNK_TOKENS x V bf16 chunk of logits
overwritten by its gradient, plus the response hidden states and their gradient); CUDA context and allocator slack.
The CPU measurement of the loss path (bench/lora_step.py --cpu) checks the loss-path term's order of magnitude.
Sampling holds a KV cache of KV_BYTES_PER_TOKEN per token of every sequence sampled at once: `max_rollout_seqs` is
how many sequences of prompt + response tokens fit next to the weights and the LoRA state (the trainer samples a
step's prompts_per_step x group_size sequences at once, 2048 in the paper profile: 300 GB at 1280 tokens).
"""
from __future__ import annotations

import os
import sys

from rlbook.losspath import CHUNK_TOKENS
from rlbook.models import QWEN3_1_7B

GB = 1e9
H, L, V = QWEN3_1_7B["hidden_size"], QWEN3_1_7B["num_hidden_layers"], QWEN3_1_7B["vocab_size"]
I, KV = QWEN3_1_7B["intermediate_size"], QWEN3_1_7B["num_key_value_heads"] * QWEN3_1_7B["head_dim"]
LINEAR_SHAPES = [(H, H), (H, KV), (H, KV), (H, H), (H, I), (H, I), (I, H)]  # q k v o gate up down: (in, out)
# saved per token by one layer for its backward (bf16): norms, q/k/v (+ rope), attention out, residual, MLP gate/up/act
LAYER_BYTES_PER_TOKEN = 2 * (6 * H + 2 * KV + 2 * H + 4 * I)
KV_BYTES_PER_TOKEN = 2 * L * 2 * KV  # bf16 keys and values of every layer
CUDA_OVERHEAD = 1.5 * GB  # context, cuBLAS workspaces, allocator fragmentation
PROMPT_LEN = 256


def update_memory(micro_batch: int, rank: int, response_len: int) -> dict:
    tokens = micro_batch * (PROMPT_LEN + response_len)
    parts = {
        "weights_bf16": 2 * (L * sum(i * o for i, o in LINEAR_SHAPES) + V * H),
        "lora_fp32_weights_grads_adam": 16 * rank * L * sum(i + o for i, o in LINEAR_SHAPES),
        "checkpointed_layer_inputs": 2 * L * tokens * H,
        "one_layer_recomputed": tokens * LAYER_BYTES_PER_TOKEN,
        "loss_path_chunked": 2 * CHUNK_TOKENS * V + 2 * 2 * micro_batch * response_len * H,
        "cuda_overhead": CUDA_OVERHEAD,
    }
    return {k: v / GB for k, v in parts.items()} | {"total_gb": sum(parts.values()) / GB}


def max_rollout_seqs(gpu_gb: float, rank: int, response_len: int) -> int:
    """Sequences whose KV cache fits in 90% of the GPU next to the weights, the LoRA state and the overhead."""
    fixed = update_memory(1, rank, response_len)
    free = 0.9 * gpu_gb - fixed["weights_bf16"] - fixed["lora_fp32_weights_grads_adam"] - fixed["cuda_overhead"]
    return int(free * GB / (KV_BYTES_PER_TOKEN * (PROMPT_LEN + response_len)))


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
                                             "layer_bytes_per_token": LAYER_BYTES_PER_TOKEN,
                                             "kv_bytes_per_token": KV_BYTES_PER_TOKEN, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
