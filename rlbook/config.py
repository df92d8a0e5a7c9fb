"""Run configuration: one dataclass, validated on construction; a wrong key or value names the field and the choices."""
from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, asdict, dataclass, field, fields

from .versions import TRAINING_VERSION, WARM_START_VERSION

FINETUNE = ("lora", "full")
FUSED_RATIO = ("auto", "on", "off")
INIT = ("warm", "scratch")


@dataclass
class RunConfig:
    experiment: str = "default"
    name: str = "run"
    seed: int = 0
    # model
    preset: str = "nano-small"
    init: str = "warm"  # warm: the cached warm-start of (preset, task); scratch: random weights; or a checkpoint path
    finetune: str = "lora"
    lora_rank: int = 16
    lora_alpha: float = 32.0
    # task and rollouts
    task: str = "arithmetic"
    task_params: dict = field(default_factory=dict)
    prompts_per_step: int = 16
    group_size: int = 8
    temperature: float = 1.0
    max_new_tokens: int = 0  # 0: derived from the task's traces
    # optimisation
    objective: str = "grpo"
    objective_params: dict = field(default_factory=dict)
    total_updates: int = 400
    updates_per_step: int = 1  # mini-batches per rollout batch (M2PO: 4), each sample used once per epoch
    epochs: int = 1
    staleness: int = 0  # model updates between the sampling policy and the policy being updated
    lr: float = 2e-3
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    normalize_adv_std: bool = True
    ar_alpha: float = 0.0  # Advantage Reweighting alpha (0 = off)
    lopti_eta: float = 0.0  # Lopti threshold (0 = off; < 0 reverses the stage order)
    fused_ratio: str = "auto"
    # evaluation and bookkeeping
    eval_every: int = 50
    eval_size: int = 200  # the first eval_size problems of the fixed evaluation set (data/eval)
    eval_samples: int = 4  # samples per problem for the sampled accuracy (greedy accuracy takes one)
    checkpoint_every: int = 50
    warm_start: dict = field(default_factory=dict)  # overrides for pretrain.WarmStartConfig

    def __post_init__(self):
        from .models import PRESETS
        from .objectives import OBJECTIVES, check_objective_params
        from .staleness import queue_depth
        from .tasks import TASKS, make_task

        def choose(name, value, valid):
            if value not in valid:
                raise ValueError(f"{name}={value!r} is not valid; choose one of: {', '.join(map(str, valid))}")

        for f in fields(self):  # types first, so later checks compare numbers with numbers
            value, default = getattr(self, f.name), f.default if f.default is not MISSING else f.default_factory()
            expected = (int, float) if type(default) is float else type(default)
            if not isinstance(value, expected) or (isinstance(value, bool) and type(default) is not bool):
                raise ValueError(f"{f.name}={value!r} has type {type(value).__name__}; expected {type(default).__name__}")
        choose("preset", self.preset, list(PRESETS))
        choose("task", self.task, list(TASKS))
        choose("objective", self.objective, list(OBJECTIVES))
        choose("finetune", self.finetune, FINETUNE)
        choose("fused_ratio", self.fused_ratio, FUSED_RATIO)
        make_task(self.task, **self.task_params)  # raises on bad task parameters
        check_objective_params(self.objective, self.objective_params)
        if self.fused_ratio == "on" and self.objective == "gspo":
            raise ValueError("fused_ratio='on' cannot run objective 'gspo' (sequence-level, reference path only); "
                             "use fused_ratio='auto' or 'off'")
        positive = ("prompts_per_step", "total_updates", "updates_per_step", "epochs", "lr", "eval_every",
                    "eval_size", "eval_samples", "checkpoint_every", "lora_rank")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be > 0")
        if self.group_size < 2:
            raise ValueError(f"group_size={self.group_size}: GRPO needs at least 2 completions per prompt")
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
        if not self.init:
            raise ValueError(f"init is empty: one of {INIT} or a checkpoint directory")

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
        values["training_version"] = TRAINING_VERSION
        if self.init == "warm":
            values["warm_start_version"] = WARM_START_VERSION
        return values

    def hash(self) -> str:
        """Identity of a run as 10 hex digits (renaming a run does not retrain it; new code does)."""
        return hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:10]
