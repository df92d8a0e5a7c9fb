"""Routing of the nano-moe model at rollout, Rollout Routing Replay (R3, arXiv 2510.11370), and its metrics."""
import math

import pytest
import torch

from rlbook.config import RunConfig
from rlbook.losspath import loss_and_tokens, sequence_inputs, token_stats
from rlbook.models import build_model
from rlbook.rollout import rollout
from rlbook.router_replay import (NOT_ROUTED, RoutingRecorder, extreme_fraction, join_routing, own_experts,
                                  predicting_positions, replay_gate, replaying, rollout_copy, routers, top_k_gate)
from rlbook.tasks import make_task
from rlbook.trainer import resolve

pytestmark = pytest.mark.usefixtures("one_thread")
TASK = make_task("arithmetic", digits=[1, 2])


def moe(seed=0):
    model, tokenizer = build_model("nano-moe", seed=seed, num_hidden_layers=2)
    with torch.no_grad():  # router logits of a warm-started size (the random init's are tiny)
        for router in routers(model):
            router.weight.mul_(20)
    return model, tokenizer


def sampled(model, tokenizer, noise=0.0, dtype="float32", prompts=3, group=4, seed=0):
    policy = rollout_copy(model, dtype)
    recorder = RoutingRecorder(policy, noise, torch.Generator().manual_seed(seed + 7))
    return rollout(policy, tokenizer, TASK, TASK.generate(prompts, seed=seed), group, 8, 1.0,
                   torch.Generator().manual_seed(seed), policy_version=0, router=recorder)


def chosen_in_training(model, batch, replay: bool):
    batch.replay_routing = replay
    with replaying(model, batch.routing if replay else None):
        return own_experts(model, lambda: model(**sequence_inputs(model, batch)))


def test_replay_gate_is_softmax_restricted_to_the_replayed_experts():
    router = type("R", (), {"top_k": 2, "norm_topk_prob": True})()
    logits = torch.log(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))  # softmax = [0.1, 0.2, 0.3, 0.4]
    assert torch.allclose(replay_gate(router, logits, torch.tensor([[0, 2]])), torch.tensor([[0.25, 0.75]]))
    weights, experts = top_k_gate(router, logits)
    assert experts.tolist() == [[3, 2]] and torch.allclose(weights, torch.tensor([[4 / 7, 3 / 7]]))
    router.norm_topk_prob = False
    assert torch.allclose(replay_gate(router, logits, torch.tensor([[0, 2]])), torch.tensor([[0.1, 0.3]]))


def test_recorded_experts_are_the_float32_models_own_and_padding_is_not_routed():
    model, tokenizer = moe()
    batch = sampled(model, tokenizer)
    layers, k = 2, 2
    assert batch.routing.dtype == torch.uint8
    assert batch.routing.shape == (12, layers, batch.prompt_ids.shape[1] + batch.response_ids.shape[1], k)
    real = torch.cat([batch.prompt_mask, batch.response_mask.long()], 1) != 0
    assert (batch.routing[~real[:, None, :, None].expand_as(batch.routing)] == NOT_ROUTED).all()
    # the KV-cache rollout and one float32 forward over the whole sequence route every fed token alike
    own = chosen_in_training(model, batch, replay=False)
    for layer, chosen in enumerate(own):
        recorded = batch.routing[:, layer].reshape(-1, k)
        fed = recorded[:, 0] != NOT_ROUTED
        assert fed.sum() > 50 and torch.equal(recorded[fed].long(), chosen[fed])


def test_without_mismatch_replay_changes_nothing():
    model, tokenizer = moe()
    batch = sampled(model, tokenizer)
    config = RunConfig(preset="nano-moe", finetune="full", group_size=4)
    advantages = torch.randn(len(batch))[:, None] * batch.response_mask
    results = []
    for replay in (False, True):
        batch.replay_routing = replay
        model.zero_grad()
        loss, logp, _, _ = loss_and_tokens(model, batch, advantages, None, *resolve(config, torch.device("cpu")))
        loss.backward()
        results.append((loss.detach(), logp.detach(), [p.grad.clone() for p in model.parameters()]))
    (loss_a, logp_a, grads_a), (loss_b, logp_b, grads_b) = results
    assert torch.equal(loss_a, loss_b) and torch.equal(logp_a, logp_b)
    assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b))


@pytest.mark.parametrize("noise, dtype", [(1.0, "float32"), (0.0, "bfloat16"), (0.5, "bfloat16")])
def test_with_mismatch_the_replayed_forward_routes_as_the_rollout(noise, dtype):
    model, tokenizer = moe()
    batch = sampled(model, tokenizer, noise, dtype, prompts=6)
    predicting = predicting_positions(batch.prompt_ids.shape[1], batch.response_mask)
    own, replayed = chosen_in_training(model, batch, False), chosen_in_training(model, batch, True)
    flipped = 0
    for layer in range(2):
        recorded = batch.routing[:, layer].reshape(-1, 2)
        fed = recorded[:, 0] != NOT_ROUTED
        assert torch.equal(replayed[layer][fed], recorded[fed].long())
        flipped += (own[layer][fed].sort(-1).values != recorded[fed].long().sort(-1).values).any(-1).sum()
    assert flipped > 0  # there was a mismatch to remove
    assert predicting.sum() == batch.response_mask.sum()


def test_replay_lowers_the_train_vs_rollout_kl_and_gradients_reach_the_router():
    model, tokenizer = moe()
    batch = sampled(model, tokenizer, noise=1.0, prompts=6)
    kl = []
    for replay in (False, True):
        batch.replay_routing = replay
        model.zero_grad()
        logp, _ = token_stats(model, batch, 1.0, "reference")
        log_ratio = (logp - batch.behavior_logp) * batch.response_mask
        kl.append((torch.exp(log_ratio) - 1 - log_ratio).sum() / batch.response_mask.sum())
        (logp * batch.response_mask).sum().backward()
        assert all(r.weight.grad is not None and r.weight.grad.abs().sum() > 0 for r in routers(model))
    assert kl[1] < kl[0]  # the experts match; the gate weights still differ (the rollout's come from noisy logits)
    # no noise, float32: the rollout's log-probs are the replayed training forward's
    clean = sampled(model, tokenizer, prompts=2)
    clean.replay_routing = True
    logp, _ = token_stats(model, clean, 1.0, "reference")
    assert torch.allclose(logp * clean.response_mask, clean.behavior_logp, atol=1e-5)


def test_extreme_fraction_and_predicting_positions_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.1, 0.3], [0.9, 0.2, 0.0 + 1e-9]]))
    blogp = torch.log(torch.tensor([[0.2, 0.1, 0.1], [0.9, 0.5, 0.5]]))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # ratios 2.5 (> 2), 1, 3 (> 2); 1, 0.4 (1/rho = 2.5 > 2); the masked token does not count: 3 of 5
    assert extreme_fraction(logp, blogp, mask) == pytest.approx(3 / 5)
    assert extreme_fraction(logp, blogp, mask, bound=2.6) == pytest.approx(1 / 5)
    assert predicting_positions(2, mask).tolist() == [[False, True, True, True, False],
                                                      [False, True, True, False, False]]


def test_join_routing_pads_prompts_left_and_responses_right():
    a = torch.arange(1 * 1 * 5 * 1, dtype=torch.uint8).view(1, 1, 5, 1)  # prompt 2, response 3
    b = torch.full((1, 1, 4, 1), 9, dtype=torch.uint8)  # prompt 3, response 1
    joined = join_routing([a, b], [2, 3])
    assert joined[:, 0, :, 0].tolist() == [[NOT_ROUTED, 0, 1, 2, 3, 4], [9, 9, 9, 9, NOT_ROUTED, NOT_ROUTED]]


def test_rollout_copy_is_a_bfloat16_copy():
    model, _ = moe()
    assert rollout_copy(model, "float32") is model
    copy = rollout_copy(model, "bfloat16")
    assert copy is not model and next(copy.parameters()).dtype == torch.bfloat16
    assert next(model.parameters()).dtype == torch.float32
    with pytest.raises(ValueError, match="bfloat16"):
        rollout_copy(model, "fp16")


def test_recorder_refuses_a_dense_model():
    with pytest.raises(ValueError, match="mixture-of-experts"):
        RoutingRecorder(build_model("nano-tiny")[0])


def test_new_fields_keep_identities_and_refuse_bad_values():
    base = RunConfig(preset="nano-moe", finetune="full")
    assert base.hash() == RunConfig(preset="nano-moe", finetune="full", rollout_dtype="float32", router_noise=0.0,
                                    router_replay=False).hash()
    assert not {"rollout_dtype", "router_noise", "router_replay"} & set(base.identity())
    assert len({base.hash(), base.replace(router_replay=True).hash(), base.replace(router_noise=0.1).hash(),
                base.replace(rollout_dtype="bfloat16").hash()}) == 4
    for changes, match in [({"router_replay": True, "preset": "nano-small"}, "dense"),
                           ({"router_noise": 0.5, "preset": "nano-small"}, "dense"),
                           ({"router_noise": -0.1}, "router_noise"), ({"rollout_dtype": "fp8"}, "rollout_dtype"),
                           ({"router_replay": True, "engine": "fast"}, "router_replay"),
                           ({"objective": "dpo", "finetune": "lora"}, "dpo' needs a dense model")]:
        with pytest.raises(ValueError, match=match):
            base.replace(**changes)


def test_trainer_rows_carry_the_mismatch_and_replay_lowers_it(tmp_path):
    from rlbook.obtain import run_or_load
    from rlbook.runs import RunStore

    rows = {}
    for replay in (False, True):
        config = RunConfig(experiment="t", preset="nano-moe", init="scratch", finetune="full", lr=1e-4,
                           prompts_per_step=4, group_size=4, total_updates=2, eval_every=2, eval_size=8,
                           max_new_tokens=6, rollout_dtype="bfloat16", router_noise=0.5, router_replay=replay)
        rows[replay] = run_or_load(config, RunStore(tmp_path), progress=False, references=False).metrics[1:]
    for without, with_r3 in zip(rows[False], rows[True]):
        assert 0 < without["routing_mismatch"] <= 1 and len(without["routing_mismatch_layers"]) == 4
        assert math.isclose(without["routing_mismatch"], sum(without["routing_mismatch_layers"]) / 4,
                            rel_tol=1e-6)  # rows are stored as float32
        assert 0 <= without["f2"] <= 1 and with_r3["kl_k3"] < without["kl_k3"]
    assert rows[False][0]["routing_mismatch"] == rows[True][0]["routing_mismatch"]  # the same first rollout


def test_an_interrupted_replay_run_resumes_exactly(tmp_path, monkeypatch):
    """Routing noise is drawn per step from its own seeded stream, and the recorded routing travels in the
    checkpoint's queue (staleness 4): a resumed run continues as the uninterrupted one."""
    from rlbook.runs import RunStore
    from test_trainer import interrupt_on_append, train, untimed

    config = RunConfig(experiment="t", preset="nano-moe-tiny", init="scratch", finetune="full", lr=1e-3,
                       prompts_per_step=4, group_size=4, total_updates=6, updates_per_step=2, staleness=2,
                       eval_every=3, eval_size=8, max_new_tokens=6, checkpoint_every=2, rollout_dtype="bfloat16",
                       router_noise=1.0, router_replay=True)
    reference = untimed(train(config, tmp_path / "ref").metrics)
    assert reference[-1]["routing_mismatch"] > 0
    with monkeypatch.context() as m:
        interrupt_on_append(m, 6)  # while writing update 5's row; the checkpoint is at update 4
        with pytest.raises(KeyboardInterrupt):
            train(config, tmp_path / "store")
    assert RunStore(tmp_path / "store").find(config).read_state()["update"] == 4
    assert untimed(train(config, tmp_path / "store").metrics) == reference
