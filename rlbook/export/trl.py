"""TRL 1.16: a flat YAML for `trl grpo --config FILE` (trl/scripts/grpo.py).

TrlParser reads it into GRPOConfig, ModelConfig and the script's arguments, each key to the dataclass that defines it.
The arguments are the TRL backend's (rlbook.trl_backend.trl_arguments), so an export and a TRL-backend run of the same
config ask TRL for the same update. The LoRA adapter goes through ModelConfig (use_peft, lora_*), which the script
turns into a peft LoraConfig (trl.get_peft_config); the model loads in float32 and trains without bf16, as rlbook's.
"""
from __future__ import annotations

from ..config import RunConfig
from ..trl_backend import NO_CLIP_EPSILON, TRL_LOSSES, TRL_VERSION, lora_arguments, refusals, trl_arguments
from .common import (MODEL_PLACEHOLDER, Export, integer_alpha, model_name, on_toy_batch, refuse_dpo,
                     response_budget, set_lengths)

GRPO_CONFIG = "trl/trainer/grpo_config.py"
TRAINING_ARGUMENTS = "transformers/training_args.py"
MODEL_CONFIG = "trl/trainer/model_config.py"
# the GRPOConfig arguments that transformers' TrainingArguments defines (GRPOConfig defines the others)
TRAINING_ARGUMENT_KEYS = {"lr_scheduler_type", "warmup_steps", "weight_decay", "max_grad_norm", "optim", "max_steps",
                          "per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "seed"}
# peft.LoraConfig's names -> ModelConfig's (trl/trainer/model_config.py; get_peft_config maps them back)
LORA_NAMES = {"r": "lora_r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
              "target_modules": "lora_target_modules", "task_type": "lora_task_type"}
CHECKED_BY = ("parsed by TrlParser as `trl grpo --config` does (trl/scripts/grpo.py make_parser), every key kept, "
              "and its key's file checked against the dataclass that defines it")


def trl_export(config: RunConfig) -> Export:
    refuse_dpo(config, "TRL", f"TRL {TRL_VERSION}'s OnlineDPOTrainer (trl.experimental.online_dpo) pairs two samples "
                              "of the current policy per prompt and its DPOTrainer a fixed preference dataset")
    out = Export("TRL", TRL_VERSION, CHECKED_BY)
    budget = response_budget(config)
    arguments = trl_arguments(config, budget or 0)
    del arguments["max_completion_length"]  # set_lengths writes it, with its unit
    out.set("model_name_or_path", model_name(config), MODEL_CONFIG)
    out.set("dtype", "float32", MODEL_CONFIG)
    lora = lora_arguments(config)
    if lora:
        out.set("use_peft", True, MODEL_CONFIG)
        lora["lora_alpha"] = integer_alpha(config, "TRL")
        for name, value in lora.items():
            if name in LORA_NAMES:  # get_peft_config sets bias="none", as rlbook
                out.set(LORA_NAMES[name], value, MODEL_CONFIG)
    for key, value in arguments.items():
        out.set(key, value, TRAINING_ARGUMENTS if key in TRAINING_ARGUMENT_KEYS else GRPO_CONFIG)
    set_lengths(out, config, "max_completion_length", GRPO_CONFIG)
    out.set("bf16", False, TRAINING_ARGUMENTS + " (GRPOConfig sets it True when unset)")
    out.set("seed", config.seed, TRAINING_ARGUMENTS)
    out.precision = ("this file asks TRL for float32 (dtype, bf16: false; TRL's default on a GPU is bfloat16: set "
                     "bf16: true for speed at scale); TRL samples with the trained model itself")
    out.yours.append("the data: dataset_name (a dataset with a prompt column; trl/scripts/utils.py ScriptArguments) "
                     "and reward_funcs (a dotted path to your reward function; trl/scripts/grpo.py)")
    out.yours.append("model_name_or_path: your model" if model_name(config) == MODEL_PLACEHOLDER else
                     "model_name_or_path is the preset's checkpoint")
    out.yours.append("the machine: per_device_train_batch_size and gradient_accumulation_steps are written for one "
                     "process (accelerate launch with more divides the batch)")
    out.lacks += [line for line in refusals(config) if not line.startswith("micro_batch_size")]
    if config.objective in ("m2po", "m2po_cap"):
        out.lacks.append("in Python, rlbook.engine_plugins.trl_m2po.M2POTrainer (a GRPOTrainer subclass) computes "
                         "Algorithm 1's mask with this file's arguments, on one process without gradient "
                         "accumulation")
    differences(config, out)
    return out


def differences(config: RunConfig, out: Export) -> None:
    """What TRL computes differently, with the toy batch's numbers (tests/test_engine_trl.py computes TRL's side with
    TRL's own trainer)."""
    from .toy_batch import TRL_RESULTS, rlbook_advantages

    out.differs.append("advantages: (r - group mean) / (group std + 1e-4) (rlbook: + 1e-6); " +
                       on_toy_batch("first advantage", "TRL", TRL_RESULTS["advantage"],
                                    float(rlbook_advantages()[0])))
    out.differs.append("ratio: TRL's old log-probs are recomputed by a forward pass at generation (exactly the "
                       "current ones when a batch makes one update); rlbook uses the log-probs recorded while sampling")
    if config.updates_per_step > 1:
        out.differs.append("mini-batches: steps_per_generation splits a shuffled rollout batch (rlbook: whole groups, "
                           "in order), and loss_type='dapo' divides by the batch's token count / "
                           "steps_per_generation, not each mini-batch's own")
    if config.objective in ("no_clip", "m2po", "m2po_cap"):
        out.differs.append(f"objective={config.objective!r} has no clip in rlbook: epsilon = epsilon_high = "
                           f"{NO_CLIP_EPSILON:g} never binds")
    if config.objective not in TRL_LOSSES:
        out.differs.append("exported with the nearest loss TRL has: the clipped surrogate, loss_type='dapo'")
