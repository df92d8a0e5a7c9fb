"""The TRL backend: refusals before anything starts, and 2 updates of nano-tiny through TRL's GRPOTrainer stored as
an rlbook run (same prompts as rlbook's trainer, rlbook's metric names, meta naming TRL)."""
import json

import pytest

from rlbook import cli, trl_backend
from rlbook.config import RunConfig
from rlbook.runs import RunStore
from rlbook.versions import TRAINING_VERSION

pytest.importorskip("trl")  # the dev extra installs it; a bare `pip install rlbook` has no TRL

TINY = dict(experiment="tiny_trl", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4,
            total_updates=2, eval_every=1, eval_size=8, eval_samples=1, max_new_tokens=8, seed=3)


@pytest.mark.parametrize("changes, named", [
    (dict(objective="m2po"), "objective='m2po'"),
    (dict(objective="tis"), "objective='tis'"),
    (dict(objective="m2po_areal"), "objective='m2po_areal'"),
    (dict(updates_per_step=4, staleness=8, prompts_per_step=16), "staleness=8"),
    (dict(ar_alpha=0.3), "ar_alpha=0.3"),
    (dict(lopti_eta=0.5), "lopti_eta=0.5"),
    (dict(sync_every=10), "sync_every=10"),
    (dict(preset="nano-moe-tiny", router_replay=True), "router_replay=True"),
    (dict(preset="nano-moe-tiny", rollout_dtype="bfloat16"), "rollout_dtype='bfloat16'"),
])
def test_refused_on_one_line_naming_the_setting_and_trls_offer(changes, named, tmp_path, capsys):
    config = RunConfig(**{**TINY, **changes})
    assert any(line.startswith(named) for line in trl_backend.refusals(config))
    flags = [f"--{k.replace('_', '-')}={json.dumps(v) if isinstance(v, dict) else v}"
             for k, v in {**TINY, **changes}.items()]
    code = cli.main(["train", "--backend", "trl", "--runs-dir", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and named in err and "TRL" in err
    assert not any(tmp_path.iterdir())  # refused before a directory or a model was made


def test_expressible_settings_map_to_grpo_config():
    from trl import GRPOConfig

    config = RunConfig(**{**TINY, "objective": "gspo", "updates_per_step": 2, "epochs": 2,
                          "objective_params": {"eps_low": 1e-3, "eps_high": 2e-3}})
    args = GRPOConfig(output_dir="unused", use_cpu=True, **trl_backend.trl_arguments(config, 8))
    assert (args.loss_type, args.importance_sampling_level) == ("grpo", "sequence")
    assert (args.epsilon, args.epsilon_high, args.num_iterations, args.num_generations) == (1e-3, 2e-3, 2, 4)
    # a rollout batch of 4 x 4 sequences makes 2 updates of 8, each in one pass
    assert (args.per_device_train_batch_size, args.steps_per_generation, args.gradient_accumulation_steps) == (8, 2, 1)
    dual = RunConfig(**{**TINY, "objective_params": {"dual_clip": 3.0}, "micro_batch_size": 4})
    args = trl_backend.trl_arguments(dual, 8)
    assert args["delta"] == 3.0 and args["loss_type"] == "dapo"
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"]) == (4, 4)


def rlbook_first_prompts(config, tmp_path, monkeypatch) -> list[str]:
    """The prompts rlbook's own trainer samples at its first step for config (one update)."""
    from rlbook import rollout as rollouts
    from rlbook import trainer

    seen, rollout = [], rollouts.rollout

    def recording(model, tokenizer, task, problems, *args, **kwargs):
        seen.extend(p["prompt"] for p in problems)
        return rollout(model, tokenizer, task, problems, *args, **kwargs)

    monkeypatch.setattr(rollouts, "rollout", recording)  # what rlbook.rollout.BatchSampler calls
    run = RunStore(tmp_path / "rlbook").create(config.replace(total_updates=1, experiment="tiny_rlbook"))
    trainer.train(run.config, run, progress=False)
    return seen


def test_two_updates_of_nano_tiny_through_trl(tmp_path, monkeypatch, one_thread):
    config = RunConfig(**TINY)
    scored, call = [], trl_backend.RewardFunction.__call__

    def recording(self, prompts, completions, problem, **kwargs):
        scored.append([json.loads(p)["prompt"] for p in problem])
        return call(self, prompts, completions, problem, **kwargs)

    monkeypatch.setattr(trl_backend.RewardFunction, "__call__", recording)
    store = RunStore(tmp_path / "runs")
    run = trl_backend.train_with_trl(config, store, progress=False)

    assert run.config == config and run.complete
    meta = run.meta
    assert (meta["backend"], meta["trl"], meta["updates"]) == ("trl", trl_backend.TRL_VERSION, 2)
    assert meta["training_version"] == TRAINING_VERSION  # the run's directory hash is this version's
    assert any(line.startswith("advantages") for line in meta["differences"])
    rows = run.metrics
    assert [r["update"] for r in rows] == [0, 1, 2]
    for name in ("reward", "train_acc", "zero_std_frac", "response_len", "entropy", "loss", "grad_norm", "lr",
                 "clip_frac_low", "eval_greedy_acc", "eval_sampled_acc", "wall_time_s"):
        assert all(isinstance(r.get(name), float) for r in rows[1:]), name
    assert rows[1]["lr"] == config.lr and 0 < rows[1]["response_len"] <= config.max_new_tokens
    # the same prompts as rlbook's trainer, in its order: each group of 4 sequences shares one prompt
    first = rlbook_first_prompts(config, tmp_path, monkeypatch)
    assert scored[0] == [p for p in first for _ in range(config.group_size)] and len(set(first)) > 1
    second = [r["prompt"] for r in trl_backend.prompt_rows(config, _task(config))[4:8]]
    assert scored[1] == [p for p in second for _ in range(config.group_size)] and set(second) != set(first)
    # stored: replayed without training
    monkeypatch.setattr(trl_backend, "_train", lambda *a: pytest.fail("a finished TRL run was trained again"))
    assert trl_backend.train_with_trl(config, store).path == run.path


def test_an_rlbook_run_is_never_taken_for_a_trl_run(tmp_path):
    config = RunConfig(**TINY)
    run = RunStore(tmp_path).create(config)
    run.append({"update": 0, "eval_greedy_acc": 0.0})
    with pytest.raises(ValueError, match="holds an rlbook run.*--experiment tiny_trl_trl"):
        trl_backend.train_with_trl(config, RunStore(tmp_path))


def _task(config):
    from rlbook.tasks import make_task

    return make_task(config.task, **config.task_params)
