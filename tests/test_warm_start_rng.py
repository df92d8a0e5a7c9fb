"""A warm-started run computes the same metrics whether its warm start was cached or trained in the same call."""
import pytest

import rlbook.trainer
from rlbook.config import RunConfig
from rlbook.pretrain import WarmStartConfig, warm_start
from rlbook.obtain import run_or_load
from rlbook.runs import RunStore
from rlbook.tasks import make_task
from rlbook.trainer import TIMING_KEYS as TIMING
from shaped import ShapedTask

WARM = dict(batch_size=8, max_steps=3, eval_every=3, validation_size=4, target_accuracy=None)
RUN = dict(experiment="w", preset="nano-tiny", init="warm", task_params={"digits": [1, 2]}, prompts_per_step=4,
           group_size=4, total_updates=2, eval_every=2, eval_size=8, eval_samples=1, max_new_tokens=4,
           warm_start=WARM)


def metrics(run):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in run.metrics]


@pytest.mark.usefixtures("one_thread")
def test_cached_and_fresh_warm_starts_give_the_same_run(tmp_path, monkeypatch):
    """A dense reward, so the updates (and with them the adapter's random init) show in the metrics."""
    monkeypatch.setattr(rlbook.trainer, "make_task", lambda name, **params: ShapedTask(make_task(name, **params)))
    config = RunConfig(**RUN)
    fresh = run_or_load(config, RunStore(tmp_path / "fresh"), progress=False, references=False)
    cached_store = RunStore(tmp_path / "cached")
    warm_start(WarmStartConfig(preset=config.preset, task=config.task, task_params=config.task_params, **WARM),
               cached_store, progress=False)
    cached = run_or_load(config, cached_store, progress=False, references=False)
    assert metrics(fresh) == metrics(cached)


@pytest.mark.usefixtures("one_thread")
def test_a_failed_warm_start_leaves_no_run_directory(tmp_path):
    unreachable = {**WARM, "max_steps": 2, "eval_every": 1, "target_accuracy": 1.0}
    config = RunConfig(**{**RUN, "warm_start": unreachable})
    store = RunStore(tmp_path)
    with pytest.raises(RuntimeError, match="did not reach accuracy"):
        run_or_load(config, store, progress=False, references=False)
    assert store.runs() == [] and not (tmp_path / config.experiment).exists()
