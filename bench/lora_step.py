"""One LoRA GRPO update on Qwen3-1.7B's architecture with random weights: peak GPU memory and seconds per update.

    python bench/lora_step.py                      # CUDA: qwen3-1.7b-random, bf16, batch 8 x (128 prompt + 512 response)
    python bench/lora_step.py --cpu-smoke          # any machine: nano-small, tiny batch (checks the script works)

Builds the model from its config (no download), makes a synthetic rollout batch, and times trainer.train_update
(the same code path as training: forward, fused ratio op on CUDA, backward, AdamW step). Writes JSON to
bench/results/lora_step-<device>-<commit>.json with the device, commit and command.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from rlbook.config import RunConfig
from rlbook.models import add_lora, build_model, count_parameters
from rlbook.rollout import Rollout
from rlbook.runs import environment, write_json
from rlbook.trainer import train_update, use_fused


def synthetic_batch(vocab: int, batch: int, prompt_len: int, response_len: int, seed: int = 0) -> Rollout:
    g = torch.Generator().manual_seed(seed)
    return Rollout(prompt_ids=torch.randint(2, vocab, (batch, prompt_len), generator=g),
                   prompt_mask=torch.ones(batch, prompt_len, dtype=torch.long),
                   response_ids=torch.randint(2, vocab, (batch, response_len), generator=g),
                   response_mask=torch.ones(batch, response_len),
                   behavior_logp=-torch.rand(batch, response_len, generator=g) * 3,
                   rewards=torch.rand(batch, generator=g), correct=torch.zeros(batch, dtype=torch.bool),
                   completions=[""] * batch, problems=[{}] * batch, policy_version=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--response-len", type=int, default=512)
    parser.add_argument("--lora-rank", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu_smoke
    if not cuda and not args.cpu_smoke:
        print("no CUDA device: this benchmark measures GPU memory; run with --cpu-smoke to check the script")
        return 0
    preset = "qwen3-1.7b-random" if cuda else "nano-small"
    if args.cpu_smoke:
        args.batch, args.prompt_len, args.response_len = 4, 8, 16
    model, _ = build_model(preset)
    model = add_lora(model.to(torch.bfloat16) if cuda else model, args.lora_rank, 2.0 * args.lora_rank)
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    device = torch.device("cuda" if cuda else "cpu")
    model.to(device)
    trainable, total = count_parameters(model)
    config = RunConfig(preset=preset, init="scratch", group_size=args.batch, prompts_per_step=1, lr=1e-5,
                       lora_rank=args.lora_rank, lora_alpha=2.0 * args.lora_rank)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    batch = synthetic_batch(model.config.vocab_size, args.batch, args.prompt_len, args.response_len)
    advantages = batch.rewards - batch.rewards.mean()
    fused = use_fused(config, device)
    times = []
    for update in range(args.repeats + 1):  # the first update warms up (kernel compilation, allocator)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        tic = time.time()
        train_update(model, optimizer, batch, advantages, None, config, fused, update + 1)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.time() - tic)
    result = {"preset": preset, "parameters": total, "trainable": trainable, "batch": args.batch,
              "prompt_len": args.prompt_len, "response_len": args.response_len, "lora_rank": args.lora_rank,
              "fused_ratio": fused, "gradient_checkpointing": True, "seconds_per_update": min(times[1:]),
              "peak_gpu_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
    for key, value in result.items():
        print(f"{key:>24}: {value}")
    env = environment()
    folder = Path(__file__).parent / "results" if cuda else Path("/tmp")
    out = folder / f"lora_step-{env['device'].split()[0]}-{env['git_commit']}.json"
    write_json(out, {"command": " ".join(sys.argv), "environment": env, "result": result})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
