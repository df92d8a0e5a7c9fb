"""Online and semi-online DPO on grouped rollouts: pairs from the generator's own samples and their loss.

Online / semi-online DPO on grouped rollouts ("Bridging Offline and Online Reinforcement Learning for LLMs",
arXiv 2506.21495, which trains DPO on pairs drawn from the generator's own samples).

Pairing rule (`dpo_pairs`): in each group of G completions of one prompt, the chosen completion is the first (in
sampling order) with the group's highest reward and the rejected one the first with its lowest reward; a group whose
rewards are all equal (all correct or all wrong) yields no pair and contributes nothing.

Loss (`dpo_loss`, DPO, arXiv 2305.18290, Eq. 7), averaged over the pairs of the batch:
    L = -mean_pairs log sigmoid(beta * [(log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))])
with log pi(y) the sum of the response tokens' log-probs. pi_ref is the starting model (with LoRA: the adapters
switched off). A batch with no pair has loss 0 (still differentiable, gradient 0).
"""
import torch
import torch.nn.functional as F

from .objective_inputs import check_number
from .objectives import FLAG_KEYS

DPO_DEFAULTS = {"beta": 0.1}  # the trainer's objective "dpo": objective_params may set beta (> 0)


def check_dpo_params(params):
    """objective_params of the trainer's "dpo" objective: only beta, a number > 0."""
    unknown = sorted(set(params) - set(DPO_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for objective 'dpo'; valid parameters: beta")
    check_number("beta", params.get("beta", DPO_DEFAULTS["beta"]), lambda v: v > 0, "> 0")


def dpo_pairs(rewards, group_size):
    """(chosen, rejected) row indices, one pair per group whose rewards differ; `rewards` is [B], B = groups * G."""
    rewards = torch.as_tensor(rewards)
    if group_size < 2 or rewards.ndim != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be 1-D with a multiple of group_size >= 2 entries; got shape "
                         f"{tuple(rewards.shape)} and group_size={group_size}")
    grouped = rewards.view(-1, group_size)
    best, worst = grouped.argmax(dim=1), grouped.argmin(dim=1)  # first occurrence of the max / min
    has_pair = grouped.max(dim=1).values > grouped.min(dim=1).values
    offset = torch.arange(grouped.shape[0]) * group_size
    return (best + offset)[has_pair], (worst + offset)[has_pair]


def sequence_logp(token_logp, mask):
    """Sum of the response tokens' log-probs per row ([B, T] -> [B]); padding (mask 0) never leaks in."""
    return torch.where(mask.bool(), token_logp, torch.zeros_like(token_logp)).sum(dim=1)


def dpo_loss(logp, ref_logp, mask, chosen, rejected, *, beta=0.1):
    """DPO loss over the given pairs (DPO Eq. 7, mean over pairs); logp/ref_logp are per-token [B, T]."""
    check_dpo_params({"beta": beta})
    seq = sequence_logp(logp, mask) - sequence_logp(ref_logp.detach(), mask)
    if len(chosen) == 0:
        return logp.sum() * 0.0
    return -F.logsigmoid(beta * (seq[chosen] - seq[rejected])).mean()


def online_dpo_loss(logp, ref_logp, mask, rewards, group_size: int, params: dict):
    """(loss, flags) of the trainer's "dpo" objective on a mini-batch of whole groups: dpo_loss on the pairs dpo_pairs
    draws from each group's rewards, beta from params; no token is clipped or masked (the flags the policy-gradient
    objectives report are all False)."""
    chosen, rejected = dpo_pairs(rewards, group_size)
    mask = mask.to(logp.device)
    loss = dpo_loss(logp, ref_logp, mask, chosen.to(logp.device), rejected.to(logp.device),
                    **{**DPO_DEFAULTS, **params})
    return loss, {key: torch.zeros_like(mask, dtype=torch.bool) for key in FLAG_KEYS}

