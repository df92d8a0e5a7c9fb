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
