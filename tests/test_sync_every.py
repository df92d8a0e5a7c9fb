"""Semi-online sync interval (RunConfig.sync_every): lags cycle 0..s-1, s=1 is today's run, exact resume mid-cycle."""
import pytest

from rlbook.config import RunConfig
from rlbook.runs import RunStore
from test_trainer import interrupt_on_append, per_update, shaped, tiny, train, untimed  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread", "shaped")


def test_sync_every_one_is_the_online_run_and_keeps_its_identity(tmp_path):
    assert tiny(sync_every=1).hash() == tiny().hash() and "sync_every" not in tiny().identity()
    assert tiny(sync_every=3).hash() != tiny().hash()
    online = untimed(train(tiny(total_updates=3), tmp_path / "a").metrics)
    assert untimed(train(tiny(total_updates=3, sync_every=1), tmp_path / "b").metrics) == online


@pytest.mark.parametrize("sync_every, lags", [(3, [0, 1, 2, 0, 1, 2]), (0, [0, 1, 2, 3, 4, 5]),
                                               (1, [0, 0, 0, 0, 0, 0])])
def test_policy_lag_cycles(tmp_path, sync_every, lags):
    rows = per_update(train(tiny(total_updates=6, sync_every=sync_every), tmp_path).metrics)
    assert [r["policy_lag"] for r in rows] == lags


def test_generator_is_the_snapshot(tmp_path):
    """Until the first refresh, sync_every=3 samples from the starting model exactly as offline (0) does."""
    semi = per_update(untimed(train(tiny(total_updates=4, sync_every=3, lr=0.05), tmp_path / "s").metrics))
    offline = per_update(untimed(train(tiny(total_updates=4, sync_every=0, lr=0.05), tmp_path / "o").metrics))
    online = per_update(untimed(train(tiny(total_updates=4, lr=0.05), tmp_path / "n").metrics))
    assert semi[:3] == offline[:3]
    assert semi[1:3] != online[1:3]  # online samples from the updated policy


@pytest.mark.parametrize("sync_every, finetune", [(3, "lora"), (0, "lora"), (3, "full")])
def test_resume_mid_cycle_matches_uninterrupted(tmp_path, monkeypatch, sync_every, finetune):
    config = tiny(total_updates=6, checkpoint_every=2, sync_every=sync_every, finetune=finetune)
    reference = untimed(train(config, tmp_path / "ref").metrics)
    with monkeypatch.context() as m:
        interrupt_on_append(m, 6)  # while writing update 5's row; the checkpoint is at update 4 (snapshot of 3)
        with pytest.raises(KeyboardInterrupt):
            train(config, tmp_path / "store")
    run = RunStore(tmp_path / "store").find(config)
    assert run.read_state()["update"] == 4
    assert untimed(train(config, tmp_path / "store").metrics) == reference


@pytest.mark.parametrize("changes", [{"sync_every": -1}, {"sync_every": 2, "staleness": 1},
                                     {"sync_every": 3, "updates_per_step": 2, "prompts_per_step": 4},
                                     {"sync_every": 2, "engine": "graph"}])
def test_bad_sync_every_is_refused(changes):
    with pytest.raises(ValueError, match="sync_every"):
        RunConfig(**{**tiny().__dict__, **changes})
