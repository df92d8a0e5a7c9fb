"""verl 0.9.1: the Hydra overrides of `python3 -m verl.trainer.main_ppo` as a bash script.

The overrides compose with verl's own config tree (verl/trainer/config/ppo_trainer.yaml, ppo_megatron_trainer.yaml for
router replay) and pass `verl.utils.config.validate_config` and verl's config dataclasses (bench/check_exports.py
checks every export so). M2PO (Algorithm 1 and the released cap) and Advantage Reweighting are rlbook's policy losses
registered in verl's registry (rlbook.engine_plugins.verl_losses): the export names rlbook's policy-loss config class,
which loads them, and the loss by name.
"""
from __future__ import annotations

from ..config import RunConfig
from ..trl_backend import NO_CLIP_EPSILON, clip_bounds
from .common import MODEL_PLACEHOLDER, Export, common_lacks, integer_alpha, model_name, refuse_dpo, set_lengths

VERL_VERSION = "0.9.1"
ALGORITHM = "verl/trainer/config/algorithm.py"
DATA = "verl/trainer/config/data/legacy_data.yaml"
TRAINER = "verl/trainer/config/ppo_trainer.yaml"
MODEL = "verl/workers/config/model.py"
ROLLOUT = "verl/workers/config/rollout.py"
ACTOR = "verl/workers/config/actor.py"
OPTIMIZER = "verl/workers/config/optimizer.py"
ENGINE = "verl/workers/config/engine.py"
PLUGIN = "rlbook.engine_plugins.verl_losses"
# rlbook objective -> the registered policy loss that computes it (rlbook's own in PLUGIN, prefixed rlbook_)
LOSS_MODES = {"grpo": "vanilla", "no_clip": "vanilla", "gspo": "gspo", "tis": "vanilla", "m2po": "rlbook_m2po",
              "m2po_cap": "rlbook_m2po_cap"}
CHECKED_BY = ("composed with verl's Hydra config (verl/trainer/config), verl.utils.config.validate_config, its "
              "config dataclasses (actor, rollout, model, algorithm) built and the policy loss looked up in its "
              "registry")


def verl_export(config: RunConfig) -> Export:
    refuse_dpo(config, "verl", f"verl {VERL_VERSION}'s trainers are PPO-style (verl.trainer.main_ppo) and SFT; it has "
                               "no DPO trainer")
    out = Export("verl", VERL_VERSION, CHECKED_BY)
    actor, rollout, model = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.model"
    if config.objective not in LOSS_MODES:
        out.lacks.append(lack_of(config.objective))
    loss_mode = LOSS_MODES.get(config.objective, "vanilla")
    if config.ar_alpha:
        if loss_mode != "vanilla" or config.objective == "tis":
            out.lacks.append(f"ar_alpha={config.ar_alpha}: rlbook's verl loss rlbook_ar reweights the advantages "
                             f"for the clipped surrogate only, not for {config.objective}")
        else:
            loss_mode = "rlbook_ar"
    low, high = clip_bounds(config)
    out.set("algorithm.adv_estimator", "grpo", ALGORITHM)
    out.set("algorithm.norm_adv_by_std_in_grpo", config.normalize_adv_std, ALGORITHM)
    out.set("algorithm.use_kl_in_reward", False, ALGORITHM)
    out.set("data.train_batch_size", config.prompts_per_step, DATA)
    set_lengths(out, config, "data.max_response_length", DATA)
    out.set("data.seed", config.seed, DATA)
    out.set(f"{model}.path", model_name(config), MODEL)
    if config.finetune == "lora":
        out.set(f"{model}.lora_rank", config.lora_rank, MODEL)
        out.set(f"{model}.lora_alpha", integer_alpha(config, "verl"), MODEL)
        out.set(f"{model}.target_modules", "all-linear", MODEL)
    # one GPU, each update's whole mini-batch in one micro-batch (rlbook's micro_batch_size when it sets one)
    out.set("trainer.nnodes", 1, TRAINER)
    out.set("trainer.n_gpus_per_node", 1, TRAINER)
    mini = config.prompts_per_step // config.updates_per_step  # prompts; verl multiplies by rollout.n
    micro = config.micro_batch_size or mini * config.group_size
    out.set(f"{rollout}.name", "sglang", ROLLOUT)
    out.set(f"{rollout}.n", config.group_size, ROLLOUT)
    out.set(f"{rollout}.temperature", config.temperature, ROLLOUT)
    out.set(f"{rollout}.top_p", 1.0, ROLLOUT)
    out.set(f"{rollout}.top_k", -1, ROLLOUT)
    out.set(f"{rollout}.dtype", config.rollout_dtype, ROLLOUT)
    out.set(f"{rollout}.log_prob_micro_batch_size_per_gpu", micro, ROLLOUT)
    out.set(f"{actor}.ppo_mini_batch_size", mini, ACTOR)
    out.set(f"{actor}.ppo_micro_batch_size_per_gpu", micro, ACTOR)
    out.yours.append("the machine: trainer.nnodes, trainer.n_gpus_per_node (written for one GPU), "
                     f"{actor}.ppo_micro_batch_size_per_gpu and {rollout}.log_prob_micro_batch_size_per_gpu (written "
                     f"as {micro}: one update's sequences in one pass) for your GPUs' memory; {rollout}.name "
                     "(written sglang; with vllm, validate_config also checks the LoRA rank against vLLM's, which "
                     "needs "
                     "vLLM installed) and its server settings")
    out.yours.append(f"the model: {model}.path (the script reads $MODEL_PATH)" if model_name(config) ==
                     MODEL_PLACEHOLDER else f"the model: {model}.path is the preset's checkpoint")
    out.yours.append("the data and reward: data.train_files, data.val_files (parquet with a prompt column) and your "
                     "reward function (reward.custom_reward_function.path)")
    out.set(f"{actor}.ppo_epochs", config.epochs, ACTOR)
    out.set(f"{actor}.shuffle", False, ACTOR)
    out.set(f"{actor}.use_kl_loss", False, ACTOR)
    out.set(f"{actor}.entropy_coeff", 0, ACTOR)
    out.set(f"{actor}.clip_ratio_low", low, ACTOR)
    out.set(f"{actor}.clip_ratio_high", high, ACTOR)
    dual = config.objective_params.get("dual_clip")
    # verl's vanilla loss always applies the dual clip at clip_ratio_c (default 3.0, must be > 1): rlbook's GRPO
    # applies it only when dual_clip is set, so otherwise it goes where no ratio reaches
    out.set(f"{actor}.clip_ratio_c", dual if dual is not None else NO_CLIP_EPSILON, ACTOR)
    if loss_mode.startswith("rlbook_"):
        out.set(f"{actor}.policy_loss._target_", f"{PLUGIN}.RlbookPolicyLossConfig", PLUGIN.replace(".", "/") + ".py")
        out.set(f"{model}.external_lib", PLUGIN, MODEL)
        key = "ar_alpha" if loss_mode == "rlbook_ar" else "tau"
        value = config.ar_alpha if key == "ar_alpha" else config.objective_params.get("tau", 0.04)
        out.set(f"+{actor}.policy_loss.{key}", value, PLUGIN.replace(".", "/") + ".py")
    out.set(f"{actor}.policy_loss.loss_mode", loss_mode, ACTOR)
    out.set(f"{actor}.loss_agg_mode", "seq-mean-token-mean" if config.objective == "gspo" else "token-mean", ACTOR)
    out.set(f"{actor}.optim.lr", config.lr, OPTIMIZER)
    out.set(f"{actor}.optim.weight_decay", config.weight_decay, OPTIMIZER)
    out.set(f"{actor}.optim.clip_grad", config.max_grad_norm, OPTIMIZER)
    out.set(f"{actor}.optim.lr_warmup_steps_ratio", 0.0, OPTIMIZER)
    # router replay runs on the Megatron actor (config ppo_megatron_trainer), whose optimizer names its schedule
    # lr_decay_style and whose engine config sits under megatron
    scheduler, engine = ("lr_decay_style", "megatron") if config.router_replay else ("lr_scheduler_type",
                                                                                       "fsdp_config")
    out.set(f"{actor}.optim.{scheduler}", "constant", OPTIMIZER)
    if config.router_replay:  # Megatron trains in bfloat16 or float16 only (McoreEngineConfig)
        out.precision = (f"verl's Megatron actor trains in bfloat16 (its only choices: bfloat16, float16) and this "
                         "file "
                         f"samples in {config.rollout_dtype} ({rollout}.dtype)")
    else:
        out.set(f"{actor}.{engine}.dtype", "float32", ENGINE)
        out.precision = (f"this file asks verl for the same ({actor}.fsdp_config.dtype, {rollout}.dtype; verl's "
                         "defaults are bfloat16: set them back for speed at scale)")
    out.set("trainer.total_training_steps", config.total_updates // (config.updates_per_step * config.epochs),
            TRAINER)
    if config.objective == "tis":
        out.set("algorithm.rollout_correction.rollout_is", "token", ALGORITHM)
        out.set("algorithm.rollout_correction.rollout_is_threshold",
                config.objective_params.get("tis_cap", 2.0), ALGORITHM)
        out.differs.append("tis: verl weights by min(pi_old / pi_rollout, C) with pi_old the trainer's recomputed "
                           "log-probs of the batch; rlbook by min(pi_prox / pi_behaviour, C), pi_prox the policy at "
                           "the step's start: the same quantity on-policy, where the mismatch is the engine's")
    if config.router_replay:
        out.set(f"{actor}.megatron.router_replay.mode", "R3", ENGINE)
        out.set(f"{rollout}.enable_rollout_routing_replay", True, ROLLOUT)
        out.differs.append("router_replay: verl's R3 replays the rollout engine's experts in the Megatron (or "
                           "VeOmni) actor, gate weights from the trainer's logits as in rlbook; use a rollout engine "
                           "that returns routed experts")
    out.differs.append("ratio: verl's old_log_prob is recomputed by the trainer at the step's start (rlbook: the "
                       "log-probs recorded while sampling); verl's synchronous trainer samples with the step's "
                       "weights, so the two differ by the inference engine's mismatch only")
    if config.objective in ("m2po", "m2po_cap"):
        out.differs.append(f"{config.objective}: rlbook's loss {loss_mode}, over the batch verl passes it: one "
                           "micro-batch on one GPU (as written, the whole mini-batch, rlbook's; with more GPUs or "
                           "smaller micro-batches, per micro-batch, as the authors' released code)")
    if config.objective == "no_clip":
        out.differs.append(f"no_clip: verl's clipped surrogate with clip ratios {NO_CLIP_EPSILON:g}, which no ratio "
                           "reaches")
    if config.staleness:
        out.lacks.append(f"staleness={config.staleness}: main_ppo trains on-policy; verl's fully asynchronous "
                         "trainer (verl/experimental/fully_async_policy, async_training.staleness_threshold) bounds "
                         "the lag instead of training every batch exactly s updates late")
    out.lacks += common_lacks(config, "verl")
    return out


def lack_of(objective: str) -> str:
    offers = {"decoupled": "no proximal policy in verl's losses (AReaL's actor.use_decoupled_loss): exported as the "
                           "clipped surrogate",
              "m2po_areal": "AReaL's own M2PO (actor.m2_threshold); verl has no proximal policy: exported as the "
                            "clipped surrogate"}
    return f"objective={objective!r}: {offers[objective]}"


def hydra_override(key: str, value) -> str:
    """One Hydra override as a bash word: null, true / false, numbers and plain strings as they are; the model as
    $MODEL_PATH (the script stops if it is unset)."""
    if value == MODEL_PLACEHOLDER:
        return f'{key}="${{MODEL_PATH:?set MODEL_PATH to your model, a Hugging Face id or path}}"'
    if value is None:
        return f"{key}=null"
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    return f"{key}={value}"


def verl_text(out: Export, head: list[str]) -> str:
    """A bash script: the Hydra overrides in an array, each with its source, then verl's entry point."""
    lines = ["#!/usr/bin/env bash", *(f"# {line}" for line in head), "set -euo pipefail", "RLBOOK_ARGS=("]
    lines += [f"    {hydra_override(key, value)}  # {out.sources[key]}" for key, value in out.values.items()]
    lines += [")", f"python3 -m verl.trainer.main_ppo --config-name {config_name(out)} \"${{RLBOOK_ARGS[@]}}\" \"$@\""]
    return "\n".join(lines) + "\n"


def config_name(out: Export) -> str:
    """verl's config of the export: the Megatron actor's for router replay, else the FSDP actor's."""
    return "ppo_megatron_trainer" if "actor_rollout_ref.actor.megatron.router_replay.mode" in out.values else \
        "ppo_trainer"
