"""Run identity: what a run's result depends on, as a dict and as the 10 hex digits that end its directory name.

The identity holds the fields that differ from their defaults (never the display names `experiment` and `name`), the
engine that computes the run (engine='auto' resolved: two engines give different numbers), the TRAINING_VERSION of
the code and, for a warm-started run, the WARM_START_VERSION. A new field whose default computes what runs computed
before leaves every stored identity as it was, with no list to update; changing a field's default changes what the
runs relying on it compute, which, as any such change, bumps TRAINING_VERSION (rlbook.versions). So the device a run
computes on (RunConfig.device) is in its identity only when it is not the CPU: every run made on a CPU keeps its
name, and a run made on a GPU, whose numbers differ from the CPU's for the same seed, is another run. Every stored run
is of TRAINING_VERSION 3 or later and keeps its directory name (tests/test_run_identity.py recomputes them).
"""
from __future__ import annotations

import hashlib
import json

DISPLAY = ("experiment", "name")


def run_identity(values: dict, default: dict, training_version: int, warm_start_version: int) -> dict:
    """The identity of the run of settings `values` (engine='auto' resolved; `default`: each setting's default) as
    code of `training_version` computes it."""
    identity = {k: v for k, v in values.items() if k not in DISPLAY and v != default[k]}
    identity["training_version"] = training_version
    if values["init"] == "warm":
        identity["warm_start_version"] = warm_start_version
    return identity


def digest(identity: dict) -> str:
    """10 hex digits of the identity (JSON with sorted keys: key order, tuples and lists do not matter)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
