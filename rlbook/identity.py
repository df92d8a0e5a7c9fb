"""Run identity: what a run's result depends on, as a dict and as the 10 hex digits that end its directory name.

The identity holds the fields that differ from their defaults (never the display names `experiment` and `name`), the
engine that computes the run (engine='auto' resolved: two engines give different numbers), the TRAINING_VERSION of
the code and, for a warm-started run, the WARM_START_VERSION. A new field whose default computes what runs computed
before leaves every stored identity as it was, with no list to update; changing a field's default changes what the
runs relying on it compute, which, as any such change, bumps TRAINING_VERSION (rlbook.versions). So the device a run
computes on (RunConfig.device) is in its identity only when it is not the CPU: every run made on a CPU keeps its
name, and a run made on a GPU, whose numbers differ from the CPU's for the same seed, is another run.

Up to TRAINING_VERSION 2 the identity held every field at any value except the ones added after the first stored
runs, and named the engine by its five speed options (rlbook.engines.KNOBS). `run_identity(config, 2, ...)` rebuilds
that scheme, so the stored runs of version 2 keep their directory names (tests/test_run_identity.py).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from .checks import defaults
from .engines import KNOBS, engine_of

DISPLAY = ("experiment", "name")
# The fields a TRAINING_VERSION <= 2 identity held even at their defaults: a record of that scheme, never extended
# (a field added since is in no such identity, and is left out at its default like every field now).
KEPT_AT_DEFAULT_UNTIL_V3 = (
    "seed", "preset", "init", "finetune", "lora_rank", "lora_alpha", "task", "task_params", "prompts_per_step",
    "group_size", "temperature", "max_new_tokens", "objective", "objective_params", "total_updates",
    "updates_per_step", "epochs", "staleness", "lr", "weight_decay", "max_grad_norm", "normalize_adv_std", "ar_alpha",
    "lopti_eta", "fused_ratio", "eval_every", "eval_size", "eval_samples", "checkpoint_every", "warm_start")


def run_identity(config, training_version: int, warm_start_version: int) -> dict:
    """The identity of config's run as code of `training_version` (2 or later) computes it."""
    if training_version < 2:
        raise ValueError(f"training_version={training_version}: identities before version 2 (a hash of the config "
                         "alone) are not reproduced; no stored run has one")
    engine = engine_of(config)
    values, default = asdict(config), defaults(config)
    if training_version >= 3:
        values["engine"], kept = engine.name, ()
    else:  # the engine as its speed options, each a field that defaulted to off
        del values["engine"]
        values.update(engine.knobs)
        default.update(dict.fromkeys(KNOBS, False))
        kept = KEPT_AT_DEFAULT_UNTIL_V3
    identity = {k: v for k, v in values.items() if k not in DISPLAY and (k in kept or v != default[k])}
    identity["training_version"] = training_version
    if config.init == "warm":
        identity["warm_start_version"] = warm_start_version
    return identity


def digest(identity: dict) -> str:
    """10 hex digits of the identity (JSON with sorted keys: key order, tuples and lists do not matter)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
