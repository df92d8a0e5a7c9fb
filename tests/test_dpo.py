"""Online DPO (rlbook/dpo.py): the pairing rule and hand-computed losses and gradients."""
import math

import pytest
import torch

from rlbook.dpo import dpo_loss, dpo_pairs, sequence_logp

F64 = torch.float64


def test_pairs_first_best_and_first_worst_per_group_and_none_for_uniform_groups():
    rewards = [0.0, 1.0, 1.0, 0.0,   # group 0: chosen row 1, rejected row 0
               1.0, 1.0, 1.0, 1.0,   # group 1: all correct, no pair
               0.0, 0.0, 0.0, 0.0,   # group 2: all wrong, no pair
               1.0, 0.5, 0.0, 0.0]   # group 3: chosen row 12, rejected row 14
    chosen, rejected = dpo_pairs(rewards, 4)
    assert chosen.tolist() == [1, 12] and rejected.tolist() == [0, 14]


def test_pairs_reject_bad_shapes():
    with pytest.raises(ValueError, match="group_size"):
        dpo_pairs([1.0, 0.0, 1.0], 2)
    with pytest.raises(ValueError, match="group_size"):
        dpo_pairs([1.0, 0.0], 1)


def test_sequence_logp_ignores_padding():
    logp = torch.tensor([[-1.0, -2.0, float("-inf")], [-0.5, float("nan"), 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]], dtype=F64)
    assert sequence_logp(logp, mask).tolist() == [-3.0, -0.5]


def test_dpo_loss_and_gradient_by_hand():
    # two pairs: (row 0 chosen, row 1 rejected), (row 2 chosen, row 3 rejected); one response token each
    logp = torch.tensor([[-1.0], [-2.0], [-3.0], [-1.0]], dtype=F64, requires_grad=True)
    ref = torch.tensor([[-1.5], [-1.5], [-2.0], [-2.0]], dtype=F64)
    mask = torch.ones(4, 1, dtype=F64)
    beta = 0.5
    loss = dpo_loss(logp, ref, mask, torch.tensor([0, 2]), torch.tensor([1, 3]), beta=beta)
    loss.backward()
    # margins: (0.5 - (-0.5)) = 1 and (-1 - 1) = -2; z = beta * margin = 0.5, -1
    z = [0.5, -1.0]
    expected = -(math.log(1 / (1 + math.exp(-z[0]))) + math.log(1 / (1 + math.exp(-z[1])))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    # d/dlogp_w = -beta * sigmoid(-z) / n_pairs, d/dlogp_l = +beta * sigmoid(-z) / n_pairs
    s = [1 / (1 + math.exp(zz)) for zz in z]
    want = [[-beta * s[0] / 2], [beta * s[0] / 2], [-beta * s[1] / 2], [beta * s[1] / 2]]
    torch.testing.assert_close(logp.grad, torch.tensor(want, dtype=F64), rtol=1e-9, atol=1e-12)


def test_dpo_at_the_reference_is_log2_and_no_pair_is_zero():
    logp = torch.tensor([[-1.0, -0.2], [-2.0, -0.3]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]], dtype=F64)
    loss = dpo_loss(logp, logp.detach().clone(), mask, torch.tensor([0]), torch.tensor([1]))
    assert loss.item() == pytest.approx(math.log(2))
    empty = torch.tensor([], dtype=torch.long)
    zero = dpo_loss(logp, logp.detach(), mask, empty, empty)
    zero.backward()
    assert zero.item() == 0.0 and torch.count_nonzero(logp.grad) == 0


def test_dpo_rejects_bad_beta():
    logp = torch.zeros(2, 1, dtype=F64)
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(logp, logp, torch.ones(2, 1), torch.tensor([0]), torch.tensor([1]), beta=0.0)


# ---- the trainer's objective "dpo" (rlbook.dpo.online_dpo_loss, through rlbook.losspath) ----

from rlbook.config import RunConfig  # noqa: E402
from rlbook.losspath import loss_and_tokens, token_logprobs  # noqa: E402
from rlbook.models import add_lora, build_model  # noqa: E402
from rlbook.rollout import Rollout  # noqa: E402
from rlbook.trainer import resolve  # noqa: E402
from test_trainer import per_update, shaped, tiny, train  # noqa: E402,F401 (fixture)

GROUPS, G, P, C = 3, 4, 5, 6


def grouped_rollout(vocab: int) -> Rollout:
    """3 groups of 4: group 0 has a pair (rows 1 chosen, 0 rejected), group 1 is all correct (no pair), group 2 has
    a pair (rows 8 chosen, 10 rejected); responses of mixed lengths."""
    g = torch.Generator().manual_seed(1)
    prompt_mask = torch.ones(GROUPS * G, P, dtype=torch.long)
    prompt_ids = torch.randint(1, vocab, (GROUPS, P), generator=g).repeat_interleave(G, 0)
    lengths = torch.randint(1, C + 1, (GROUPS * G,), generator=g)
    response_mask = (torch.arange(C)[None] < lengths[:, None]).float()
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.5])
    return Rollout(prompt_ids, prompt_mask, torch.randint(1, vocab, (GROUPS * G, C), generator=g), response_mask,
                   torch.zeros(GROUPS * G, C), rewards, rewards == 1.0, [""] * 12, [{}] * 12, 0)


@pytest.fixture(scope="module")
def adapted():
    torch.manual_seed(0)
    model = add_lora(build_model("nano-tiny", seed=0)[0])
    for name, p in model.named_parameters():  # LoRA's B starts at 0: make the policy differ from the reference
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    return model


def test_reference_is_the_model_with_its_adapters_off(adapted):
    batch = grouped_rollout(adapted.config.vocab_size)
    config = tiny(objective="dpo", group_size=G, objective_params={"beta": 0.3}, engine="reference")
    advantages = torch.ones(GROUPS * G, C)
    loss, logp, _, flags = loss_and_tokens(adapted, batch, advantages, None, *resolve(config, torch.device("cpu")))
    with torch.no_grad(), adapted.disable_adapter():
        ref_logp, _ = token_logprobs(adapted, batch, config.temperature)
    expected = dpo_loss(logp, ref_logp, batch.response_mask, torch.tensor([1, 8]), torch.tensor([0, 10]), beta=0.3)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert not torch.equal(logp.detach(), ref_logp)  # the adapters matter, so the check above is not vacuous
    assert not any(f.any() for f in flags.values())  # DPO clips and masks nothing
    loss.backward()
    grads = {name: p.grad for name, p in adapted.named_parameters() if p.requires_grad}
    assert all("lora" in name for name in grads) and any(g.abs().sum() > 0 for g in grads.values())


@pytest.mark.usefixtures("shaped")
def test_first_update_of_a_run_is_log_two_then_the_margin_moves(tmp_path):
    """At LoRA's init the policy is its reference, so every pair's margin is 0 and the loss is log 2."""
    rows = per_update(train(tiny(objective="dpo", total_updates=4, lr=0.05), tmp_path).metrics)
    assert all(r["zero_std_frac"] < 1 for r in rows), "the shaped task's rewards should give every batch a pair"
    assert rows[0]["loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert any(r["loss"] != pytest.approx(math.log(2), abs=1e-6) for r in rows[1:] if r["zero_std_frac"] < 1)


@pytest.mark.parametrize("changes, match", [
    ({"finetune": "full"}, "finetune"), ({"micro_batch_size": 2}, "micro_batch_size"),
    ({"ar_alpha": 0.3}, "ar_alpha"), ({"lopti_eta": 0.5}, "lopti_eta"),
    ({"objective_params": {"tau": 0.04}}, "valid parameters: beta"),
    ({"objective_params": {"beta": 0}}, "beta=0"), ({"objective_params": {"beta": True}}, "beta=True"),
])
def test_bad_dpo_configs_are_refused(changes, match):
    with pytest.raises(ValueError, match=match):
        RunConfig(**{**tiny().__dict__, "objective": "dpo", **changes})


def test_unknown_objective_lists_dpo():
    with pytest.raises(ValueError, match="dpo"):
        tiny(objective="ppo")
