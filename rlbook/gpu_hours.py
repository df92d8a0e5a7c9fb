"""A rough model of what runs cost on one GPU, for a plan to state before anything trains.

Based on the two H100 measurements of 2026-11-26 (bench/results/gpu_check/, an NVIDIA H100 80GB HBM3), nothing else:

  training   one LoRA update at Qwen3-1.7B's shape, 8 x (128 + 1024) tokens (chunked loss path, gradient
             checkpointing) took 0.95 s: TRAIN_S = 0.95 s / (9,216 tokens x 1.72e9 parameters) per token and active
             parameter, times FULL_FINETUNE for full fine-tuning (its weight gradients: 6 instead of about 4
             multiply-adds per parameter and token), times `epochs`, plus a third for a proximal pass
  sampling   nano-base's rollout of 16 new tokens for 128 sequences: 325 / 279 ms through the model, 116 / 107 ms
             through the merged lean sampler, 42 / 83 ms replayed from a CUDA graph: STEP_S per layer and decoding
             step for each sampler (decoding is launch-bound at small batches), and at least the time to read the
             active weights once per step at the H100's HBM bandwidth
  overhead   the standard profile's update (nano-base, 64 prompts x 8, sampling included) took 0.19-0.28 s on the
             four engines, about OVERHEAD_S more than the two terms above give it

A run's cost: total_updates x (training + sampling + overhead) per update, and every evaluation's decoding (greedy,
and eval_samples samples, of eval_size problems). Decoding runs the whole completion budget; sequence lengths are
the task's prompts and 1.25 x its longest traces in characters (the nano models' tokens; more than a subword
tokenizer's, so an upper bound there). It ignores prefill, the optimizer step and the warm start. Good to a factor
of about 2: enough to say hours or days before training, not to schedule.
"""
from __future__ import annotations

import json
import math
from functools import lru_cache

from .models import get_preset
from .objectives import needs_proximal
from .tasks import make_task

GPU = "one H100"
TRAIN_S = 0.95 / (9216 * 1.72e9)  # seconds per token and active parameter (LoRA, gradient checkpointing)
FULL_FINETUNE = 1.5
STEP_S = {"model": 0.30 / (16 * 8), "merged": 0.11 / (16 * 8), "static": 0.063 / (16 * 8)}  # per layer and step
HBM_BYTES_PER_S = 3.35e12
OVERHEAD_S = 0.1  # per update
EVAL_BATCH = 256  # sequences decoded at once in evaluation without rollout_batch_size (rlbook.evaluate)
BYTES = {True: 2, False: 4}  # per weight: bfloat16 for the models >= 1024 wide (rlbook.models), float32 below


def shape(preset: str) -> dict:
    """A preset's config values (a real checkpoint's preset holds its shape)."""
    values = get_preset(preset).config
    if not values:
        raise ValueError(f"preset {preset!r} states no shape to estimate its cost from")
    return values


def parameters(preset: str) -> tuple[float, float]:
    """(active parameters per token, all parameters) of a preset, from its shape: embeddings (and an untied lm_head),
    attention, and the MLP or, for a mixture of experts, the top-k of its experts and the router."""
    s = shape(preset)
    hidden, layers, vocab = s["hidden_size"], s["num_hidden_layers"], s.get("vocab_size", 64)
    head = s.get("head_dim", hidden // s["num_attention_heads"])
    attention = hidden * head * (2 * s["num_attention_heads"] + 2 * s.get("num_key_value_heads", 1))
    embeddings = vocab * hidden * (1 if s.get("tie_word_embeddings", True) else 2)
    if "num_experts" in s:
        expert = 3 * hidden * s.get("moe_intermediate_size", s["intermediate_size"])
        active_mlp = s["num_experts_per_tok"] * expert + s["num_experts"] * hidden
        all_mlp = s["num_experts"] * expert + s["num_experts"] * hidden
    else:
        active_mlp = all_mlp = 3 * hidden * s["intermediate_size"]
    return embeddings + layers * (attention + active_mlp), embeddings + layers * (attention + all_mlp)


@lru_cache(maxsize=None)
def _lengths(task: str, params: str) -> tuple[int, int]:
    made = make_task(task, **json.loads(params))
    problems = made.generate(64, seed=0)
    return max(len(p["prompt"]) for p in problems), int(1.25 * max(len(made.trace(p)) for p in problems)) + 2


def lengths(config) -> tuple[int, int]:
    """(prompt, completion) lengths of config's sequences."""
    prompt, completion = _lengths(config.task, json.dumps(config.task_params, sort_keys=True))
    return prompt, config.max_new_tokens or completion


def decoding_s(config, sequences: int, at_once: int, steps: int) -> float:
    """Seconds to decode `steps` tokens for `sequences` sequences, `at_once` at a time, with config's sampler."""
    s, (active, _) = shape(config.preset), parameters(config.preset)
    engine = config.resolved_engine
    sampler = "static" if engine.static_sampling else "merged" if engine.lean_sampler else "model"
    per_step = max(s["num_hidden_layers"] * STEP_S[sampler],
                   active * BYTES[s["hidden_size"] >= 1024] / HBM_BYTES_PER_S)
    return math.ceil(sequences / at_once) * steps * per_step


def run_seconds(config) -> float:
    """The model's seconds for config's whole run on one GPU."""
    active, _ = parameters(config.preset)
    prompt, completion = lengths(config)
    rows = config.prompts_per_step * config.group_size
    per_step_updates = config.updates_per_step * config.epochs
    passes = config.epochs + (1 / 3 if needs_proximal(config.objective) else 0)
    training = rows * (prompt + completion) * active * TRAIN_S * passes * (FULL_FINETUNE if config.finetune == "full"
                                                                          else 1)
    sampling = decoding_s(config, rows, config.rollout_batch_size or rows, completion)
    per_update = (training + sampling) / per_step_updates + OVERHEAD_S
    evaluations = config.total_updates // config.eval_every + 1
    eval_sequences = config.eval_size * (1 + config.eval_samples)
    evaluating = evaluations * decoding_s(config, eval_sequences, config.rollout_batch_size or EVAL_BATCH, completion)
    return config.total_updates * per_update + evaluating


def gpu_hours(configs) -> float:
    return sum(run_seconds(c) for c in configs) / 3600


def describe(configs) -> str:
    """'about N GPU-hours on one H100 (...)' for the runs of `configs`."""
    hours = gpu_hours(configs)
    amount = f"{hours:.0f}" if hours >= 10 else f"{hours:.1f}" if hours >= 0.1 else "under 0.1"
    return (f"about {amount} GPU-hours on {GPU} (rlbook.gpu_hours: a rough model from two H100 measurements, good to "
            "a factor of about 2)")
