"""One LoRA update on Qwen3-1.7B's shape (random bf16 weights): peak memory, and seconds per update, per loss path.

    python bench/lora_step.py                           # CUDA: 28 layers, 8 x (128 prompt + 1024 response)
    nice python bench/lora_step.py --cpu --layers 2     # CPU: the true hidden size and vocabulary, 2 layers
    python bench/lora_step.py --cpu-smoke               # any machine: nano-tiny, a tiny batch (the script runs)

Each (path, batch) runs in its own process, so every peak is its own. The update is trainer.train_update as the
paper profile runs it: one micro-batch of --batch sequences (pass 1 without grad, pass 2 forward and backward
with gradient checkpointing, the AdamW step). Paths: reference (full-sequence logits, float32 log-softmax),
fused (lm_head on response positions, Triton op; on a CPU only under TRITON_INTERPRET=1), chunked (lm_head and op
CHUNK_TOKENS tokens at a time) and "none": the same update with a loss on the hidden states and no lm_head, i.e.
the model's own activations; path - none = the memory the loss path adds. GPU peak: max_memory_allocated beyond
the model; CPU peak: the highest resident set size sampled every 2 ms during the update, minus the one before it.
On a CPU the reference path runs at --reference-batch sequences (its float32 copies of the full-sequence logits
would not fit at 8) and is scaled linearly in tokens to --batch, marked "scaled". Results: bench/results/.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import threading
import time

import torch

import rlbook.losspath
from rlbook.config import RunConfig
from rlbook.models import add_lora, build_model, count_parameters
from rlbook.rollout import Rollout
from rlbook.trainer import resolve, train_update

GiB = 2**30
FUSED_RATIO = {"reference": "off", "fused": "on", "chunked": "chunked", "none": "chunked"}


def synthetic_batch(vocab: int, batch: int, prompt_len: int, response_len: int, seed: int = 0) -> Rollout:
    g = torch.Generator().manual_seed(seed)
    return Rollout(prompt_ids=torch.randint(2, vocab, (batch, prompt_len), generator=g),
                   prompt_mask=torch.ones(batch, prompt_len, dtype=torch.long),
                   response_ids=torch.randint(2, vocab, (batch, response_len), generator=g),
                   response_mask=torch.ones(batch, response_len),
                   behavior_logp=-torch.rand(batch, response_len, generator=g) * 3 - 9,
                   rewards=torch.arange(batch, dtype=torch.float32), correct=torch.zeros(batch, dtype=torch.bool),
                   completions=[""] * batch, problems=[{}] * batch, policy_version=0)


def hidden_only(model, batch, temperature, path):
    """The "none" path: a differentiable stand-in for logp from the hidden states, without the lm_head."""
    hidden, _, resp = rlbook.losspath.response_hidden(model, batch)
    logp = hidden.float().mean(-1) - 10.0
    zeros = torch.zeros(resp.shape, device=logp.device)
    return zeros.masked_scatter(resp, logp), zeros


class RssPeak:
    """Highest resident set size (bytes) seen by a thread sampling /proc/self/statm every 2 ms."""

    def __init__(self):
        self.page, self.peak, self.running = os.sysconf("SC_PAGE_SIZE"), 0, True

    def now(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def __enter__(self):
        self.base = self.now()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()
        return self

    def _sample(self):
        while self.running:
            self.peak = max(self.peak, self.now())
            time.sleep(0.002)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()
        self.peak = max(self.peak, self.now())


def worker(args) -> dict:
    """One (path, batch) measurement in this process; returns its numbers."""
    cuda = torch.cuda.is_available() and not (args.cpu or args.cpu_smoke)
    torch.set_num_threads(os.cpu_count() or 1)
    preset, layers = ("nano-tiny", {}) if args.cpu_smoke else ("qwen3-1.7b-random", {"num_hidden_layers": args.layers})
    model, _ = build_model(preset, **layers)
    model = add_lora(model, args.lora_rank, 2.0 * args.lora_rank)
    model.activation_checkpointing_enable()
    model.enable_input_require_grads()
    device = torch.device("cuda" if cuda else "cpu")
    model.to(device)
    trainable, total = count_parameters(model)
    config = RunConfig(preset=preset, init="scratch", group_size=2, prompts_per_step=1, lr=1e-6,
                       lora_rank=args.lora_rank, lora_alpha=2.0 * args.lora_rank, micro_batch_size=args.batch,
                       fused_ratio=FUSED_RATIO[args.path], engine="reference")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    batch = synthetic_batch(model.config.vocab_size, args.batch, args.prompt_len, args.response_len)
    advantages = batch.rewards - batch.rewards.mean()
    if args.path == "none":
        rlbook.losspath.token_stats = hidden_only
    objective, path = resolve(config, device)
    path = dataclasses.replace(path, name="chunked" if args.path == "none" else args.path)
    times, peaks = [], []
    for update in range(args.repeats):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        with RssPeak() as rss:
            tic = time.time()
            train_update(model, optimizer, batch, advantages, None, objective, path, config.max_grad_norm, update + 1)
            if cuda:
                torch.cuda.synchronize()
            times.append(time.time() - tic)
        peaks.append((torch.cuda.max_memory_allocated() - base) if cuda else rss.peak - rss.base)
    return {"path": args.path, "batch": args.batch, "preset": preset, "layers": model.config.num_hidden_layers,
            "hidden_size": model.config.hidden_size, "vocab_size": model.config.vocab_size,
            "parameters": total, "trainable": trainable, "dtype": str(model.dtype),
            "chunk_tokens": rlbook.losspath.CHUNK_TOKENS, "seconds_per_update": min(times),
            "peak_gib": max(peaks[1:] or peaks) / GiB, "memory": "GPU allocated" if cuda else "CPU RSS",
            "max_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GiB}


def run_worker(args, path: str, batch: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", path, "--batch", str(batch), "--layers", str(args.layers),
           "--prompt-len", str(args.prompt_len), "--response-len", str(args.response_len),
           "--lora-rank", str(args.lora_rank), "--repeats", str(args.repeats)]
    cmd += ["--cpu"] if args.cpu else ["--cpu-smoke"] if args.cpu_smoke else []
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        return {"path": path, "batch": batch, "error": (out.stderr or out.stdout)[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="measure on the CPU (peak RSS) at the true width")
    parser.add_argument("--cpu-smoke", action="store_true")
    parser.add_argument("--paths", nargs="+", default=None, choices=list(FUSED_RATIO))
    parser.add_argument("--layers", type=int, default=28, help="decoder layers (28 = Qwen3-1.7B)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--reference-batch", type=int, default=2, help="CPU: the reference path's batch")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--response-len", type=int, default=1024)
    parser.add_argument("--lora-rank", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--worker", choices=list(FUSED_RATIO), dest="path")
    args = parser.parse_args()
    if args.path:
        print(json.dumps(worker(args)))
        return 0
    cuda = torch.cuda.is_available() and not (args.cpu or args.cpu_smoke)
    if not (cuda or args.cpu or args.cpu_smoke):
        print("no CUDA device: run with --cpu (true width, fewer layers) or --cpu-smoke")
        return 0
    if args.cpu_smoke:
        args.batch, args.reference_batch, args.prompt_len, args.response_len, args.repeats = 4, 2, 8, 16, 1
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    paths = args.paths or (["none", "reference", "fused", "chunked"] if cuda or interpreted
                           else ["none", "reference", "chunked"])
    jobs = [(p, args.batch) for p in paths if cuda or p != "reference"]
    if not cuda and "reference" in paths:
        jobs += [("none", args.reference_batch), ("reference", args.reference_batch)]
    rows = [run_worker(args, path, batch) for path, batch in jobs]
    base = {row["batch"]: row["peak_gib"] for row in rows if row["path"] == "none" and "peak_gib" in row}
    for row in rows:
        if "peak_gib" in row and row["batch"] in base:
            row["added_by_loss_path_gib"] = row["peak_gib"] - base[row["batch"]]
            if row["batch"] != args.batch:
                row["added_scaled_to_batch_gib"] = row["added_by_loss_path_gib"] * args.batch / row["batch"]
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()})
    shape = (f"{args.batch} x ({args.prompt_len} prompt + {args.response_len} response) tokens, "
             f"LoRA rank {args.lora_rank}")
    layers = sorted({row["layers"] for row in rows if "layers" in row})
    print(f"{shape}; decoder layers {layers} (Qwen3-1.7B has 28; the loss path's memory does not depend on them)")
    if args.cpu_smoke:
        return 0
    sys.path.insert(0, os.path.dirname(__file__))
    from record import save_result

    save_result("lora_step", "cuda" if cuda else f"cpu-{args.layers}layers",
                {"shape": shape, "layers": args.layers, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
