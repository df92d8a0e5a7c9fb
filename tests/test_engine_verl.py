"""verl 0.9.1's own advantage and loss code on rlbook's toy batch (rlbook.export.toy_batch), with the settings the
exports write (composed with verl's Hydra config, its actor config built from them), against rlbook's: group
advantages, the token-mean clipped surrogate with both clip bounds binding, GSPO's sequence ratio, and rlbook's own
losses registered in verl (rlbook.engine_plugins.verl_losses): M2PO's Algorithm 1, the released cap, Advantage
Reweighting."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from check_exports import compose_verl, use_engines  # noqa: E402

from rlbook.experiments import grpo_from_scratch, lopti_run, stale_run  # noqa: E402
from rlbook.export import export_text  # noqa: E402
from rlbook.export.toy_batch import batch, rlbook_advantages, rlbook_loss  # noqa: E402
from rlbook.objectives import advantage_reweight, policy_loss  # noqa: E402

use_engines()
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_policy_loss_fn  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

import rlbook.engine_plugins.verl_losses  # noqa: E402,F401  (registers rlbook's losses)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("verl")


def actor_of(config, work: Path):
    """verl's actor config (the dataclass its workers build) from the export of an rlbook config."""
    path = work / f"{config.name}.verl.sh"
    path.write_text(export_text(config, "verl"))
    _, _, composed = compose_verl(path, work)
    return omega_conf_to_dataclass(composed.actor_rollout_ref.actor)


def verl_loss(actor, advantages=None, requires_grad=False):
    """verl's policy loss of `actor` (by its loss_mode, from verl's registry) on the toy batch, and log pi."""
    toy = batch()
    logp = toy["logp"].clone().requires_grad_(requires_grad)
    advantages = rlbook_advantages()[:, None].expand_as(logp) if advantages is None else advantages
    loss, _ = get_policy_loss_fn(actor.policy_loss.loss_mode)(
        old_log_prob=toy["blogp"], log_prob=logp, advantages=advantages, response_mask=toy["mask"],
        loss_agg_mode=actor.loss_agg_mode, config=actor, rollout_is_weights=None)
    return loss, logp


def test_group_advantages_are_rlbooks():
    toy = batch()
    rewards = torch.zeros_like(toy["blogp"])
    last = toy["mask"].sum(1) - 1
    rewards[torch.arange(4), last] = toy["rewards"]  # verl's token-level scores: the reward on the last token
    tied = torch.zeros_like(rewards)  # a second group, every reward 1
    tied[torch.arange(4), last] = 1.0
    advantages, _ = compute_grpo_outcome_advantage(torch.cat([rewards, tied]), torch.cat([toy["mask"]] * 2).float(),
                                                   np.array([0] * 4 + [1] * 4), epsilon=1e-6)
    assert advantages[:4][toy["mask"]].tolist() == pytest.approx(
        rlbook_advantages()[:, None].expand(4, 6)[toy["mask"]].tolist(), abs=1e-12)
    assert advantages[:4, 0].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    assert advantages[4:].abs().max() == 0  # a tied group: exactly 0, as rlbook's


def test_clipped_token_mean_with_both_bounds_binding_is_rlbooks(work):
    ours, flags = rlbook_loss("grpo")
    assert flags["clipped_low"].any() and flags["clipped_high"].any()
    actor = actor_of(grpo_from_scratch("cpu", 0), work)
    assert actor.policy_loss.loss_mode == "vanilla" and actor.loss_agg_mode == "token-mean"
    assert float(verl_loss(actor)[0]) == pytest.approx(ours, abs=1e-12)
    unclipped = actor_of(stale_run("cpu", "no_clip", 48), work)
    assert float(verl_loss(unclipped)[0]) == pytest.approx(rlbook_loss("no_clip")[0], abs=1e-12)


def test_gspo_sequence_ratio_is_rlbooks(work):
    ours, flags = rlbook_loss("gspo")
    assert flags["clipped_low"].any() and flags["clipped_high"].any()
    actor = actor_of(stale_run("cpu", "gspo", 48), work)
    assert (actor.policy_loss.loss_mode, actor.loss_agg_mode) == ("gspo", "seq-mean-token-mean")
    assert float(verl_loss(actor)[0]) == pytest.approx(ours, abs=1e-12)


@pytest.mark.parametrize("objective, params", [("m2po", {}), ("m2po", {"tau": 0.02}), ("m2po_cap", {})])
def test_rlbooks_m2po_registered_in_verl_is_rlbooks(objective, params, work):
    config = stale_run("cpu", objective, 48, objective_params=params)
    actor = actor_of(config, work)
    assert actor.policy_loss.loss_mode == f"rlbook_{objective}" and actor.policy_loss.tau == params.get("tau", 0.04)
    loss, logp = verl_loss(actor, requires_grad=True)
    toy = batch()
    mine = toy["logp"].clone().requires_grad_(True)
    ours, flags = policy_loss(objective, mine, toy["blogp"], rlbook_advantages()[:, None].expand(4, 6), toy["mask"],
                              **params)
    if objective == "m2po":
        assert flags["masked"].any()  # the toy batch's second moment exceeds tau
    assert float(loss.detach()) == pytest.approx(float(ours.detach()), abs=1e-12)
    loss.backward()
    ours.backward()
    assert torch.allclose(logp.grad, mine.grad, atol=1e-12)  # the mask is detached in both


def test_advantage_reweighting_registered_in_verl_is_rlbooks(work):
    config = lopti_run("cpu", "ar")
    actor = actor_of(config, work)
    assert actor.policy_loss.loss_mode == "rlbook_ar" and actor.policy_loss.ar_alpha == config.ar_alpha
    toy = batch()
    advantages = rlbook_advantages()[:, None].expand(4, 6)
    reweighted = advantage_reweight(advantages, toy["blogp"], config.ar_alpha)
    ours, _ = policy_loss("grpo", toy["logp"], toy["blogp"], reweighted, toy["mask"])
    assert float(verl_loss(actor, advantages)[0]) == pytest.approx(float(ours), abs=1e-12)


def test_rlbooks_losses_need_their_config_class(work):
    actor = actor_of(grpo_from_scratch("cpu", 0), work)
    with pytest.raises(ValueError, match="RlbookPolicyLossConfig"):
        get_policy_loss_fn("rlbook_m2po")(batch()["blogp"], batch()["logp"], batch()["blogp"], batch()["mask"],
                                          config=actor)
