"""AReaL 1.0.4's own advantage and loss code on rlbook's toy batch (rlbook.export.toy_batch), with the settings the
exports write (read by AReaL's load_expr_config): PPOActor._compute_advantages (reward and advantage normalisation,
which log-probs the ratio uses) and grpo_loss_fn (token-mean clipped loss with both bounds binding, the decoupled loss,
truncated importance weights, GSPO, AReaL's M2PO), against rlbook's. Where AReaL computes another quantity by design,
its value is the one the export's header quotes (rlbook.export.toy_batch.AREAL_RESULTS)."""
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from check_exports import import_areal, load_areal  # noqa: E402

from rlbook.experiments import grpo_from_scratch, stale_run  # noqa: E402
from rlbook.export import export_text  # noqa: E402
from rlbook.export.toy_batch import AREAL_RESULTS, LENGTHS, batch, rlbook_advantages, rlbook_loss  # noqa: E402

actor_module = import_areal("areal.trainer.ppo.actor")
PROMPT = 1  # prompt tokens before each response


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("areal")


def actor_config(config, work: Path):
    """AReaL's PPOActorConfig of the export of an rlbook config with the toy batch's group size, as AReaL's entry
    point reads it."""
    path = work / f"{config.name}.areal.yaml"
    path.write_text(export_text(config.replace(group_size=len(LENGTHS)), "areal"))
    return load_areal(path, work).actor


def token_layout(rows: torch.Tensor) -> torch.Tensor:
    """[B, T] per response token -> [B, PROMPT + T] at the tokens' own positions (AReaL's inference log-probs)."""
    return torch.cat([torch.zeros(rows.shape[0], PROMPT, dtype=rows.dtype), rows], dim=1)


def aligned(rows: torch.Tensor) -> torch.Tensor:
    """[B, T] -> [B, PROMPT + T] at the positions that predict each token (AReaL's training forward's log-probs)."""
    return torch.cat([torch.zeros(rows.shape[0], PROMPT - 1, dtype=rows.dtype), rows,
                      torch.zeros(rows.shape[0], 1, dtype=rows.dtype)], dim=1)


def advantaged(config) -> dict:
    """The toy batch after AReaL's PPOActor._compute_advantages with config (a PPOActorConfig)."""
    toy = batch()
    width = PROMPT + toy["mask"].shape[1]
    lengths = torch.tensor(LENGTHS)
    data = {"input_ids": torch.zeros(4, width, dtype=torch.long),
            "attention_mask": (torch.arange(width)[None] < PROMPT + lengths[:, None]).long(),
            "loss_mask": token_layout(toy["mask"].long()), "rewards": toy["rewards"].float(),
            "logprobs": token_layout(toy["blogp"].float())}
    if config.recompute_logprob:
        data["prox_logp"] = aligned(toy["prox_logp"].float())
    return actor_module.PPOActor(config, engine=None)._compute_advantages(data)


def areal_loss(config) -> float:
    """AReaL's loss (grpo_loss_fn with config's settings, as PPOActor._ppo_update calls it) on the toy batch."""
    data = advantaged(config)
    logp = aligned(batch()["logp"].float())
    return float(actor_module.grpo_loss_fn(
        logp, torch.zeros_like(logp), data, eps_clip=config.eps_clip, eps_clip_higher=config.eps_clip_higher,
        c_clip=config.c_clip, rejection_sampling=config.rejection_sampling, m2_threshold=config.m2_threshold,
        importance_sampling_level=config.importance_sampling_level, current_version=None,
        prox_logp_method=config.prox_logp_method, use_sapo_loss=config.use_sapo_loss,
        sapo_tau_pos=config.sapo_tau_pos, sapo_tau_neg=config.sapo_tau_neg,
        use_decoupled_loss=config.use_decoupled_loss))


def test_group_reward_norm_gives_rlbooks_advantages(work):
    config = actor_config(grpo_from_scratch("cpu", 0), work)
    data = advantaged(config)
    mask = data["loss_mask"].bool()
    expected = aligned(rlbook_advantages()[:, None].expand(4, 6).float() * batch()["mask"])
    assert torch.allclose(data["advantages"][mask], expected[mask], atol=1e-6)
    assert data["advantages"][mask].unique().tolist() == pytest.approx([-0.5, 1.5], abs=1e-5)


def test_token_level_adv_norm_weights_by_length(work):
    """What the exports wrote before (adv_norm at group level): token-level normalisation, 2.92 / -0.32 here."""
    from areal.api.cli_args import NormConfig

    config = actor_config(grpo_from_scratch("cpu", 0), work)
    old = type(config)(**{**config.__dict__, "reward_norm": None,
                          "adv_norm": NormConfig(mean_level="group", std_level="group", group_size=4, eps=1e-6)})
    data = advantaged(old)
    first, second = data["advantages"][0, 0], data["advantages"][1, 0]
    assert (round(float(first), 2), round(float(second), 2)) == (2.92, -0.32)


def test_stale_ratio_is_against_the_behaviour_policy(work):
    config = actor_config(stale_run("cpu", "grpo", 48), work)
    assert not config.recompute_logprob
    data = advantaged(config)
    mask = data["loss_mask"].bool()
    assert torch.equal(data["logprobs"][mask], aligned(batch()["blogp"].float())[mask])  # not overwritten


@pytest.mark.parametrize("objective, params", [("grpo", {}), ("no_clip", {}), ("decoupled", {}),
                                               ("tis", {"tis_cap": 1.2}), ("m2po_areal", {})])
def test_losses_are_rlbooks(objective, params, work):
    ours, flags = rlbook_loss(objective, **params)
    if objective in ("grpo", "decoupled"):
        assert flags["clipped_low"].any() and flags["clipped_high"].any()
    if objective == "m2po_areal":
        assert flags["masked"].any()
    config = actor_config(stale_run("cpu", objective, 48, objective_params=params), work)
    assert areal_loss(config) == pytest.approx(ours, abs=1e-6)


@pytest.mark.parametrize("objective", ["gspo", "m2po"])
def test_by_design_differences_are_the_headers(objective, work):
    config = actor_config(stale_run("cpu", objective, 48), work)
    theirs = areal_loss(config)
    assert theirs == pytest.approx(AREAL_RESULTS[objective], abs=5e-5)
    assert abs(theirs - rlbook_loss(objective)[0]) > 1e-3  # a different quantity, as the header says


def test_lora_reaches_the_inference_server(work):
    path = work / "lora.areal.yaml"
    path.write_text(export_text(grpo_from_scratch("cpu", 0), "areal"))
    config = load_areal(path, work)
    assert config.actor.use_lora and config.rollout.use_lora and config.sglang.enable_lora
    assert config.sglang.max_lora_rank == config.actor.lora_rank == 16 and config.actor.lora_alpha == 32
