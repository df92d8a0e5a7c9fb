"""Named random streams: each consumer of randomness draws its own stream, so no two consumers ever share one.

A stream's seed is  OFFSET[stream] + RUN_STRIDE * run_seed + HALF + index,  where index (a step, an update, or a
negative step for the rollouts that fill the stale queue) lies in (-HALF, HALF). Streams start SPACING apart, more
than RUN_STRIDE times the largest run seed, so two different (stream, run seed, index) never give the same seed,
and no stream reaches the fixed data sets' seeds (below HALF). The warm start keeps the formula it was trained with,
1_000_000 * (seed + 1) + step, so the warm starts shipped in data/runs stay valid.

Before training version 3, RL prompts used the warm start's formula too: RL seed 0 sampled, update after update,
the prompts its warm start had been trained on, while seeds 1-4 did not.
"""
from __future__ import annotations

RUN_STRIDE = 1_000_000  # seeds of one run seed's stream: index in (-HALF, HALF)
HALF = RUN_STRIDE // 2
MAX_RUN_SEED = 2**31  # the largest run seed + 1 (rlbook.config checks every run against it)
SPACING = 2**52  # > RUN_STRIDE * MAX_RUN_SEED: the streams never overlap
STREAMS = {
    "warm_start": RUN_STRIDE - HALF,  # SFT batches of the warm start (rlbook.pretrain)
    "init": SPACING * 1,  # random weights: LoRA adapters, a scratch model (rlbook.trainer)
    "rl_prompts": SPACING * 2,  # the problems of every RL step (rlbook.trainer)
    "rollout": SPACING * 3,  # the tokens sampled in rollouts (one generator per run, carried across steps)
    "evaluation_sampling": SPACING * 4,  # the sampled accuracy of each evaluation
    "router_noise": SPACING * 5,  # Gaussian noise on MoE router logits at rollout (chapter 6)
}
# Fixed data sets: one seed each, shared by every run (the sets are the same for everyone); all below HALF.
EVALUATION_SET = 12345  # rlbook.evaluate: the evaluation set (data/eval) and the completion budget (seed + 1)
VALIDATION_SET = 54321  # rlbook.evaluate: the validation split (seeds counted up from here until it is full)


def stream_seed(stream: str, run_seed: int, index: int = 0) -> int:
    """The seed of draw `index` of `stream` for run seed `run_seed`."""
    if stream not in STREAMS:
        raise ValueError(f"stream={stream!r} is not a random stream; choose one of: {', '.join(STREAMS)}")
    if not 0 <= run_seed < MAX_RUN_SEED:
        raise ValueError(f"run_seed={run_seed} must be in [0, {MAX_RUN_SEED})")
    if not -HALF < index < HALF:
        raise ValueError(f"index={index} must be in ({-HALF}, {HALF}): a stream holds that many draws per run seed")
    return STREAMS[stream] + RUN_STRIDE * run_seed + HALF + index
