"""The paper profile's code path at Qwen3-1.7B's real shape, on a CPU: run before each release (slow; CI skips it).

    TRITON_INTERPRET=1 nice -n 15 .venv/bin/python -m pytest tests/test_paper_dry_run.py -m slow -q -p no:cacheprovider

Two updates of the paper profile's config (chunked lm_head path, micro-batches, LoRA rank 64, gradient
checkpointing) on qwen3-1.7b-random (random bf16 weights built from the config; no download), with a tiny prompt
batch and short responses: rollout (one prompt's group per sampling call), micro-batched update (two micro-batches per
update), checkpoint, RunStore rows and evaluation. Its wall time and peak RSS are written to
bench/results/paper_dry_run/paper_dry_run-cpu-<commit>-<time>.json.
"""
import math
import resource
import sys
import time
from pathlib import Path

import pytest

import rlbook.trainer
from rlbook.experiments import BASE, grpo_from_scratch
from rlbook.obtain import run_or_load
from rlbook.runs import RunStore

TINY = dict(preset="qwen3-1.7b-random", init="scratch", prompts_per_step=2, group_size=4, updates_per_step=2,
            micro_batch_size=2, rollout_batch_size=4, total_updates=2, max_new_tokens=6, eval_every=2, eval_size=2,
            eval_samples=1, checkpoint_every=2, lr=1e-4, device="cpu")


def spread_advantages(rewards, group_size, normalize_std):
    """Advantages -1 .. 1 within every group: the random model's tokens decode to nothing (its vocabulary is wider
    than the character tokenizer), so every reward would be equal, every advantage 0 and the backward skipped."""
    return torch.linspace(-1, 1, group_size).repeat(len(rewards) // group_size)


@pytest.mark.slow
def test_paper_profile_dry_run(tmp_path, monkeypatch):
    monkeypatch.setattr(rlbook.trainer, "group_advantages", spread_advantages)
    assert BASE["paper"]["fused_ratio"] == "chunked" and BASE["paper"]["micro_batch_size"] > 0
    config = grpo_from_scratch("paper", **TINY)
    assert config.lora_rank == 64 and config.fused_ratio == "chunked"
    tic = time.time()
    run = run_or_load(config, RunStore(tmp_path), progress=False, references=False)
    seconds = time.time() - tic
    rows = run.metrics
    assert run.complete and [r["update"] for r in rows] == [0, 1, 2]
    assert run.meta["loss_path"] == "chunked"
    for row in rows[1:]:
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"]) and row["response_len"] > 0
    assert all(row["grad_norm"] > 0 for row in rows[1:]), rows  # the backward through 28 layers ran
    assert "eval_greedy_acc" in rows[2]
    state = run.read_state()
    lora_a = [t for name, t in state["model"].items() if "lora_A" in name]
    assert len(lora_a) == 28 * 7 and all(t.shape[0] == 64 for t in lora_a)  # rank 64 on every linear layer
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from record import save_result

    save_result("paper_dry_run", "cpu", {"config": config.to_dict(), "seconds": seconds, "peak_rss_gib": peak_rss,
                                         "rows": rows, "note": "28 layers, hidden 2048, V = 151936, bf16, LoRA 64"})
