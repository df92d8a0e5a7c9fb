"""AReaL 1.0.4: a YAML of its GRPOConfig (areal/api/cli_args.py), read by `areal.api.cli_args.load_expr_config`.

Advantages are rlbook's when the rewards are normalised per group (`actor.reward_norm` at group level) and the token
advantages are left as they are (`actor.adv_norm: null`): AReaL's adv_norm normalises over tokens, each carrying its
sequence's reward, which weights a group's advantages by the lengths of its completions. The behaviour log-probs stay
the sampling engine's unless a proximal policy is asked for (`recompute_logprob` only with `use_decoupled_loss`), so
a stale batch's ratio measures its staleness, as rlbook's. AReaL applies the decoupled loss's weight pi_prox /
pi_behaviour only through `rejection_sampling` (areal/utils/functional/functional.py, ppo_actor_loss_fn): a clamp
at NO_CLIP_EPSILON writes the uncapped weight.
"""
from __future__ import annotations

from ..config import RunConfig
from ..trl_backend import NO_CLIP_EPSILON, clip_bounds
from .common import Export, common_lacks, integer_alpha, model_name, on_toy_batch, refuse_dpo, set_lengths

AREAL_VERSION = "1.0.4"
ARGS = "areal/api/cli_args.py"
CHECKED_BY = ("read by areal.api.cli_args.load_expr_config into its GRPOConfig dataclass (with the names and paths "
              "below filled in), every key kept")
# what AReaL needs that is the data's and the machine's, never the run's: key -> what it is
READER_SETS = {"train_dataset.path": "your dataset", "tokenizer_path": "your model's tokenizer",
               "actor.backend": "the trainer's allocation, e.g. fsdp:d4",
               "rollout.backend": "the inference server's, e.g. sglang:d4"}
# the sections that name the experiment, the trial and (NAMED_WITH_FILEROOT) the file root, as AReaL's examples
# write them: interpolations of the top-level names
NAMED = ("actor", "rollout")
NAMED_WITH_FILEROOT = ("saver", "evaluator", "recover", "stats_logger")
PROXIMAL = ("decoupled", "tis", "m2po", "m2po_areal")  # objectives run as AReaL's decoupled loss


def areal_export(config: RunConfig) -> Export:
    refuse_dpo(config, "AReaL", f"AReaL {AREAL_VERSION}'s DPO trainer (areal/trainer/dpo_trainer.py) trains on a "
                                "fixed preference dataset, not on pairs of the generator's own samples")
    out = Export("AReaL", AREAL_VERSION, CHECKED_BY)
    low, high = clip_bounds(config)
    per_batch = config.updates_per_step * config.epochs
    proximal = config.objective in PROXIMAL
    # AReaL's names: no '_' or '/' in the experiment's, no '-' or '/' in the trial's (areal/api/cli_args.py)
    out.set("experiment_name", f"rlbook-{config.experiment.replace('_', '-')}", ARGS)
    out.set("trial_name", config.name.replace(f"-seed{config.seed}", "").replace("-", "_"), ARGS)
    for section in NAMED + NAMED_WITH_FILEROOT:
        out.set(f"{section}.experiment_name", "${experiment_name}", ARGS)
        out.set(f"{section}.trial_name", "${trial_name}", ARGS)
    for section in NAMED_WITH_FILEROOT:
        out.set(f"{section}.fileroot", "${cluster.fileroot}", ARGS)
    out.set("train_dataset.type", "rl", ARGS)
    out.set("seed", config.seed, ARGS)
    out.set("total_train_steps", config.total_updates // per_batch, ARGS)
    out.set("train_dataset.batch_size", config.prompts_per_step, ARGS)
    out.set("gconfig.n_samples", config.group_size, ARGS)
    out.set("gconfig.temperature", config.temperature, ARGS)
    set_lengths(out, config, "gconfig.max_new_tokens", ARGS)
    out.set("rollout.max_head_offpolicyness", config.staleness // per_batch, ARGS)
    out.set("actor.path", model_name(config), ARGS)
    out.set("actor.dtype", "float32", ARGS)
    for server in ("sglang", "vllm"):
        out.set(f"{server}.dtype", config.rollout_dtype, ARGS)
    out.precision = ("this file asks AReaL for the same (actor.dtype, sglang.dtype, vllm.dtype; AReaL's defaults "
                     "are bfloat16: set them back for speed at scale)")
    out.set("actor.ppo_n_minibatches", config.updates_per_step, ARGS)
    out.set("actor.eps_clip", low, ARGS)
    out.set("actor.eps_clip_higher", high, ARGS)
    dual = config.objective_params.get("dual_clip")
    if dual is not None:
        out.set("actor.c_clip", dual, ARGS)
    out.set("actor.kl_ctl", 0.0, ARGS)
    # rlbook's group advantages: the rewards normalised per group, the token advantages left as they are
    out.set("actor.reward_norm", {"mean_level": "group", "std_level": "group" if config.normalize_adv_std else None,
                                  "group_size": config.group_size, "eps": 1e-6}, ARGS + " (NormConfig)")
    out.set("actor.adv_norm", None, ARGS)
    out.set("actor.importance_sampling_level", "sequence" if config.objective == "gspo" else "token", ARGS)
    out.set("actor.recompute_logprob", proximal, ARGS)
    out.set("actor.use_decoupled_loss", proximal, ARGS)
    if proximal:
        cap = config.objective_params.get("tis_cap", 2.0) if config.objective == "tis" else NO_CLIP_EPSILON
        out.set("actor.rejection_sampling", {"level": "token", "action": "clamp", "metric": "ratio", "upper": cap},
                ARGS + " (RejectionSamplingConfig)")
    if config.objective in ("m2po", "m2po_areal"):
        out.set("actor.m2_threshold", config.objective_params.get("tau", 0.04), ARGS)
    out.set("actor.optimizer.lr", config.lr, ARGS + " (OptimizerConfig)")
    out.set("actor.optimizer.weight_decay", config.weight_decay, ARGS + " (OptimizerConfig)")
    out.set("actor.optimizer.gradient_clipping", config.max_grad_norm, ARGS + " (OptimizerConfig)")
    out.set("actor.optimizer.lr_scheduler_type", "constant", ARGS + " (OptimizerConfig)")
    out.set("actor.optimizer.warmup_steps_proportion", 0.0, ARGS + " (OptimizerConfig)")
    if config.finetune == "lora":  # the trainer's adapter, and the inference server's (AReaL's LoRA examples)
        out.set("actor.use_lora", True, ARGS)
        out.set("actor.lora_rank", config.lora_rank, ARGS)
        out.set("actor.lora_alpha", integer_alpha(config, "AReaL"), ARGS)
        out.set("actor.target_modules", ["all-linear"], ARGS)
        out.set("rollout.use_lora", True, ARGS)
        for server in ("sglang", "vllm"):
            out.set(f"{server}.enable_lora", True, ARGS)
            out.set(f"{server}.max_lora_rank", config.lora_rank, ARGS)
    out.yours += [f"{key}: {what}" for key, what in READER_SETS.items()]
    out.yours.append("cluster.fileroot: where logs and checkpoints go (AReaL's default otherwise)")
    out.yours.append("actor.path: your model" if model_name(config).startswith("<") else
                     "actor.path is the preset's checkpoint")
    out.yours.append("mb_spec (micro-batches) and the servers' memory settings for your GPUs")
    differences(config, out, per_batch)
    out.lacks += common_lacks(config, "AReaL")
    return out


def differences(config: RunConfig, out: Export, per_batch: int) -> None:
    """What AReaL computes differently, with the toy batch's numbers where they differ (tests/test_engine_areal.py
    computes the AReaL side with AReaL's own code)."""
    from .toy_batch import AREAL_RESULTS, rlbook_loss

    if config.objective == "m2po":
        out.differs.append("m2po: AReaL's own M2PO (areal/trainer/ppo/actor.py, _apply_m2po_masking): every response "
                           "token of a micro-batch is a candidate, the drift is log pi_behaviour - log pi_prox, masked "
                           "tokens leave the denominator and the kept ones get its decoupled loss (the ratio to the "
                           "proximal policy, weighted by pi_prox / pi_behaviour); Algorithm 1 takes only trust-region "
                           "tokens over the mini-batch, r = pi / pi_behaviour; " +
                           on_toy_batch("loss", "AReaL", AREAL_RESULTS["m2po"], rlbook_loss("m2po")[0]))
    if config.objective == "m2po_areal" and config.objective_params.get("masked_in_denominator"):
        out.differs.append("m2po_areal with masked_in_denominator: AReaL divides the loss by the kept tokens only; "
                           "this run kept the masked tokens in the denominator (chapter 3's test), which AReaL has no "
                           "setting for; " + on_toy_batch("loss", "AReaL", rlbook_loss("m2po_areal")[0],
                                                         rlbook_loss("m2po_areal", masked_in_denominator=True)[0]))
    if config.objective == "gspo":
        out.differs.append("gspo: AReaL averages the sequence-level terms over tokens (each sequence weighted by its "
                           "length), rlbook over sequences; " +
                           on_toy_batch("loss", "AReaL", AREAL_RESULTS["gspo"], rlbook_loss("gspo")[0]))
    if config.objective == "m2po_cap":
        out.lacks.append("objective='m2po_cap': no second-moment cap (AReaL has its own M2PO mask, "
                         "actor.m2_threshold): exported as the clipped surrogate without a clip")
    if config.objective in ("no_clip", "m2po", "m2po_cap"):
        out.differs.append(f"objective={config.objective!r} has no clip in rlbook: eps_clip {NO_CLIP_EPSILON:g}, "
                           "which no ratio reaches")
    if config.staleness:
        out.differs.append(f"staleness={config.staleness}: max_head_offpolicyness = {config.staleness // per_batch} "
                           "bounds how many versions a batch may lag (AReaL trains the freshest it has); rlbook trains "
                           "every batch exactly that late (a FIFO)")
    if config.ar_alpha:
        out.lacks.append(f"ar_alpha={config.ar_alpha}: AReaL has no Advantage Reweighting (arXiv 2505.12929)")
    if config.router_replay:
        out.lacks.append("router_replay=True: AReaL returns the rollout's routed experts (rollout."
                         "return_routed_experts, SGLang only) but does not replay them in training")
    if config.epochs > 1:
        out.lacks.append(f"epochs={config.epochs}: AReaL's PPO actor makes one pass (ppo_n_minibatches updates) over "
                         "each batch")
