"""Named experiments: the configs of each chapter per profile, shared by notebooks, the CLI and the benchmarks."""
from __future__ import annotations

from .config import RunConfig
from .profiles import resolve_profile

# Per profile: model, task size, warm start and GRPO budget. Settings measured in bench/learning_gain.py.
BASE = {
    "smoke": dict(preset="nano-tiny", task_params={"digits": [1, 2]}, prompts_per_step=16, group_size=8,
                  total_updates=150, eval_every=25, eval_size=200, lr=2e-3,
                  warm_start=dict(lr=3e-3, batch_size=64, eval_size=100)),
    "cpu": dict(preset="nano-small", prompts_per_step=16, group_size=8, total_updates=600, eval_every=50,
                eval_size=300, lr=5e-4, warm_start=dict(eval_size=200)),
    "standard": dict(preset="nano-base", prompts_per_step=64, group_size=8, total_updates=800, eval_every=50,
                     eval_size=500, lr=5e-4, warm_start=dict(lr=5e-4, eval_size=300)),
    "paper": dict(preset="qwen3-1.7b", prompts_per_step=256, group_size=8, updates_per_step=4, total_updates=4000,
                  eval_every=100, eval_size=500, lr=1e-6, lora_rank=64, lora_alpha=128.0),
}


def grpo_from_scratch(profile: str = "auto", seed: int = 0, **changes) -> RunConfig:
    """Chapter 1: one GRPO run from the warm-started model on arithmetic."""
    profile = resolve_profile(profile)
    values = {**BASE[profile], "experiment": "01_grpo", "name": f"grpo-{profile}-seed{seed}", "seed": seed}
    return RunConfig.from_dict({**values, **changes})


def stale_run(profile: str = "auto", objective: str = "grpo", staleness: int = 0, seed: int = 0,
              **changes) -> RunConfig:
    """Chapter 2 / 3: one run of an objective at a staleness (4 updates per rollout batch, as in M2PO)."""
    profile = resolve_profile(profile)
    values = {**BASE[profile], "experiment": "02_staleness", "updates_per_step": 4, "objective": objective,
              "staleness": staleness, "seed": seed, "name": f"{objective}-s{staleness}-{profile}-seed{seed}"}
    return RunConfig.from_dict({**values, **changes})
