"""The GPU user's default path runs somewhere: two updates of the standard profile on the CPU.

`PROFILE=standard` trains nano-base (25M parameters) with `BASE["standard"]`'s settings on one GPU (device 'cuda').
This test trains exactly that config on the CPU (device 'cpu'), warm start included (init="warm"), shrinking only
the batch and the budgets: prompts_per_step, total_updates, eval_size and eval_samples of the run, and batch_size,
max_steps, target_accuracy (none: stop at max_steps), eval_every and validation_size of its warm start, so the warm
start is two steps. Everything else (model, learning rates, group size, task, objective) is the standard profile's.
"""
import math

import pytest

from rlbook.experiments import BASE, grpo_from_scratch
from rlbook.obtain import run_or_load
from rlbook.runs import RunStore, read_json

SHRUNK = dict(prompts_per_step=2, total_updates=2, eval_size=4, eval_samples=1, device="cpu")
WARM_SHRUNK = dict(batch_size=8, max_steps=2, target_accuracy=None, eval_every=2, validation_size=4)

pytestmark = pytest.mark.usefixtures("one_thread")


def test_two_updates_of_the_standard_profile(tmp_path):
    config = grpo_from_scratch("standard", **SHRUNK, warm_start={**BASE["standard"]["warm_start"], **WARM_SHRUNK})
    standard = grpo_from_scratch("standard").to_dict()
    changed = {key for key, value in config.to_dict().items() if value != standard[key]}
    assert changed == {*SHRUNK, "warm_start"} and config.preset == "nano-base" and config.init == "warm"
    assert standard["device"] == "cuda"
    kept = {k: v for k, v in BASE["standard"]["warm_start"].items() if k not in WARM_SHRUNK}
    assert {k: v for k, v in config.warm_start.items() if k not in WARM_SHRUNK} == kept and kept

    run = run_or_load(config, RunStore(tmp_path), progress=False, references=False)
    assert run.complete and [row["update"] for row in run.metrics] == [0, 1, 2]
    assert all(math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"]) for row in run.metrics[1:])
    assert {"eval_greedy_acc", "eval_sampled_acc"} <= run.metrics[-1].keys()
    warm = [path for path in (tmp_path / "warmstart").iterdir() if path.name.startswith("nano-base-arithmetic-")]
    assert len(warm) == 1 and read_json(warm[0] / "meta.json")["steps"] == 2
