"""What sharing the prompt across a group saves in the training pass (the loss path of the fast engine,
rlbook.engines: not bit-equal).

    python bench/prefix_sharing.py [--batches 8] [--store runs]

A GRPO mini-batch repeats every prompt group_size times, and the training forward runs each copy. Computing the
prompt once per group (its KV cache copied to the group's rows, the responses run on top of it) gives the same
log-probs and gradients up to floating-point order. On rollouts of the warm-started nano-small model with a
non-zero LoRA adapter, this prints CPU seconds of forward + backward per mini-batch for the reference path
(rlbook.losspath.token_logprobs) and the shared-prefix pass, the largest log-prob difference and the largest
relative gradient difference, and writes bench/results/prefix_sharing/.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/record.py, bench/vs_trl.py

from record import save_result  # noqa: E402
from vs_trl import checkpoint_path  # noqa: E402

from rlbook.losspath import shared_prompt_logprobs, token_logprobs  # noqa: E402
from rlbook.models import add_lora, load_pretrained  # noqa: E402
from rlbook.rollout import rollout  # noqa: E402
from rlbook.tasks import make_task  # noqa: E402

GROUP, PROMPTS, MAX_NEW = 8, 16, 7


def shared_prefix_logprobs(model, batch) -> torch.Tensor:
    return shared_prompt_logprobs(model, batch, 1.0)[0]


def reference_logprobs(model, batch) -> torch.Tensor:
    return token_logprobs(model, batch, 1.0)[0]


def timed_step(model, logprobs, batch, advantages):
    """(CPU seconds, log-probs, gradients) of one forward + backward of the token-mean policy-gradient loss."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    tic = time.process_time()
    logp = logprobs(model, batch)
    (-(logp * advantages * batch.response_mask).sum() / batch.response_mask.sum()).backward()
    return time.process_time() - tic, logp.detach(), [p.grad.clone() for p in params]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--store", default=None, help="RunStore root holding (or to hold) the warm start")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tokenizer = load_pretrained(checkpoint_path(args.store))
    model = add_lora(model)
    for name, p in model.named_parameters():
        if "lora_B" in name:  # a trained adapter: the LoRA path contributes to outputs and gradients
            p.data.normal_(0, 0.02)
    task, rows, load = make_task("arithmetic"), [], os.getloadavg()[0]
    for seed in range(args.batches):
        batch = rollout(model, tokenizer, task, task.generate(PROMPTS, seed=seed), GROUP, MAX_NEW, 1.0,
                        torch.Generator().manual_seed(seed), policy_version=0)
        advantages = torch.randn(len(batch), generator=torch.Generator().manual_seed(seed))[:, None]
        ref_s, ref_logp, ref_grads = timed_step(model, reference_logprobs, batch, advantages)
        shared_s, shared_logp, shared_grads = timed_step(model, shared_prefix_logprobs, batch, advantages)
        live = batch.response_mask.bool()
        rows.append({"reference_cpu_s": ref_s, "shared_cpu_s": shared_s, "shape": list(batch.response_ids.shape),
                     "max_abs_logp_diff": (ref_logp - shared_logp)[live].abs().max().item(),
                     "max_rel_grad_diff": max(((a - b).norm() / a.norm()).item()
                                              for a, b in zip(ref_grads, shared_grads))})
        print(rows[-1], flush=True)
    summary = {key: statistics.median(r[key] for r in rows) for key in ("reference_cpu_s", "shared_cpu_s")}
    summary.update(speedup=summary["reference_cpu_s"] / summary["shared_cpu_s"],
                   max_abs_logp_diff=max(r["max_abs_logp_diff"] for r in rows),
                   max_rel_grad_diff=max(r["max_rel_grad_diff"] for r in rows), load_before=load,
                   load_after=os.getloadavg()[0])
    print(f"forward + backward, CPU s per mini-batch (median): reference {summary['reference_cpu_s']:.3f}, shared "
          f"prefix {summary['shared_cpu_s']:.3f} ({summary['speedup']:.2f}x); max |d logp| "
          f"{summary['max_abs_logp_diff']:.1e}, max relative gradient difference {summary['max_rel_grad_diff']:.1e}")
    save_result("prefix_sharing", "cpu", {"rows": rows, "summary": summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
