"""Group-relative advantages (GRPO, arXiv 2402.03300 eq. 3): A_i = (R_i - mean_g R) / (std_g R + 1e-6)."""
from __future__ import annotations

import torch


def check_group_size(group_size: int) -> None:
    """A group-relative advantage compares at least 2 completions of a prompt (RunConfig.group_size)."""
    if group_size < 2:
        raise ValueError(f"group_size={group_size}: a group-relative advantage needs at least 2 completions per "
                         "prompt (one completion has no group to compare with)")


def group_advantages(rewards: torch.Tensor, group_size: int, normalize_std: bool = True) -> torch.Tensor:
    """Per-sample advantages for rewards laid out in consecutive groups of `group_size` ([B] -> [B])."""
    check_group_size(group_size)
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    groups = rewards.view(-1, group_size)
    # identical rewards give exactly 0: float rounding in the mean (1e-8) over std + 1e-6 would otherwise be -0.01
    tied = groups.max(-1, keepdim=True).values == groups.min(-1, keepdim=True).values
    centred = torch.where(tied, 0.0, groups - groups.mean(-1, keepdim=True))
    if normalize_std:  # the "no-std" variant (Dr. GRPO) keeps only the centring
        centred = centred / (groups.std(-1, keepdim=True) + 1e-6)
    return centred.reshape(-1)


def zero_variance_fraction(rewards: torch.Tensor, group_size: int) -> float:
    """Fraction of groups whose rewards are all equal: they carry no gradient."""
    groups = rewards.view(-1, group_size)
    return (groups.max(-1).values == groups.min(-1).values).float().mean().item()
