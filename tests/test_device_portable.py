"""Every tensor and generator is made on the model's device: the training loop, evaluation, checkpoints and chapter 6's
measurement run with the model on a second device (tests/fake_cuda.py), where tensors or generators of two devices
that meet raise, as on a GPU.

Before this test, chapter 6's `mismatch` gave a model on a GPU CPU generators (chapters/router_replay.py), and its KL
compared the trainer's log-probs with the rollout's behaviour log-probs on the CPU; these tests found both.
"""
import pytest
import torch

import rlbook.trainer
from fake_cuda import DEVICE, DeviceMismatch, simulated_device
from rlbook.chapters import router_replay as ch6
from rlbook.config import RunConfig
from rlbook.models import build_model
from rlbook.runs import CorruptRunError, RunStore
from rlbook.tasks import make_task

pytestmark = pytest.mark.usefixtures("one_thread")
TINY = dict(experiment="device", preset="nano-tiny", init="scratch", prompts_per_step=2, group_size=4,
            total_updates=2, eval_every=2, eval_size=2, eval_samples=1, max_new_tokens=4, checkpoint_every=1)
RUNS = {  # every engine, and each mechanism that makes tensors of its own: Lopti and AR, M2PO's mask, TIS and its
    #       proximal policy, micro-batches, semi-online snapshots and DPO, and the mixture of experts' routing (R3)
    "reference": dict(engine="reference"), "fast": dict(engine="fast"), "graph": dict(engine="graph"),
    "static": dict(engine="static"),
    "lopti+ar+m2po": dict(engine="fast", objective="m2po", staleness=1, lopti_eta=0.5, ar_alpha=0.3),
    "tis+micro-batches": dict(objective="tis", staleness=1, micro_batch_size=4, rollout_batch_size=4),
    "dpo-semi-online": dict(objective="dpo", sync_every=2),
    "router-replay": dict(preset="nano-moe-tiny", finetune="full", rollout_dtype="bfloat16", router_noise=1.0,
                          router_replay=True, objective="gspo"),
}


def spread_advantages(rewards, group_size, normalize_std):
    """Advantages -1 .. 1 within each group: a scratch model's rewards are all equal, which would skip the backward."""
    return torch.linspace(-1, 1, group_size, device=rewards.device).repeat(len(rewards) // group_size)


@pytest.fixture
def on_device(monkeypatch):
    """The trainer's model on the simulated device."""
    made = rlbook.trainer.init_policy

    def init_policy(*args, **kwargs):
        model, tokenizer = made(*args, **kwargs)
        return model.to(DEVICE), tokenizer

    monkeypatch.setattr(rlbook.trainer, "init_policy", init_policy)
    monkeypatch.setattr(rlbook.trainer, "group_advantages", spread_advantages)
    with simulated_device():
        yield


def train(store, **changes):
    config = RunConfig(**{**TINY, "name": "run", **changes})
    run = store.create(config)
    rlbook.trainer.train(config, run, progress=False)
    return run


def test_the_harness_catches_tensors_and_generators_of_two_devices():
    with simulated_device():
        x = torch.ones(3, 2).to(DEVICE)
        assert x.device == DEVICE and (x * 2).sum().item() == 12.0 and (x + torch.tensor(1.0)).device == DEVICE
        assert torch.zeros(2, device=DEVICE).device == DEVICE and torch.tensor([1], device=DEVICE).device == DEVICE
        with pytest.raises(DeviceMismatch, match="meet"):
            x + torch.ones(3, 2)
        with pytest.raises(DeviceMismatch, match="a cpu generator draws for tensors on meta"):
            torch.multinomial(x[:, 0], 1, generator=torch.Generator())
        with pytest.raises(DeviceMismatch, match="a meta generator draws for tensors on cpu"):
            torch.randn(3, generator=torch.Generator(device=DEVICE))
        assert torch.randn(3, generator=torch.Generator(device=DEVICE), device=DEVICE).device == DEVICE
        with pytest.raises(RuntimeError, match="wrong size"):  # a CPU stream never goes into the device's generator
            torch.Generator(device=DEVICE).set_state(torch.Generator().get_state())
        with pytest.raises(RuntimeError, match="size"):
            torch.Generator().set_state(torch.Generator(device=DEVICE).get_state())
        with pytest.raises(TypeError, match="numpy"):
            x.numpy()
        assert x.cpu().numpy().sum() == 6 and x.tolist() == [[1.0, 1.0]] * 3


@pytest.mark.parametrize("name", list(RUNS))
def test_a_run_trains_evaluates_and_checkpoints_on_the_device(name, tmp_path, on_device):
    run = train(RunStore(tmp_path), **RUNS[name])
    rows = run.metrics
    assert run.complete and rows[-1]["update"] == run.config.total_updates and "eval_greedy_acc" in rows[-1]
    assert all(row["grad_norm"] > 0 for row in rows[1:] if run.config.objective != "dpo"), rows  # a pair-less DPO
    #                                                                                 batch has no gradient
    if run.config.router_noise:
        assert all(0 <= row["routing_mismatch"] <= 1 for row in rows[1:])


def test_a_run_made_on_the_device_resumes_there_exactly(tmp_path, monkeypatch, on_device):
    from test_trainer import interrupt_on_append, untimed

    config = RunConfig(**{**TINY, "name": "run", "engine": "fast", "staleness": 1, "total_updates": 3,
                          "checkpoint_every": 2, "eval_every": 3})
    reference = untimed(train(RunStore(tmp_path / "whole"), **config.to_dict()).metrics)
    store = RunStore(tmp_path / "interrupted")
    run = store.create(config)
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        interrupt_on_append(m, 4)  # while writing update 3's row; the checkpoint is at update 2
        rlbook.trainer.train(config, run, progress=False)
    rlbook.trainer.train(config, run, progress=False)
    assert run.meta["resumed_at"] == 2 and untimed(run.metrics) == reference


def test_a_run_made_on_the_cpu_is_not_resumed_with_its_stream_on_the_device(tmp_path, monkeypatch):
    monkeypatch.setattr(rlbook.trainer, "group_advantages", spread_advantages)
    store = RunStore(tmp_path)
    run = train(store, engine="fast")
    run.update_meta(complete=False)
    made = rlbook.trainer.init_policy
    monkeypatch.setattr(rlbook.trainer, "init_policy", lambda *a, **k: (lambda m, t: (m.to(DEVICE), t))(*made(*a, **k)))
    with simulated_device(), pytest.raises(CorruptRunError, match="random stream"):
        rlbook.trainer.train(run.config, run, progress=False)


@pytest.fixture
def moe():
    model, tokenizer = build_model("nano-moe-tiny", seed=0)
    return model, tokenizer, make_task("arithmetic", digits=[1, 2])


def test_chapter_6_measures_the_mismatch_of_a_model_on_the_device(moe):
    model, tokenizer, task = moe
    problems = task.generate(2, seed=0)
    on_cpu, _ = ch6.mismatch(model, tokenizer, task, problems, 4, 8, noise=1.0)
    with simulated_device():
        model.to(DEVICE)
        try:
            measured, batch = ch6.mismatch(model, tokenizer, task, problems, 4, 8, noise=1.0)
            row = ch6.most_flipped(model, batch)
            routes = ch6.token_routes(model, batch, row)
        finally:
            model.to("cpu")
    assert set(measured) == set(on_cpu) and 0 <= measured["routing_mismatch"] <= 1 and measured["kl_k3"] >= 0
    assert len(routes["rollout"]) == len(routes["trainer"]) == len(routes["positions"])


def test_a_generator_of_another_device_is_refused_before_it_draws(moe):
    from rlbook.rollout import sample
    from rlbook.router_replay import RoutingRecorder

    model, tokenizer, _ = moe
    with simulated_device():
        model.to(DEVICE)
        try:
            with pytest.raises(ValueError, match="generator is on cpu and the model on meta"):
                sample(model, tokenizer, ["1+1="] * 4, 4, 1.0, torch.Generator())
            with pytest.raises(ValueError, match="generator is on cpu and the model on meta"):
                RoutingRecorder(model, 1.0, torch.Generator())
        finally:
            model.to("cpu")
