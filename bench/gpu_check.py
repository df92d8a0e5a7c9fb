"""Every measurement only a GPU can make, in one command of under 10 minutes (`make gpu-check`).

    python bench/gpu_check.py [--only NAME ...]      # exit 2 at once when there is no CUDA GPU

  kernel_agreement the compiled, autotuned Triton kernels against the PyTorch reference at the tests' tolerances:
                   every fused objective, fp32 and bf16, V = 151,936 and a small ragged V, temperature, the
                   in-place gradient (bench/ratio_op_agreement.py)
  fused_ratio_op   the fused Triton ratio op at N = 8192 tokens, V = 151,936, bf16 logits: its time and its share
                   of the HBM floor (the bytes it must move at the device's peak bandwidth), beside eager PyTorch
                   (bench/ratio_op.py)
  lora_step_1.7b   one LoRA update at Qwen3-1.7B's shape (28 layers, 8 x (128 + 1024) tokens, rank 64): peak GPU
                   memory with the chunked loss path, and without a loss path (bench/lora_step.py)
  static_rollout   the static engine's rollout (its decoding step replayed from a CUDA graph) against the model
                   and the lean merged sampler: nano-base, 16 prompts x 8, 16 new tokens (bench/static_sampling.py)
  standard_update  updates of the standard profile (nano-base, 64 prompts x 8 per update) on each engine, from a
                   two-step warm start: seconds per update and peak memory (what an update costs, not what it learns)

Each runs in its own process within its time limit (LIMIT_S, 9.5 minutes in all); the four benchmarks also write
their own results to their folders. This script writes bench/results/gpu_check/ with the headline numbers of each
and the files they came from; a measurement that fails or runs out of time is recorded as such, the others still run,
and the exit status is 1.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from record import RESULTS, save_result  # noqa: E402

N_TOKENS = 8192
LIMIT_S = {"kernel_agreement": 45, "fused_ratio_op": 60, "lora_step_1.7b": 300, "static_rollout": 45,
           "standard_update": 100}  # on an H100 (2026-11-26): 23, 10, 192 and past 220, 19, 25 s
COMMANDS = {  # name: (arguments of `python`, the folder its benchmark writes to; None: it prints its result)
    "kernel_agreement": ([str(BENCH / "ratio_op_agreement.py")], "ratio_op_agreement"),
    "fused_ratio_op": ([str(BENCH / "ratio_op.py"), "--tokens", str(N_TOKENS)], "ratio_op"),
    "lora_step_1.7b": ([str(BENCH / "lora_step.py"), "--paths", "none", "chunked"], "lora_step"),
    "static_rollout": ([str(BENCH / "static_sampling.py")], "static_sampling"),
    "standard_update": ([str(Path(__file__).resolve()), "--standard-update"], None),
}
STANDARD_UPDATES = 4  # per engine; the first is not timed (CUDA and Triton warm-up)


def standard_update(updates: int = STANDARD_UPDATES, **changes) -> dict:
    """Seconds per update (median of all but the first) and peak GPU memory of the standard profile on each engine
    (`changes` shrink it for the CPU test)."""
    from rlbook.engines import ENGINES
    from rlbook.experiments import BASE, grpo_from_scratch
    from rlbook.obtain import run_or_load
    from rlbook.runs import RunStore

    warm = {**BASE["standard"]["warm_start"], "max_steps": 2, "target_accuracy": None, "eval_every": 2,
            "validation_size": 8}
    out = {}
    with tempfile.TemporaryDirectory() as root:
        for engine in ENGINES:
            config = grpo_from_scratch("standard", **{"engine": engine, "total_updates": updates, "eval_size": 64,
                                                      "eval_samples": 1, "warm_start": warm,
                                                      "name": f"gpu-check-{engine}", **changes})
            cuda = torch.cuda.is_available()
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            run = run_or_load(config, RunStore(root), progress=False, references=False)
            rows = [r for r in run.metrics if r["update"] > 1]
            out[engine] = {"s_per_update": statistics.median(r["update_s"] + r["sample_s"] for r in rows),
                           "sample_s": statistics.median(r["sample_s"] for r in rows),
                           "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
                           "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
                           "loss_path": run.meta["loss_path"], "engine": run.meta["engine"]}
    return out


def headline(name: str, result: dict) -> dict:
    """The numbers of one measurement that the summary shows."""
    if name == "kernel_agreement":
        return {"cases within the tests' tolerances": f"{result['agree']} of {result['total']}",
                "disagreeing": [row["case"] for row in result["cases"] if not row["within"]]}
    if name == "fused_ratio_op":
        rows = {row["label"]: row for row in result["results"][0]["rows"]}
        keys = ("eager logprobs+entropy", "fused logprobs+entropy", "eager loss fwd+bwd",
                "fused loss fwd+bwd (in place)")
        return {**{f"{k} ms": rows[k].get("ms") for k in keys},
                **{f"{k} share of HBM floor": rows[k].get("frac_of_peak") for k in keys if "fused" in k}}
    if name == "lora_step_1.7b":
        return {f"{row['path']} {k}": row.get(k) for row in result["rows"]
                for k in ("peak_gib", "seconds_per_update", "added_by_loss_path_gib") if k in row}
    if name == "static_rollout":
        return {**{f"{path} ms": r["ms_per_rollout"] for path, r in result["paths"].items()},
                "same tokens": result["same_tokens"]}
    return {f"{engine} {k}": v for engine, r in result.items() for k, v in r.items() if k in ("s_per_update", "peak_gib")}


def measure(name: str) -> dict:
    """Run one measurement in its own process; its result, or why there is none."""
    arguments, folder = COMMANDS[name]
    before = set((RESULTS / folder).glob("*.json")) if folder else set()
    tic = time.time()
    try:
        out = subprocess.run([sys.executable, *arguments], capture_output=True, text=True, timeout=LIMIT_S[name])
    except subprocess.TimeoutExpired:
        return {"error": f"ran past its limit of {LIMIT_S[name]} s"}
    seconds = time.time() - tic
    if out.returncode:
        return {"error": f"exit status {out.returncode}: {(out.stderr or out.stdout)[-1500:]}", "seconds": seconds}
    if folder is None:
        result, source = json.loads(out.stdout.strip().splitlines()[-1]), None
    else:
        new = sorted(set((RESULTS / folder).glob("*.json")) - before)
        if not new:
            return {"error": f"wrote no result to bench/results/{folder}/: {out.stdout[-1500:]}", "seconds": seconds}
        result, source = json.loads(new[-1].read_text()), str(new[-1].relative_to(BENCH.parent))
    return {"seconds": seconds, "source": source, **headline(name, result)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(COMMANDS), help="run only these measurements")
    parser.add_argument("--standard-update", action="store_true", help=argparse.SUPPRESS)  # the worker
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu-check measures what only a CUDA GPU can (the compiled kernels, memory at the 1.7B shape, CUDA-graph "
              "rollouts, a standard-profile update), and torch sees no CUDA device here: nothing was measured",
              file=sys.stderr)
        return 2
    if args.standard_update:
        print(json.dumps(standard_update()))
        return 0
    measurements = {}
    for name in args.only or COMMANDS:
        print(f"{name} (at most {LIMIT_S[name]} s) ...", flush=True)
        measurements[name] = measure(name)
        print(json.dumps(measurements[name], indent=1), flush=True)
    save_result("gpu_check", torch.cuda.get_device_name().replace(" ", "_"),
                {"n_tokens": N_TOKENS, "measurements": measurements})
    return 1 if any("error" in m for m in measurements.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
