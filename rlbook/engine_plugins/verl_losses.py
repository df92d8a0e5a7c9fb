"""rlbook's M2PO (Algorithm 1 and the released code's cap) and Advantage Reweighting as verl 0.9.1 policy losses.

verl looks a policy loss up by name in its registry (verl/trainer/ppo/core_algos.py, register_policy_loss and
get_policy_loss_fn) and calls it on one micro-batch. Importing this module registers:

  rlbook_m2po      M2PO's Algorithm 1 (rlbook.objectives.m2po): -M r A, M the second-moment mask, no clip
  rlbook_m2po_cap  the released code's cap (rlbook.objectives.m2po_cap): the clipped surrogate at exp(-c), exp(c)
  rlbook_ar        Advantage Reweighting (rlbook.objectives.advantage_reweight), then verl's own clipped loss

Their parameters (tau, ar_alpha) are fields of RlbookPolicyLossConfig, verl's PolicyLossConfig with two more, which an
export names as the policy loss's config class (so building verl's actor config imports this module):

    actor_rollout_ref.actor.policy_loss._target_=rlbook.engine_plugins.verl_losses.RlbookPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=rlbook_m2po
    +actor_rollout_ref.actor.policy_loss.tau=0.04

The ratio is verl's, pi / pi_old with pi_old the log-probs verl passes as old_log_prob; the mask covers the batch verl
passes (one micro-batch on one GPU); the per-token loss is aggregated by verl's agg_loss over verl's global token count,
so masked tokens stay in the denominator, as in Algorithm 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from verl.trainer.ppo.core_algos import agg_loss, compute_policy_loss_vanilla, register_policy_loss
from verl.workers.config import PolicyLossConfig

from ..objectives import _clipped_surrogate, _m2po_cap, advantage_reweight, m2po_keep_mask


@dataclass
class RlbookPolicyLossConfig(PolicyLossConfig):
    """verl's policy-loss config with the parameters of rlbook's losses."""

    tau: float = 0.04  # M2PO's second-moment threshold
    ar_alpha: float = 0.0  # Advantage Reweighting's alpha


def rlbook_params(config) -> RlbookPolicyLossConfig:
    if not isinstance(getattr(config, "policy_loss", None), RlbookPolicyLossConfig):
        raise ValueError("rlbook's verl losses read their parameters from actor_rollout_ref.actor.policy_loss: set its "
                         f"_target_={__name__}.RlbookPolicyLossConfig (python -m rlbook export --to verl writes it)")
    return config.policy_loss


def verl_loss(name: str):
    """Register `term(log_ratio, advantages, mask, params) -> (per-token loss, metrics)` as verl's policy loss `name`:
    verl's arguments in, verl's aggregation (agg_loss, its global token count) out."""
    def register(term):
        @register_policy_loss(name)
        def loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
                 rollout_is_weights=None):
            if rollout_is_weights is not None:
                raise ValueError(f"{name} takes no rollout-correction weights "
                                 "(algorithm.rollout_correction.rollout_is)")
            mask = response_mask.bool()
            per_token, metrics = term(log_prob - old_log_prob, advantages, mask, rlbook_params(config))
            return agg_loss(loss_mat=per_token, loss_mask=mask, loss_agg_mode=loss_agg_mode,
                            **config.global_batch_info), metrics
        return term
    return register


@verl_loss("rlbook_m2po")
def m2po(log_ratio, advantages, mask, params):
    # M2PO (arXiv 2510.01161) Algorithm 1, as rlbook.objectives.m2po: the loss -M r A
    keep = m2po_keep_mask(log_ratio.detach(), advantages, mask, params.tau)
    masked = (mask & ~keep).sum() / mask.sum().clamp(min=1)
    return -(keep * torch.exp(log_ratio) * advantages), {"actor/m2po_masked_frac": float(masked)}


@verl_loss("rlbook_m2po_cap")
def m2po_cap(log_ratio, advantages, mask, params):
    # Infini-AI-Lab/M2PO's released rule, as rlbook.objectives.m2po_cap: clip(r, e^-c, e^c), c the largest cap in budget
    cap = _m2po_cap(log_ratio.detach(), advantages, mask, params.tau).to(log_ratio.dtype)
    term, _ = _clipped_surrogate(torch.exp(log_ratio), advantages, torch.exp(-cap), torch.exp(cap))
    return -term, {"actor/m2po_cap_c": float(cap)}


@register_policy_loss("rlbook_ar")
def ar(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
       rollout_is_weights=None):
    """Advantage Reweighting (arXiv 2505.12929): A_t = (alpha p_old + 1 - alpha) A, then verl's clipped loss."""
    reweighted = advantage_reweight(advantages, old_log_prob, rlbook_params(config).ar_alpha)
    return compute_policy_loss_vanilla(old_log_prob, log_prob, reweighted, response_mask, loss_agg_mode, config,
                                       rollout_is_weights)
