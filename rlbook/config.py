"""Run configuration: one dataclass of a run's settings, each value checked on construction.

A wrong key or value is a ValueError naming the field
and the valid choices.

Every RunConfig field has a one-line description in FIELD_HELP (the command line's --help shows it). A config is
checked here, once, on construction: each value, and the rules between settings (which engine can compute it, what
online DPO and router replay need). A mechanism's own parameters are checked by a function of plain values that it
exports and this module calls (the task registry its parameters, an objective its hyper-parameters, the warm start its
overrides); no module this one imports takes a RunConfig. What the machine must provide (a GPU, a checkpoint) is
checked before a run starts (rlbook.obtain.check_runnable). The engine (rlbook.engines) says how a run is computed,
`RunConfig.resolved_engine` which one computes it; its identity (rlbook.identity) what its result depends on.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

from .advantages import check_group_size
from .checks import check_type, choose, defaults
from .engines import DEFAULT_ORDER, ENGINES, HELP as ENGINE_HELP, Engine
from .identity import digest, run_identity
from .seeds import MAX_RUN_SEED as MAX_SEED  # the streams are laid out for seeds below it
from .storage import DEVICES
from .versions import TRAINING_VERSION, WARM_START_VERSION

FINETUNE = ("lora", "full")
FUSED_RATIO = ("auto", "on", "off", "chunked")
INIT = ("warm", "scratch")
DIRECTORY_NAME = re.compile(r"[\w+=-][\w.+=-]{0,99}")  # experiment and name become directory names
POSITIVE = ("prompts_per_step", "total_updates", "updates_per_step", "epochs", "lr", "eval_every", "eval_size",
            "eval_samples", "checkpoint_every", "lora_rank", "lora_alpha")

# the settings of an update that backpropagates through its sampling pass (the graph engine)
SAMPLING_GRAPH_NEEDS = {"staleness": 0, "updates_per_step": 1, "epochs": 1, "sync_every": 1, "micro_batch_size": 0,
                        "rollout_batch_size": 0, "lopti_eta": 0.0, "finetune": "lora"}
# online DPO pairs whole groups of one pass and takes the model with its LoRA adapters off as the reference policy; the
# token-level knobs of the policy-gradient objectives do not apply to it
DPO_NEEDS = {"finetune": "lora", "micro_batch_size": 0, "ar_alpha": 0.0, "lopti_eta": 0.0}

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
    "engine": ENGINE_HELP,
    "device": "where the run computes: cpu, or cuda (one GPU); a GPU run is another result (the same seed gives other "
              "numbers), so it is part of the run's identity and its figures say it was made on a GPU",
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
    engine: str = "auto"
    device: str = "cpu"
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
        from .objective_inputs import check_number
        from .objectives import AR_ALPHA, LOPTI_ETA, OBJECTIVES, check_objective_params
        from .pretrain import WarmStartConfig
        from .router_replay import ROLLOUT_DTYPES
        from .tasks import TASKS, check_task_params

        for name, default in defaults(self).items():  # types first, so later checks compare numbers with numbers
            check_type(name, getattr(self, name), default)
        for name in ("experiment", "name"):
            if not DIRECTORY_NAME.fullmatch(getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)!r} is not valid: 1-100 letters, digits or . _ + = - "
                                 "(not starting with .)")
        if self.experiment == "warmstart":
            raise ValueError("experiment='warmstart' is reserved for the cache of warm starts; choose another name")
        for name, valid in (("preset", PRESETS), ("task", TASKS), ("objective", [*OBJECTIVES, "dpo"]),
                            ("finetune", FINETUNE), ("fused_ratio", FUSED_RATIO), ("device", DEVICES)):
            choose(name, getattr(self, name), list(valid))
        check_task_params(self.task, self.task_params)
        try:
            (check_dpo_params(self.objective_params) if self.objective == "dpo" else
             check_objective_params(self.objective, self.objective_params))
        except ValueError as error:
            raise ValueError(f"objective_params={self.objective_params!r}: {error}") from None
        WarmStartConfig.check_overrides(self.warm_start)
        if self.fused_ratio == "chunked" and self.finetune != "lora":
            raise ValueError("fused_ratio='chunked' computes no lm_head gradient, so it needs finetune='lora'; use "
                             "fused_ratio='on' or 'off' with finetune='full'")
        if self.objective == "dpo" and (wrong := self._differing(DPO_NEEDS)):
            raise ValueError(f"objective='dpo' needs {DPO_NEEDS} (the reference policy is the model with its adapters "
                             f"off; pairs are whole groups of one pass); got {wrong}")
        if self.objective == "dpo" and PRESETS[self.preset].moe:  # its routers train in full beside the adapters
            raise ValueError(f"objective='dpo' needs a dense model: with its adapters off, mixture of experts "
                             f"{self.preset!r} keeps its trained routers, so it is not the reference policy")
        choose("rollout_dtype", self.rollout_dtype, list(ROLLOUT_DTYPES))
        if self.router_noise < 0:
            raise ValueError(f"router_noise={self.router_noise} must be >= 0 (a standard deviation; 0: none)")
        if (self.router_noise or self.router_replay) and not (PRESETS[self.preset].moe or self.from_checkpoint):
            raise ValueError(f"router_noise and router_replay act on a mixture of experts; preset {self.preset!r} is "
                             f"dense (choose one of: {', '.join(n for n, p in PRESETS.items() if p.moe)})")
        if self.micro_batch_size < 0:
            raise ValueError(f"micro_batch_size={self.micro_batch_size} must be >= 0 (0: the whole mini-batch in one "
                             "pass)")
        if not 0 <= self.seed < MAX_SEED:
            raise ValueError(f"seed={self.seed} must be in [0, {MAX_SEED})")
        for name in POSITIVE:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)!r} must be > 0")
        check_group_size(self.group_size)
        if self.rollout_batch_size < 0 or self.rollout_batch_size % self.group_size:
            raise ValueError(f"rollout_batch_size={self.rollout_batch_size} must be a multiple of group_size="
                             f"{self.group_size} (whole groups), or 0: every prompt of a step at once")
        if self.prompts_per_step % self.updates_per_step:
            raise ValueError(f"prompts_per_step={self.prompts_per_step} must split evenly into "
                             f"updates_per_step={self.updates_per_step} mini-batches (whole groups per mini-batch)")
        if self.temperature < 0 or self.max_new_tokens < 0 or self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise ValueError("temperature, max_new_tokens and weight_decay must be >= 0 and max_grad_norm > 0; got "
                             f"{self.temperature}, {self.max_new_tokens}, {self.weight_decay}, {self.max_grad_norm}")
        check_number("ar_alpha", self.ar_alpha, *AR_ALPHA)
        check_number("lopti_eta", self.lopti_eta, *LOPTI_ETA)
        per_batch = self.updates_per_step * self.epochs
        if self.staleness < 0:
            raise ValueError(f"staleness={self.staleness}: must be >= 0 (model updates between sampling and training)")
        if self.staleness % per_batch:
            raise ValueError(f"staleness={self.staleness} must be a multiple of the updates each rollout batch feeds, "
                             f"updates_per_step={self.updates_per_step} x epochs={self.epochs} = {per_batch}")
        # sync_every: 1 (online), 0 (never) or a multiple of the updates a rollout batch feeds, without staleness (the
        # two lags would compound)
        if self.sync_every < 0 or (self.sync_every != 1 and (self.staleness or self.sync_every % per_batch)):
            raise ValueError(f"sync_every={self.sync_every}: must be 1 (online), 0 (never) or a multiple of "
                             f"updates_per_step x epochs = {per_batch}, with staleness 0 (got {self.staleness})")
        if not self.init:
            raise ValueError(f"init is empty: one of {INIT} or a checkpoint directory")
        choose("engine", self.engine, ["auto", *ENGINES])
        if self.engine != "auto" and (reason := self.engine_refusal(ENGINES[self.engine])):
            raise ValueError(f"engine={self.engine!r} cannot compute this config: {reason}; engine='auto' picks the "
                             f"fastest engine that can ({self.resolved_engine.name!r})")

    def _differing(self, needed: dict) -> dict:
        """The fields whose values differ from `needed`, with their values."""
        return {k: getattr(self, k) for k, v in needed.items() if getattr(self, k) != v}

    def engine_refusal(self, engine: Engine) -> str | None:
        """Why `engine` cannot compute this config (None: it can)."""
        from .models import architecture
        from .objectives import needs_proximal

        if engine.prefix_sharing and self.fused_ratio in ("on", "chunked"):
            return (f"shared prompts run the reference loss path, not fused_ratio={self.fused_ratio!r} (use 'auto' or "
                    "'off')")
        if engine.prefix_sharing and self.router_replay:
            return "router_replay replays the routing of whole sequences; shared prompts run prompt and response apart"
        if engine.lean_sampler and (kind := architecture(self.preset, self.init)) != "qwen3":
            model = f"the checkpoint in {self.init!r}" if self.from_checkpoint else f"preset {self.preset!r}"
            return f"the lean sampler needs a dense Qwen3 model; {model} is {kind}"
        if engine.lean_sampler and self.rollout_dtype != "float32":
            return f"the lean sampler is its own float32 rollout engine, not rollout_dtype={self.rollout_dtype!r}"
        if engine.sampling_graph and ((wrong := self._differing(SAMPLING_GRAPH_NEEDS)) or self.objective == "dpo"
                                      or needs_proximal(self.objective)):
            return (f"the update backpropagates through the sampling pass, so it needs {SAMPLING_GRAPH_NEEDS} and an "
                    f"objective without a proximal or reference policy (not tis, decoupled, m2po_areal or dpo); got "
                    f"{wrong}, objective={self.objective!r}")
        return None

    @property
    def resolved_engine(self) -> Engine:
        """The engine that computes this config: its own, or (engine='auto') the first of DEFAULT_ORDER that can (a
        checkpoint directory's model is what its config.json says: a dense Qwen3 gets the lean sampler's engines,
        anything else or an unreadable one the reference engine, which computes every config)."""
        if self.engine != "auto":
            return ENGINES[self.engine]
        return next(ENGINES[name] for name in DEFAULT_ORDER if self.engine_refusal(ENGINES[name]) is None)

    @property
    def from_checkpoint(self) -> bool:
        """init names a checkpoint directory (its architecture is known only when it is loaded)."""
        return self.init not in INIT

    @classmethod
    def from_dict(cls, values: dict) -> "RunConfig":
        """A config from its fields."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; valid keys: {', '.join(sorted(known))}")
        return cls(**values)

    def replace(self, **changes) -> "RunConfig":
        return RunConfig.from_dict({**asdict(self), **changes})

    def to_dict(self) -> dict:
        return asdict(self)

    def identity(self, training_version: int | None = None) -> dict:
        """What a run's result depends on (rlbook.identity), under this code's version or an older one."""
        return run_identity({**asdict(self), "engine": self.resolved_engine.name}, defaults(self),
                            TRAINING_VERSION if training_version is None else training_version, WARM_START_VERSION)

    def hash(self, training_version: int | None = None) -> str:
        """Identity of a run as 10 hex digits (renaming a run does not retrain it; new code does)."""
        return digest(self.identity(training_version))
