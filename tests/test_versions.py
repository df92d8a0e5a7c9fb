"""Golden results that guard rlbook.versions: a change that alters what a run or a warm start computes fails here.

When one fails, the change alters results: bump TRAINING_VERSION (or WARM_START_VERSION) in rlbook/versions.py, so
stored runs made by the old code are not replayed as current, then rewrite the golden file:

    TRITON_INTERPRET=1 .venv/bin/python tests/test_versions.py
"""
import json
import math
from pathlib import Path

import pytest
import torch

import rlbook.trainer
from rlbook.config import RunConfig
from rlbook.pretrain import WarmStartConfig, warm_start
from rlbook.obtain import run_or_load
from rlbook.runs import RunStore
from rlbook.tasks import make_task
from rlbook.versions import TRAINING_VERSION, WARM_START_VERSION
from shaped import ShapedTask

GOLDEN = Path(__file__).parent / "golden" / "versions.json"
RUN = dict(experiment="golden", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4,
           total_updates=4, updates_per_step=2, staleness=2, eval_every=2, eval_size=8, checkpoint_every=2,
           max_new_tokens=6, engine="reference")  # the other engines' goldens: tests/test_engines.py
OBJECTIVES = ("grpo", "m2po")
KEYS = ("loss", "reward", "m2", "grad_norm", "entropy", "eval_greedy_acc", "eval_sampled_acc")
WARM = dict(preset="nano-tiny", task_params={"digits": [1, 2]}, batch_size=16, max_steps=6, eval_every=3,
            validation_size=8, target_accuracy=None)


def compute(root: Path) -> dict:
    """What the current code produces for the golden run (per objective) and the golden warm start."""
    torch.set_num_threads(1)
    rlbook.trainer.make_task = lambda name, **params: ShapedTask(make_task(name, **params))
    try:
        runs = {o: run_or_load(RunConfig(**RUN, objective=o), RunStore(root), progress=False, references=False)
                for o in OBJECTIVES}
    finally:
        rlbook.trainer.make_task = make_task
    final = warm_start(WarmStartConfig(**WARM), RunStore(root), progress=False)
    rows = [json.loads(line) for line in (final.parent / "metrics.jsonl").read_text().splitlines()]
    return {"training_version": TRAINING_VERSION, "warm_start_version": WARM_START_VERSION,
            "runs": {o: [{k: r[k] for k in KEYS if k in r} for r in run.metrics] for o, run in runs.items()},
            "warm_start": [{k: r[k] for k in ("loss", "val_greedy_acc") if k in r} for r in rows]}


def close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)
    return a == b


@pytest.mark.usefixtures("one_thread")
def test_results_match_the_golden_file_of_this_version(tmp_path):
    golden = json.loads(GOLDEN.read_text())
    now = compute(tmp_path)
    fix = "then rewrite tests/golden/versions.json (see this file's docstring)"
    if (golden["training_version"], golden["warm_start_version"]) != (TRAINING_VERSION, WARM_START_VERSION):
        pytest.fail(f"rlbook.versions changed to {TRAINING_VERSION}/{WARM_START_VERSION} but the golden file is of "
                    f"{golden['training_version']}/{golden['warm_start_version']}: {fix}")
    assert close(golden["runs"], now["runs"]), (
        f"a fixed-seed run now computes other metrics: bump TRAINING_VERSION in rlbook/versions.py, {fix}")
    assert close(golden["warm_start"], now["warm_start"]), (
        f"a fixed-seed warm start now computes another model: bump WARM_START_VERSION in rlbook/versions.py, {fix}")


def test_a_different_run_fails_the_comparison(tmp_path):
    golden = json.loads(GOLDEN.read_text())
    changed = json.loads(json.dumps(golden["runs"]))
    changed["grpo"][1]["grad_norm"] *= 1.001  # a value far from 0 (a loss can be ~1e-8, inside abs_tol)
    assert close(golden["runs"], golden["runs"]) and not close(golden["runs"], changed)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text(json.dumps(compute(Path(tmp)), indent=1) + "\n")
    print(f"wrote {GOLDEN}")
