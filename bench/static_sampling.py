"""Rollout speed of the three sampling paths: the peft model, the lean merged decoder (the fast engine)
and the lean decoder with a static KV cache (the static engine; on a GPU its decoding step is replayed from a
CUDA graph).

    python bench/static_sampling.py [--preset nano-base] [--prompts 16] [--group 8] [--max-new 16] [--repeats 5]

One batch of arithmetic prompts x group, a randomly initialised model of the preset with a non-zero LoRA adapter
(speed does not depend on what the weights learnt; an untrained model seldom stops early, so every row decodes
max-new tokens: the case the static cache is built for). Prints milliseconds per rollout (median of --repeats, after
one warm-up) and generated tokens per second for each path, and whether the static path drew the same tokens as
the lean decoder's `rollout.sample`; writes bench/results/static_sampling/.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/record.py

from record import save_result  # noqa: E402

from rlbook.lean_decoder import LeanDecoder  # noqa: E402
from rlbook.models import add_lora, build_model  # noqa: E402
from rlbook.rollout import sample  # noqa: E402
from rlbook.static_sampling import static_sample  # noqa: E402
from rlbook.tasks import make_task  # noqa: E402


def timed(fn, device: torch.device, repeats: int) -> tuple[float, tuple]:
    """Median wall milliseconds of fn() over `repeats` calls after one warm-up, and the last call's result."""
    out, times = fn(), []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        tic = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(1000 * (time.perf_counter() - tic))
    return statistics.median(times), out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default=None, help="model preset (default: nano-base on CUDA, else nano-small)")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-new", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(1)
    preset = args.preset or ("nano-base" if device.type == "cuda" else "nano-small")
    model, tokenizer = build_model(preset, seed=0)
    model = add_lora(model)
    for name, p in model.named_parameters():  # LoRA's B starts at 0: make the adapter non-trivial
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    model = model.to(device).eval()
    problems = make_task("arithmetic").generate(args.prompts, seed=0)
    prompts = [p["prompt"] for p in problems for _ in range(args.group)]
    decoder = LeanDecoder(model, merged=True)

    def run(path):
        generator = torch.Generator(device=device).manual_seed(0)
        with torch.no_grad():
            if path == "static":
                return static_sample(decoder, tokenizer, prompts, args.max_new, 1.0, generator)
            return sample(model if path == "model" else decoder, tokenizer, prompts, args.max_new, 1.0, generator)

    results = {}
    for path in ("model", "merged", "static"):
        ms, out = timed(lambda: run(path), device, args.repeats)
        tokens = int(out[3].sum())
        results[path] = {"ms_per_rollout": ms, "generated_tokens": tokens, "tokens_per_s": tokens / ms * 1000,
                         "response_ids": out[2]}
    same = torch.equal(results["static"].pop("response_ids"), results["merged"]["response_ids"])
    for path in ("model", "merged"):
        results[path].pop("response_ids")
    print(f"{preset} on {device.type} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'one thread'}),"
          f" {len(prompts)} rows x {args.max_new} new tokens, median of {args.repeats}")
    print(f"{'path':<8} {'ms/rollout':>11} {'tokens/s':>10} {'vs model':>9}")
    for path, r in results.items():
        print(f"{path:<8} {r['ms_per_rollout']:>11.1f} {r['tokens_per_s']:>10.0f} "
              f"{results['model']['ms_per_rollout'] / r['ms_per_rollout']:>8.2f}x")
    print(f"static path drew the merged path's tokens: {same}")
    save_result("static_sampling", device.type, {"preset": preset, "rows": len(prompts), "max_new_tokens": args.max_new,
                                                 "repeats": args.repeats, "cuda_graph": device.type == "cuda",
                                                 "same_tokens": same, "paths": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
