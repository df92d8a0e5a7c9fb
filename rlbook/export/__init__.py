"""Write a run's configuration for another engine (TRL, verl, AReaL), each flag beside the engine file it was read from.

An export is the engine's own configuration format: a YAML of GRPOConfig and LoraConfig arguments (TRL), the Hydra
overrides of `python3 -m verl.trainer.main_ppo` as a bash array (verl), a YAML of AReaL's GRPOConfig (AReaL). Its
header names the engine release the mapping was read from and lists every rlbook setting the engine lacks (with the
nearest thing it offers) or computes differently. Everything about the model, the data and the machine (paths,
GPUs, parallelism, the inference server) is the reader's to add.

    python -m rlbook export 02_staleness --to areal --profile cpu --out exports/
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .config import RunConfig
from .trl_backend import (NO_CLIP_EPSILON, TRL_LOSSES, TRL_VERSION, clip_bounds, lora_arguments, refusals,
                          trl_arguments)

VERL_VERSION = "0.9.1"
AREAL_VERSION = "1.0.4"
ENGINES = ("trl", "verl", "areal")
MODEL_PLACEHOLDER = "<your model: a Hugging Face id or path>"
TIED_GROUP = ("a group whose rewards are all equal gets (r - mean) / eps, 0 only where the mean rounds exactly "
              "(rlbook sets it to 0)")
@dataclass
class Export:
    """An engine configuration being written: keys with values and sources, and the header's lines."""

    engine: str
    version: str
    values: dict = field(default_factory=dict)  # dotted key -> value
    sources: dict = field(default_factory=dict)  # dotted key -> the engine file the key was read from
    lacks: list = field(default_factory=list)  # rlbook settings the engine has no flag for
    differs: list = field(default_factory=list)  # settings it has, computed differently

    def set(self, key: str, value, source: str) -> None:
        self.values[key], self.sources[key] = value, source


def set_response_budget(out, config, key: str, source: str) -> None:
    """The completion length flag, or (when rlbook derives it from the task's traces) a line saying to set it."""
    budget = response_budget(config)
    if budget:
        out.set(key, budget, source)
    else:
        out.lacks.append(f"{key}: set it for your task (rlbook derives it from the task's traces)")


def response_budget(config: RunConfig) -> int | None:
    """Completion tokens: the run's max_new_tokens, or the budget rlbook computes for a nano preset's task."""
    from .evaluate import completion_budget
    from .models import get_preset
    from .tasks import make_task
    from .tokenizer import char_tokenizer

    if config.max_new_tokens:
        return config.max_new_tokens
    if get_preset(config.preset).hub_id is not None:
        return None
    return completion_budget(make_task(config.task, **config.task_params), char_tokenizer())


def model_name(config: RunConfig) -> str:
    from .models import get_preset

    return get_preset(config.preset).hub_id or MODEL_PLACEHOLDER


def common_lacks(config: RunConfig, engine: str) -> list[str]:
    """Settings verl and AReaL lack alike: AR, Lopti, router noise, a frozen generator (TRL's are its refusals)."""
    lines = []
    if config.ar_alpha:
        lines.append(f"ar_alpha={config.ar_alpha}: {engine} has no Advantage Reweighting (arXiv 2505.12929)")
    if config.lopti_eta:
        lines.append(f"lopti_eta={config.lopti_eta}: {engine} has no two-stage Lopti update (arXiv 2505.12929)")
    if config.router_noise:
        lines.append(f"router_noise={config.router_noise}: {engine} has no noise on the router logits (a dose of "
                     "mismatch for a small experiment; at scale the mismatch is the inference engine's own)")
    if config.sync_every != 1:
        lines.append(f"sync_every={config.sync_every}: {engine} has no frozen generator refreshed every k updates")
    return lines


# ---- TRL 1.16: trl/trainer/grpo_config.py (GRPOConfig), peft.LoraConfig --------------------------------------------

TRL_CONFIG = "trl/trainer/grpo_config.py"


def trl_export(config: RunConfig) -> Export:
    out = Export("TRL", TRL_VERSION)
    budget = response_budget(config) or 1024
    for key, value in trl_arguments(config, budget).items():
        out.set(f"grpo_config.{key}", value, TRL_CONFIG)
    out.set("grpo_config.seed", config.seed, "transformers/training_args.py")
    out.set("model_name_or_path", model_name(config), "trl/trainer/grpo_trainer.py (GRPOTrainer(model=...))")
    lora = lora_arguments(config)
    for key, value in (lora or {}).items():
        out.set(f"lora_config.{key}", value, "peft/tuners/lora/config.py (GRPOTrainer(peft_config=LoraConfig(...)))")
    out.lacks += [line for line in refusals(config) if not line.startswith("micro_batch_size")]
    out.differs.append("loss_type='dapo' divides by the rollout batch's response tokens / steps_per_generation: "
                       "rlbook's token mean when a batch makes one update, the batch-average token count otherwise")
    out.differs.append("advantages: (r - group mean) / (group std + 1e-4) (rlbook: + 1e-6); " + TIED_GROUP)
    if config.updates_per_step > 1:
        out.differs.append("steps_per_generation splits a shuffled rollout batch (rlbook: whole groups, in order)")
    if config.objective in ("no_clip", "m2po", "m2po_cap"):
        out.differs.append(f"objective={config.objective!r} has no clip in rlbook: epsilon = epsilon_high = "
                           f"{NO_CLIP_EPSILON:g} never binds")
    if config.objective not in TRL_LOSSES:
        out.differs.append(f"exported with the nearest loss TRL has: the clipped surrogate, loss_type='dapo'")
    if budget == 1024 and not config.max_new_tokens:
        out.lacks.append("max_completion_length: set it for your task (rlbook derives it from the task's traces)")
    return out


# ---- verl 0.9.1: verl/trainer/config/ppo_trainer.yaml (Hydra), verl/workers/config/actor.py ------------------------

VERL_YAML = "verl/trainer/config/_generated_ppo_trainer.yaml"
VERL_ACTOR = "verl/workers/config/actor.py"
VERL_ALGO = "verl/trainer/config/algorithm.py"
VERL_LOSSES = "verl/trainer/ppo/core_algos.py"


def verl_export(config: RunConfig) -> Export:
    out = Export("verl", VERL_VERSION)
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    low, high = clip_bounds(config)
    out.set("algorithm.adv_estimator", "grpo", VERL_ALGO)
    out.set("algorithm.norm_adv_by_std_in_grpo", config.normalize_adv_std, VERL_ALGO)
    out.set("algorithm.use_kl_in_reward", False, VERL_ALGO)
    out.set("data.train_batch_size", config.prompts_per_step, VERL_YAML)
    set_response_budget(out, config, "data.max_response_length", VERL_YAML)
    out.set("data.seed", config.seed, VERL_YAML)
    out.set("actor_rollout_ref.model.path", model_name(config), VERL_YAML)
    if config.finetune == "lora":
        out.set("actor_rollout_ref.model.lora_rank", config.lora_rank, VERL_YAML)
        out.set("actor_rollout_ref.model.lora_alpha", config.lora_alpha, VERL_YAML)
        out.set("actor_rollout_ref.model.target_modules", "all-linear", VERL_YAML)
    out.set(f"{rollout}.n", config.group_size, VERL_YAML)
    out.set(f"{rollout}.temperature", config.temperature, VERL_YAML)
    out.set(f"{rollout}.top_p", 1.0, VERL_YAML)
    out.set(f"{rollout}.top_k", -1, VERL_YAML)
    # ppo_mini_batch_size counts prompts; verl multiplies it by rollout.n (verl/workers/config/actor.py)
    out.set(f"{actor}.ppo_mini_batch_size", config.prompts_per_step // config.updates_per_step, VERL_ACTOR)
    out.set(f"{actor}.ppo_epochs", config.epochs, VERL_ACTOR)
    out.set(f"{actor}.shuffle", False, VERL_ACTOR)
    out.set(f"{actor}.use_kl_loss", False, VERL_ACTOR)
    out.set(f"{actor}.entropy_coeff", 0, VERL_ACTOR)
    out.set(f"{actor}.clip_ratio_low", low, VERL_ACTOR)
    out.set(f"{actor}.clip_ratio_high", high, VERL_ACTOR)
    dual = config.objective_params.get("dual_clip")
    # verl's vanilla loss always applies the dual clip at clip_ratio_c (default 3.0, must be > 1): rlbook's GRPO
    # applies it only when dual_clip is set, so otherwise it goes where no ratio reaches
    out.set(f"{actor}.clip_ratio_c", dual if dual is not None else NO_CLIP_EPSILON, VERL_LOSSES)
    gspo = config.objective == "gspo"
    out.set(f"{actor}.policy_loss.loss_mode", "gspo" if gspo else "vanilla", VERL_LOSSES)
    out.set(f"{actor}.loss_agg_mode", "seq-mean-token-mean" if gspo else "token-mean", VERL_LOSSES)
    out.set(f"{actor}.optim.lr", config.lr, "verl/workers/config/optimizer.py")
    out.set(f"{actor}.optim.weight_decay", config.weight_decay, "verl/workers/config/optimizer.py")
    out.set(f"{actor}.optim.clip_grad", config.max_grad_norm, "verl/workers/config/optimizer.py")
    out.set(f"{actor}.optim.lr_warmup_steps_ratio", 0.0, "verl/workers/config/optimizer.py")
    # router replay runs on the Megatron actor (config ppo_megatron_trainer), whose optimizer names its schedule
    scheduler = "lr_decay_style" if config.router_replay else "lr_scheduler_type"
    out.set(f"{actor}.optim.{scheduler}", "constant", "verl/workers/config/optimizer.py")
    out.set("trainer.total_training_steps", config.total_updates // (config.updates_per_step * config.epochs),
            "verl/trainer/config/ppo_trainer.yaml (a training step is one rollout batch)")
    if config.objective == "tis":
        out.set("algorithm.rollout_correction.rollout_is", "token", VERL_ALGO)
        out.set("algorithm.rollout_correction.rollout_is_threshold",
                config.objective_params.get("tis_cap", 2.0), VERL_ALGO)
        out.differs.append("tis: verl weights by min(pi_old / pi_rollout, C) with pi_old the trainer's recomputed "
                           "log-probs of the batch; rlbook by min(pi_prox / pi_behaviour, C), pi_prox the policy at "
                           "the step's start: the same quantity on-policy, where the mismatch is the engine's")
    if config.router_replay:
        out.set(f"{actor}.megatron.router_replay.mode", "R3", VERL_ACTOR)
        out.set(f"{rollout}.enable_rollout_routing_replay", True, VERL_YAML)
        out.differs.append("router_replay: verl's R3 replays the rollout engine's experts in the Megatron (or "
                           "VeOmni) actor, gate weights from the trainer's logits as in rlbook; use the "
                           "ppo_megatron_trainer config and a rollout engine that returns routed experts")
    offers = {"m2po": f"AReaL's actor.m2_threshold; verl {VERL_VERSION} registers no M2PO policy loss "
                      f"({VERL_LOSSES}): exported as the clipped surrogate without a clip",
              "m2po_cap": f"no second-moment cap in {VERL_LOSSES}: exported as the clipped surrogate without a clip",
              "decoupled": "no proximal policy in verl's losses (AReaL's actor.use_decoupled_loss)",
              "m2po_areal": f"AReaL's own M2PO (actor.m2_threshold); verl {VERL_VERSION} has no proximal policy and "
                            "no second-moment mask: exported as the clipped surrogate",
              "dpo": "no online DPO in verl's PPO trainer"}
    if config.objective in offers:
        out.lacks.append(f"objective={config.objective!r}: {offers[config.objective]}")
    if config.objective in ("no_clip", "m2po", "m2po_cap"):
        out.differs.append(f"objective={config.objective!r} has no clip in rlbook: clip ratios {NO_CLIP_EPSILON:g}")
    if config.staleness:
        out.lacks.append(f"staleness={config.staleness}: no constant-lag FIFO; verl's fully asynchronous trainer "
                         "(verl/experimental/fully_async_policy, async_training.staleness_threshold: the fraction "
                         "of a step's samples that may come from older weights; trigger_parameter_sync_step) bounds "
                         "the lag instead")
    if config.rollout_dtype == "float32":
        out.differs.append("rollouts: verl samples with vLLM or SGLang in bfloat16 (rollout.dtype), so its "
                           "train/rollout mismatch is never zero; rlbook's float32 rollouts are the trained model")
    out.differs.append(TIED_GROUP)
    out.lacks += common_lacks(config, "verl")
    return out


# ---- AReaL 1.0.4: areal/api/cli_args.py (GRPOConfig = PPOConfig), areal/trainer/ppo/actor.py -----------------------

AREAL_ARGS = "areal/api/cli_args.py"
AREAL_ACTOR = "areal/trainer/ppo/actor.py"


def areal_export(config: RunConfig) -> Export:
    out = Export("AReaL", AREAL_VERSION)
    low, high = clip_bounds(config)
    per_batch = config.updates_per_step * config.epochs
    out.set("seed", config.seed, AREAL_ARGS)
    out.set("total_train_steps", config.total_updates // per_batch, AREAL_ARGS)
    out.set("train_dataset.batch_size", config.prompts_per_step, AREAL_ARGS)
    out.set("gconfig.n_samples", config.group_size, AREAL_ARGS)
    out.set("gconfig.temperature", config.temperature, AREAL_ARGS)
    set_response_budget(out, config, "gconfig.max_new_tokens", AREAL_ARGS)
    out.set("rollout.max_head_offpolicyness", config.staleness // per_batch, AREAL_ARGS)
    out.set("actor.path", model_name(config), AREAL_ARGS)
    out.set("actor.ppo_n_minibatches", config.updates_per_step, AREAL_ARGS)
    out.set("actor.eps_clip", low, AREAL_ARGS)
    out.set("actor.eps_clip_higher", high, AREAL_ARGS)
    dual = config.objective_params.get("dual_clip")
    if dual is not None:
        out.set("actor.c_clip", dual, AREAL_ARGS)
    out.set("actor.kl_ctl", 0.0, AREAL_ARGS)
    out.set("actor.adv_norm", {"mean_level": "group", "std_level": "group" if config.normalize_adv_std else None,
                               "group_size": config.group_size, "eps": 1e-6}, AREAL_ARGS + " (NormConfig)")
    out.set("actor.reward_norm", None, AREAL_ARGS)
    out.set("actor.importance_sampling_level", "sequence" if config.objective == "gspo" else "token", AREAL_ARGS)
    proximal = config.objective in ("m2po", "m2po_areal", "tis", "decoupled")  # AReaL's decoupled loss
    out.set("actor.recompute_logprob", config.staleness > 0 or proximal, AREAL_ARGS)
    out.set("actor.use_decoupled_loss", proximal, AREAL_ARGS)
    if config.objective in ("m2po", "m2po_areal"):
        out.set("actor.m2_threshold", config.objective_params.get("tau", 0.04), AREAL_ACTOR)
    if config.objective == "m2po":
        out.differs.append("m2po: AReaL masks over every response token of a micro-batch by (log pi_behaviour - "
                           "log pi_prox)^2 and applies its decoupled PPO clip on top; rlbook's Algorithm 1 takes only "
                           "trust-region tokens ((A>0 & r>1) | (A<0 & r<1)) as candidates, over the whole mini-batch, "
                           "with r = pi / pi_behaviour and no clip")
    if config.objective == "m2po_areal" and config.objective_params.get("masked_in_denominator"):
        out.differs.append("m2po_areal with masked_in_denominator: AReaL divides the loss by the kept tokens only; "
                           "this run kept the masked tokens in the denominator (chapter 3's test), which AReaL has no "
                           "setting for")
    if config.objective == "tis":
        out.set("actor.rejection_sampling", {"level": "token", "action": "clamp", "metric": "ratio",
                                             "upper": config.objective_params.get("tis_cap", 2.0)},
                AREAL_ARGS + " (RejectionSamplingConfig)")
    out.set("actor.optimizer.lr", config.lr, AREAL_ARGS + " (OptimizerConfig)")
    out.set("actor.optimizer.weight_decay", config.weight_decay, AREAL_ARGS + " (OptimizerConfig)")
    out.set("actor.optimizer.gradient_clipping", config.max_grad_norm, AREAL_ARGS + " (OptimizerConfig)")
    out.set("actor.optimizer.lr_scheduler_type", "constant", AREAL_ARGS + " (OptimizerConfig)")
    out.set("actor.optimizer.warmup_steps_proportion", 0.0, AREAL_ARGS + " (OptimizerConfig)")
    if config.finetune == "lora":
        out.set("actor.use_lora", True, AREAL_ARGS)
        out.set("actor.lora_rank", config.lora_rank, AREAL_ARGS)
        out.set("actor.lora_alpha", int(config.lora_alpha), AREAL_ARGS)
        out.set("actor.target_modules", ["all-linear"], AREAL_ARGS)
    if config.staleness:
        out.differs.append(f"staleness={config.staleness}: max_head_offpolicyness = {config.staleness // per_batch} "
                           "bounds how many versions a batch may lag (AReaL trains the freshest it has); rlbook trains "
                           "every batch exactly that late (a FIFO)")
    if config.objective == "dpo":
        out.lacks.append("objective='dpo': no online DPO in AReaL's PPO actor")
    if config.objective == "m2po_cap":
        out.lacks.append("objective='m2po_cap': no second-moment cap (AReaL has the Algorithm 1 mask, "
                         "actor.m2_threshold): exported as the clipped surrogate without a clip")
    if config.objective in ("no_clip", "m2po", "m2po_cap"):
        out.differs.append(f"objective={config.objective!r} has no clip in rlbook: eps_clip {NO_CLIP_EPSILON:g}")
    if config.router_replay:
        out.lacks.append("router_replay=True: AReaL returns the rollout's routed experts (rollout."
                         "return_routed_experts, SGLang only) but does not replay them in training")
    if config.rollout_dtype == "float32":
        out.differs.append("rollouts: AReaL samples with SGLang or vLLM in bfloat16, so its train/rollout mismatch is "
                           "never zero; rlbook's float32 rollouts are the trained model")
    out.differs.append(TIED_GROUP)
    if config.epochs > 1:
        out.lacks.append(f"epochs={config.epochs}: AReaL's PPO actor makes one pass (ppo_n_minibatches updates) over "
                         "each batch")
    out.lacks += common_lacks(config, "AReaL")
    return out


EXPORTERS = {"trl": trl_export, "verl": verl_export, "areal": areal_export}


# ---- writing ----------------------------------------------------------------------------------------------------

def header(config: RunConfig, out: Export, seeds: list[int]) -> list[str]:
    lines = [f"{out.engine} {out.version} configuration of rlbook run {config.experiment}/{config.name} "
             f"(seeds {', '.join(map(str, seeds))}), written by `python -m rlbook export`.",
             f"Each key's comment names the {out.engine} {out.version} file it was read from. The model, data, "
             "reward function and machine (GPUs, parallelism, inference server) are yours to add.",
             "rlbook settings " + out.engine + " lacks:" + ("" if out.lacks else " none")]
    lines += [f"  - {line}" for line in out.lacks]
    lines += [f"computed differently in {out.engine}:" + ("" if out.differs else " nothing")]
    lines += [f"  - {line}" for line in out.differs]
    return lines


def yaml_scalar(value) -> str:
    """JSON, which is YAML, except floats with an exponent get a decimal point: YAML 1.1 readers (PyYAML) read 1e-06
    as a string, 1.0e-06 as a number."""
    if isinstance(value, float) and "e" in repr(value) and "." not in repr(value):
        mantissa, exponent = repr(value).split("e")
        return f"{mantissa}.0e{exponent}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {yaml_scalar(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(yaml_scalar(v) for v in value) + "]"
    return json.dumps(value)


def yaml_text(out: Export, head: list[str]) -> str:
    """Nested YAML (JSON scalars are YAML) with each key's source as a comment."""
    tree: dict = {}
    for key in out.values:
        node, *path = tree, *key.split(".")
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = key
    lines = [f"# {line}" for line in head]

    def emit(node: dict, indent: int) -> None:
        for name, child in node.items():
            if isinstance(child, dict):
                lines.append(f"{'  ' * indent}{name}:")
                emit(child, indent + 1)
            else:
                lines.append(f"{'  ' * indent}{name}: {yaml_scalar(out.values[child])}  # {out.sources[child]}")

    emit(tree, 0)
    return "\n".join(lines) + "\n"


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
    config_name = "ppo_megatron_trainer" if "actor_rollout_ref.actor.megatron.router_replay.mode" in out.values \
        else "ppo_trainer"
    lines += [")", f"python3 -m verl.trainer.main_ppo --config-name {config_name} \"${{RLBOOK_ARGS[@]}}\" \"$@\""]
    return "\n".join(lines) + "\n"


def export_text(config: RunConfig, engine: str, seeds: list[int] | None = None) -> str:
    """The configuration file of config for engine (trl, verl or areal)."""
    if engine not in EXPORTERS:
        raise ValueError(f"engine {engine!r} is not an export target; choose one of: {', '.join(ENGINES)}")
    out = EXPORTERS[engine](config)
    head = header(config, out, seeds or [config.seed])
    return verl_text(out, head) if engine == "verl" else yaml_text(out, head)


SUFFIX = {"trl": "trl.yaml", "verl": "verl.sh", "areal": "areal.yaml"}
# experiments with no RL run to export, and why
NOT_EXPORTABLE = {"05_merging": "chapter 5 averages checkpoints of a supervised warm start (rlbook.pretrain, "
                                "rlbook.merging); it has no RL run to export: save your engine's checkpoints and merge "
                                "them with rlbook.merging.merge_state_dicts"}


def configs_of(target: str, profile: str) -> list[RunConfig]:
    """The configs a target names: a chapter's experiment (RunConfig.experiment, e.g. 02_staleness), a named sweep
    (rlbook.experiments.SWEEPS) or a run directory holding config.json."""
    from .experiments import SWEEPS, sweep
    from .runs import Run

    if (Path(target) / "config.json").exists():
        return [Run(Path(target)).config]
    if target in NOT_EXPORTABLE:
        raise ValueError(f"{target} cannot be exported: {NOT_EXPORTABLE[target]}")
    if target in SWEEPS:
        return sweep(target, profile)
    by_experiment = [c for name in SWEEPS for c in sweep(name, profile) if c.experiment == target]
    if not by_experiment:
        experiments = sorted({c.experiment for name in SWEEPS for c in sweep(name, profile)})
        raise ValueError(f"{target!r} is not a run directory, a sweep or an experiment; sweeps: {', '.join(SWEEPS)}; "
                         f"experiments: {', '.join(experiments)}")
    return by_experiment


def export(target: str, engine: str, out_dir: str | Path, profile: str = "cpu") -> list[Path]:
    """Write one file per distinct setting of target (seeds folded into one file); returns the paths written."""
    if engine not in EXPORTERS:
        raise ValueError(f"engine {engine!r} is not an export target; choose one of: {', '.join(ENGINES)}")
    groups: dict[str, list[RunConfig]] = {}
    for config in configs_of(target, profile):
        groups.setdefault(json.dumps(config.replace(seed=0, name="-").identity(), sort_keys=True), []).append(config)
    out_dir, written = Path(out_dir), []
    out_dir.mkdir(parents=True, exist_ok=True)
    for configs in groups.values():
        first = configs[0]
        name = first.name.replace(f"-seed{first.seed}", "")
        path = out_dir / f"{first.experiment}-{name}.{SUFFIX[engine]}"
        path.write_text(export_text(first, engine, sorted({c.seed for c in configs})))
        written.append(path)
    return written
