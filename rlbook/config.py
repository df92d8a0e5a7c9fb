"""Run configuration: one dataclass, validated on construction; a wrong key or value names the field and the choices.

Every field has a one-line description in FIELD_HELP (the command line's --help shows it). Construction checks the
values alone; `check_runnable` checks what this machine must provide (a GPU for fused_ratio='on', the checkpoint
that init names), before a run directory is created or a model is loaded.
"""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import math
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from .versions import TRAINING_VERSION, WARM_START_VERSION

FINETUNE = ("lora", "full")
FUSED_RATIO = ("auto", "on", "off", "chunked")
INIT = ("warm", "scratch")
ROLLOUT_DTYPES = ("float32", "bfloat16")
DIRECTORY_NAME = re.compile(r"[\w+=-][\w.+=-]{0,99}")  # experiment and name become directory names
MAX_SEED = 2**31
WARM_START_FROM_RUN = ("preset", "task", "task_params")  # a run's warm start trains its own preset on its own task

FIELD_HELP = {
    "experiment": "group of runs: the RunStore directory runs/<experiment>/ (letters, digits, . _ + = -)",
    "name": "display name of the run; not part of its identity (renaming never retrains)",
    "seed": f"random seed of the rollouts, the problems and a scratch model (0 <= seed < {MAX_SEED})",
    "preset": "model: a nano Qwen3 preset (random or warm-started) or a real checkpoint (rlbook.models.PRESETS)",
    "init": "starting weights: warm (the cached warm start of preset and task), scratch (random) or a checkpoint "
            "directory",
    "finetune": "lora: train a LoRA adapter on every linear layer; full: train every weight",
    "lora_rank": "rank of the LoRA adapter (finetune=lora)",
    "lora_alpha": "LoRA scaling alpha (the update is scaled by alpha / rank)",
    "task": "the task the model is trained and evaluated on",
    "task_params": "JSON object of the task's parameters, e.g. {\"digits\": [1, 2]} (arithmetic) or "
                   "{\"num_people\": 3} (knights_knaves)",
    "prompts_per_step": "prompts sampled per training step (each gets group_size completions)",
    "group_size": "completions per prompt; advantages are rewards relative to their group (>= 2)",
    "temperature": "sampling temperature of the rollouts and of the sampled accuracy",
    "max_new_tokens": "completion length limit in tokens (0: 25% more than the task's longest trace)",
    "objective": "policy-gradient objective (rlbook.objectives.OBJECTIVES) or dpo (online DPO on each group's best "
                 "and worst completion, rlbook.dpo; finetune=lora: the reference is the model with adapters off)",
    "objective_params": "JSON object of the objective's hyper-parameters, e.g. {\"tau\": 0.04} (m2po), "
                        "{\"beta\": 0.1} (dpo)",
    "total_updates": "model updates (optimizer steps) of the run",
    "updates_per_step": "mini-batches per rollout batch (M2PO: 4), each sample used once per epoch",
    "epochs": "passes over each rollout batch",
    "staleness": "model updates between the policy that sampled a batch and the policy it trains "
                 "(a multiple of updates_per_step x epochs)",
    "sync_every": "rollouts come from a frozen copy of the policy refreshed every sync_every updates "
                  "(1 = online, the default; 0 = never: offline, from the starting model; needs staleness 0)",
    "lr": "AdamW learning rate",
    "weight_decay": "AdamW weight decay",
    "max_grad_norm": "gradient norm clipping threshold",
    "normalize_adv_std": "divide each group's advantages by its reward standard deviation (GRPO)",
    "ar_alpha": "Advantage Reweighting alpha in [0, 1] (0: off)",
    "lopti_eta": "Lopti probability threshold in (-1, 1) (0: off; < 0 reverses the stage order)",
    "fused_ratio": "fused Triton ratio op: auto (on a GPU), on (needs a GPU), off (reference PyTorch path), chunked "
                   "(lm_head and ratio op a chunk of response tokens at a time; finetune=lora)",
    "micro_batch_size": "sequences per forward/backward pass of an update (0: the whole mini-batch at once); the "
                        "update is the same, accumulated over micro-batches",
    "rollout_batch_size": "sequences sampled at once in rollouts and evaluation, a multiple of group_size (0: a "
                          "step's prompts_per_step x group_size at once; evaluation 256); bounds the KV cache",
    "prefix_sharing": "training pass runs each distinct prompt once, its KV cache shared by its group: about half "
                      "the FLOPs; not bit-equal (rlbook.losspath.PREFIX_SHARING_TOLERANCE)",
    "merged_sampling": "rollouts sample from a lean copy with the LoRA update merged into the weights (dense Qwen3); "
                       "not bit-equal (rlbook.lean_decoder.MERGED_TOLERANCE)",
    "static_sampling": "rollouts decode with a preallocated KV cache, a fixed-shape step replayed from a CUDA graph "
                       "on a GPU (rlbook.static_sampling); needs merged_sampling",
    "skip_zero_advantage": "sequences whose every advantage is 0 run without grad in the training pass (no "
                           "backward; micro-batched updates skip them anyway); same gradient, other summation order",
    "sampling_graph": "on-policy updates backpropagate through the sampling pass (rlbook.lean_decoder, LoRA): no "
                      "training forward; not bit-equal",
    "rollout_dtype": "precision of the rollout engine: float32 (the trained model itself) or bfloat16 (a copy of "
                     "the policy in bfloat16 with its KV cache, as an inference engine; training stays float32)",
    "router_noise": "mixture of experts: std of Gaussian noise added to the router logits at rollout (a second, "
                    "dosable source of train-vs-rollout routing mismatch; 0: none)",
    "router_replay": "mixture of experts: Rollout Routing Replay (R3, arXiv 2510.11370): training routes each token "
                     "to the experts it had at rollout, gate weights from the trainer's own router logits",
    "eval_every": "evaluate greedy and sampled accuracy every this many updates",
    "eval_size": "evaluation problems: the first eval_size of the fixed evaluation set (data/eval)",
    "eval_samples": "samples per problem for the sampled accuracy (greedy accuracy takes one)",
    "checkpoint_every": "save a resumable checkpoint every this many updates",
    "warm_start": "JSON object of overrides for the warm start (rlbook.pretrain.WarmStartConfig), e.g. "
                  "{\"lr\": 3e-3, \"max_steps\": 500}",
}


@dataclass
class RunConfig:
    experiment: str = "default"
    name: str = "run"
    seed: int = 0
    # model
    preset: str = "nano-small"
    init: str = "warm"
    finetune: str = "lora"
    lora_rank: int = 16
    lora_alpha: float = 32.0
    # task and rollouts
    task: str = "arithmetic"
    task_params: dict = field(default_factory=dict)
    prompts_per_step: int = 16
    group_size: int = 8
    temperature: float = 1.0
    max_new_tokens: int = 0
    # optimisation
    objective: str = "grpo"
    objective_params: dict = field(default_factory=dict)
    total_updates: int = 400
    updates_per_step: int = 1
    epochs: int = 1
    staleness: int = 0
    sync_every: int = 1
    lr: float = 2e-3
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    normalize_adv_std: bool = True
    ar_alpha: float = 0.0
    lopti_eta: float = 0.0
    fused_ratio: str = "auto"
    micro_batch_size: int = 0
    rollout_batch_size: int = 0
    prefix_sharing: bool = False
    merged_sampling: bool = False
    static_sampling: bool = False
    skip_zero_advantage: bool = False
    sampling_graph: bool = False
    # mixture of experts: train-vs-rollout mismatch and router replay (chapter 6)
    rollout_dtype: str = "float32"
    router_noise: float = 0.0
    router_replay: bool = False
    # evaluation and bookkeeping
    eval_every: int = 50
    eval_size: int = 200
    eval_samples: int = 4
    checkpoint_every: int = 50
    warm_start: dict = field(default_factory=dict)

    def __post_init__(self):
        from .dpo import check_dpo_params
        from .models import PRESETS
        from .objectives import OBJECTIVES, check_objective_params
        from .staleness import queue_depth
        from .tasks import TASKS

        for f in fields(self):  # types first, so later checks compare numbers with numbers
            _check_type(f.name, getattr(self, f.name), f.default if f.default is not MISSING else f.default_factory())
        for name in ("experiment", "name"):
            if not DIRECTORY_NAME.fullmatch(getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)!r} is not valid: 1-100 letters, digits or . _ + = - "
                                 "(not starting with .)")
        if self.experiment == "warmstart":
            raise ValueError("experiment='warmstart' is reserved for the cache of warm starts; choose another name")
        _choose("preset", self.preset, list(PRESETS))
        _choose("task", self.task, list(TASKS))
        _choose("objective", self.objective, [*OBJECTIVES, "dpo"])
        _choose("finetune", self.finetune, FINETUNE)
        _choose("fused_ratio", self.fused_ratio, FUSED_RATIO)
        _check_task(self.task, self.task_params)
        try:
            if self.objective == "dpo":
                check_dpo_params(self.objective_params)
            else:
                check_objective_params(self.objective, self.objective_params)
        except ValueError as error:
            raise ValueError(f"objective_params={self.objective_params!r}: {error}") from None
        _check_warm_start(self.warm_start)
        if self.fused_ratio == "chunked" and self.finetune != "lora":
            raise ValueError("fused_ratio='chunked' computes no lm_head gradient, so it needs finetune='lora'; use "
                             "fused_ratio='on' or 'off' with finetune='full'")
        if self.prefix_sharing and self.fused_ratio in ("on", "chunked"):
            raise ValueError(f"prefix_sharing=True runs the reference loss path with shared prompts; it cannot be "
                             f"combined with fused_ratio={self.fused_ratio!r} (use 'auto' or 'off')")
        if self.merged_sampling and PRESETS[self.preset].moe:
            raise ValueError(f"merged_sampling=True needs a dense model; preset {self.preset!r} is a mixture of "
                             "experts")
        if self.static_sampling and not self.merged_sampling:
            raise ValueError("static_sampling=True decodes with the lean merged decoder: it needs merged_sampling=True "
                             "(a dense preset, rollout_dtype='float32')")
        if self.sampling_graph:
            _check_sampling_graph(self)
        if self.objective == "dpo":
            _check_dpo(self)
        _check_rollout_engine(self)
        if self.micro_batch_size < 0:
            raise ValueError(f"micro_batch_size={self.micro_batch_size} must be >= 0 (0: the whole mini-batch in one "
                             "pass)")
        if not 0 <= self.seed < MAX_SEED:
            raise ValueError(f"seed={self.seed} must be in [0, {MAX_SEED})")
        positive = ("prompts_per_step", "total_updates", "updates_per_step", "epochs", "lr", "eval_every",
                    "eval_size", "eval_samples", "checkpoint_every", "lora_rank", "lora_alpha")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be > 0")
        if self.group_size < 2:
            raise ValueError(f"group_size={self.group_size}: GRPO needs at least 2 completions per prompt")
        if self.rollout_batch_size < 0 or self.rollout_batch_size % self.group_size:
            raise ValueError(f"rollout_batch_size={self.rollout_batch_size} must be a multiple of group_size="
                             f"{self.group_size} (whole groups), or 0: every prompt of a step at once")
        if self.prompts_per_step % self.updates_per_step:
            raise ValueError(f"prompts_per_step={self.prompts_per_step} must split evenly into "
                             f"updates_per_step={self.updates_per_step} mini-batches (whole groups per mini-batch)")
        if self.temperature < 0 or self.max_new_tokens < 0 or self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise ValueError("temperature, max_new_tokens and weight_decay must be >= 0 and max_grad_norm > 0; got "
                             f"{self.temperature}, {self.max_new_tokens}, {self.weight_decay}, {self.max_grad_norm}")
        if not 0 <= self.ar_alpha <= 1:
            raise ValueError(f"ar_alpha={self.ar_alpha}: Advantage Reweighting needs alpha in [0, 1]")
        if not -1 < self.lopti_eta < 1:
            raise ValueError(f"lopti_eta={self.lopti_eta}: Lopti needs eta in (-1, 1) (0 = off)")
        per_batch = self.updates_per_step * self.epochs
        if self.staleness % per_batch:
            raise ValueError(f"staleness={self.staleness} must be a multiple of the updates each rollout batch feeds, "
                             f"updates_per_step={self.updates_per_step} x epochs={self.epochs} = {per_batch}")
        queue_depth(self.staleness, per_batch)
        if self.sync_every < 0 or (self.sync_every != 1 and (self.staleness or self.sync_every % per_batch
                                                             or self.sampling_graph)):
            raise ValueError(f"sync_every={self.sync_every}: must be 1 (online), 0 (never) or a multiple of "
                             f"updates_per_step x epochs = {per_batch}, with staleness 0 (got {self.staleness}) and "
                             "sampling_graph off (it needs on-policy samples)")
        if not self.init:
            raise ValueError(f"init is empty: one of {INIT} or a checkpoint directory")

    def check_runnable(self) -> None:
        """What this machine must provide to train the run: checked before a directory is made or a model loaded."""
        import torch

        from .models import get_preset

        interpreted = os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton") is not None
        if self.fused_ratio == "on" and not (torch.cuda.is_available() or interpreted):
            raise ValueError("fused_ratio='on' needs a CUDA GPU (the fused Triton kernel) and none is available; "
                             "use fused_ratio='auto' (fused only on a GPU) or 'off'")
        if self.init not in INIT:
            _check_checkpoint("init", self.init)
        elif get_preset(self.preset).hub_id is not None:
            _check_checkpoint("preset", get_preset(self.preset).hub_id)

    @classmethod
    def from_dict(cls, values: dict) -> "RunConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; valid keys: {', '.join(sorted(known))}")
        return cls(**values)

    def replace(self, **changes) -> "RunConfig":
        return RunConfig.from_dict({**asdict(self), **changes})

    def to_dict(self) -> dict:
        return asdict(self)

    def identity(self) -> dict:
        """What a run's result depends on: every field but the display names, and the versions of the code."""
        values = {k: v for k, v in asdict(self).items() if k not in ("name", "experiment")}
        # fields newer than stored runs: unset (their default), they leave the identity unchanged
        for name in ("micro_batch_size", "rollout_batch_size", "prefix_sharing", "merged_sampling",
                     "static_sampling", "skip_zero_advantage", "sampling_graph"):
            if not values[name]:
                del values[name]
        for name, default in (("rollout_dtype", "float32"), ("router_noise", 0.0), ("router_replay", False)):
            if values[name] == default:
                del values[name]
        if values["sync_every"] == 1:  # online, as every run before the field existed
            del values["sync_every"]
        values["training_version"] = TRAINING_VERSION
        if self.init == "warm":
            values["warm_start_version"] = WARM_START_VERSION
        return values

    def hash(self) -> str:
        """Identity of a run as 10 hex digits (renaming a run does not retrain it; new code does)."""
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:10]


def _check_sampling_graph(config: "RunConfig") -> None:
    """The sampling pass's graph is the update's only when each batch makes one update, right after it is sampled,
    with the whole batch at once, through LoRA on a dense model."""
    from .models import PRESETS

    needed = {"staleness": 0, "updates_per_step": 1, "epochs": 1, "micro_batch_size": 0, "rollout_batch_size": 0,
              "lopti_eta": 0.0, "finetune": "lora", "prefix_sharing": False, "skip_zero_advantage": False,
              "merged_sampling": False}
    wrong = {k: getattr(config, k) for k, v in needed.items() if getattr(config, k) != v}
    if wrong or PRESETS[config.preset].moe or config.objective in ("tis", "decoupled"):
        raise ValueError(f"sampling_graph=True backpropagates through the sampling pass, so it needs {needed}, a "
                         f"dense preset and an objective without a proximal policy (not tis/decoupled); got {wrong}, "
                         f"preset={config.preset!r}, objective={config.objective!r}")


def _check_dpo(config: "RunConfig") -> None:
    """Online DPO pairs whole groups of one mini-batch and takes the model with its LoRA adapters switched off as
    the reference policy; the token-level knobs of the policy-gradient objectives do not apply to it."""
    needed = {"finetune": "lora", "micro_batch_size": 0, "ar_alpha": 0.0, "lopti_eta": 0.0, "sampling_graph": False}
    wrong = {k: getattr(config, k) for k, v in needed.items() if getattr(config, k) != v}
    if wrong:
        raise ValueError(f"objective='dpo' needs {needed} (the reference policy is the model with its adapters off; "
                         f"pairs are whole groups of one pass); got {wrong}")


def _check_rollout_engine(config: "RunConfig") -> None:
    """Rollout precision, router noise and router replay (chapter 6): the last two need a mixture of experts."""
    from .models import PRESETS

    _choose("rollout_dtype", config.rollout_dtype, ROLLOUT_DTYPES)
    if config.rollout_dtype != "float32" and (config.sampling_graph or config.merged_sampling):
        raise ValueError(f"rollout_dtype={config.rollout_dtype!r} samples from a bfloat16 copy of the policy; it "
                         "cannot be combined with sampling_graph or merged_sampling (their own float32 decoder)")
    if config.router_noise < 0:
        raise ValueError(f"router_noise={config.router_noise} must be >= 0 (a standard deviation; 0: none)")
    moe = PRESETS[config.preset].moe or config.init not in INIT  # a checkpoint's architecture is checked at load
    if (config.router_noise or config.router_replay) and not moe:
        raise ValueError(f"router_noise and router_replay act on a mixture of experts; preset {config.preset!r} is "
                         f"dense (choose one of: {', '.join(n for n, p in PRESETS.items() if p.moe)})")
    if config.router_replay and config.prefix_sharing:
        raise ValueError("router_replay=True replays the routing of whole sequences; it cannot be combined with "
                         "prefix_sharing=True (prompt and response run in separate calls)")


def _choose(name, value, valid):
    if value not in valid:
        raise ValueError(f"{name}={value!r} is not valid; choose one of: {', '.join(map(str, valid))}")


def _check_type(name: str, value, default, optional: bool = False) -> None:
    """value has the type of default (an int is a float; a bool is no number); floats are finite; dicts are JSON."""
    if value is None and optional:
        return
    expected = (int, float) if type(default) is float else type(default)
    if not isinstance(value, expected) or (isinstance(value, bool) and type(default) is not bool):
        raise ValueError(f"{name}={value!r} has type {type(value).__name__}; expected {type(default).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name}={value!r} is not a finite number")
    if isinstance(value, dict):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{name}={value!r} is not a JSON object of finite values ({error})") from None


def _check_task(task: str, params: dict) -> None:
    """The task accepts params and makes and traces problems with them (any failure is the parameters' fault)."""
    from .tasks import TASKS, make_task

    try:
        made = make_task(task, **params)
        made.trace(made.generate(2, seed=0)[1])
    except Exception as error:  # the task's own message, whatever its type, named as a task_params error
        accepted = ", ".join(inspect.signature(TASKS[task]).parameters)
        raise ValueError(f"task_params={params!r} is not valid for task {task!r}: {error} (its parameters: "
                         f"{accepted})") from None


def _check_warm_start(overrides: dict) -> None:
    """Keys, types and values of the warm-start overrides (preset, task and task_params come from the run)."""
    from .pretrain import WarmStartConfig

    valid = {f.name: f for f in fields(WarmStartConfig) if f.name not in WARM_START_FROM_RUN}
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise ValueError(f"warm_start keys {unknown} are not valid; valid keys: {', '.join(valid)}")
    for key, value in overrides.items():
        _check_type(f"warm_start.{key}", value, valid[key].default, optional="None" in str(valid[key].type))
        if isinstance(value, (int, float)) and value < 0:
            raise ValueError(f"warm_start.{key}={value!r} must be >= 0")
    try:
        WarmStartConfig(**overrides)
    except ValueError as error:
        raise ValueError(f"warm_start={overrides!r}: {error}") from None


def _check_checkpoint(name: str, checkpoint: str) -> None:
    """A checkpoint directory with a config, weights and a tokenizer, or a hub id in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    from .models import CHECKPOINT_FILES

    if "\x00" in checkpoint:
        raise ValueError(f"{name}={checkpoint!r}: a path cannot hold a NUL character")
    local = Path(checkpoint).expanduser()
    if local.is_dir():
        missing = [what for what, patterns in CHECKPOINT_FILES.items() if not any(any(local.glob(p)) for p in patterns)]
        if missing:
            raise ValueError(f"{name}={checkpoint!r}: the checkpoint directory {local.resolve()} has no "
                             f"{', '.join(missing)} (save it with save_pretrained)")
        return
    try:
        cached = isinstance(try_to_load_from_cache(checkpoint, "config.json"), str)
    except ValueError:  # not even a valid hub id
        cached = False
    if not (checkpoint.count("/") == 1 and not checkpoint.startswith((".", "/", "~")) and cached):
        raise ValueError(f"{name}={checkpoint!r}: no checkpoint directory at {local.resolve()} and no such model in "
                         "the Hugging Face cache; use init=warm, init=scratch or a directory saved with "
                         "save_pretrained")
