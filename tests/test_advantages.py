import pytest
import torch

from rlbook.advantages import group_advantages, zero_variance_fraction


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.1, 0.1, 0.1, 0.1])
    std = torch.tensor([1.0, 0.0, 0.0, 1.0]).std().item()
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5]) / (std + 1e-6)
    torch.testing.assert_close(group_advantages(rewards, 4)[:4], expected)
    torch.testing.assert_close(group_advantages(rewards, 4, normalize_std=False)[:4], torch.tensor([0.5, -0.5, -0.5, 0.5]))


def test_identical_rewards_give_exactly_zero():
    # mean(0.1 x 8) is not exactly 0.1 in float32; dividing that rounding error by std + 1e-6 gave -0.0075
    rewards = torch.full((16,), 0.1)
    assert torch.equal(group_advantages(rewards, 8), torch.zeros(16))
    assert zero_variance_fraction(rewards, 8) == 1.0


def test_zero_variance_fraction_counts_groups():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.3, 0.3])
    assert zero_variance_fraction(rewards, 2) == pytest.approx(2 / 3)


def test_groups_must_divide():
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages(torch.zeros(6), 4)


def test_a_group_of_one_is_refused_not_nan():
    with pytest.raises(ValueError, match="at least 2"):
        group_advantages(torch.tensor([1.0, 0.0]), 1)
