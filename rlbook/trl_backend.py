"""Train a RunConfig with TRL's GRPOTrainer and store it in the RunStore beside rlbook's own runs.

The TRL run starts from the same model (the same warm start, the same LoRA adapter init), draws the same prompts for
the same seed (rlbook.seeds' "rl_prompts" stream), scores them with the same reward, and writes config.json,
metrics.jsonl (rlbook's metric names, the evaluation rows of rlbook.evaluate) and meta.json (backend "trl" and its
version), so a chapter draws both runs with the same code. What TRL cannot express is refused before anything loads
(`refusals`); what it computes differently is listed in the run's meta (`differences`).

    python -m rlbook train --backend trl --experiment 01_grpo_trl ...      (pip install -e ".[trl]")
"""
from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import fields

from transformers import TrainerCallback

from .config import RunConfig
from .runs import Run, RunStore, environment
from .seeds import stream_seed
from .versions import TRAINING_VERSION

# the release this mapping was read from (trl/trainer/grpo_config.py, trl/trainer/grpo_trainer.py)
TRL_VERSION = "1.16.0"
BACKEND = "trl"
# rlbook's engine (rlbook.engines), loss kernel and rollout memory bound: they change how rlbook computes an update,
# not the update, so a TRL run ignores them (and says so in its meta)
ENGINE_OPTIONS = ("engine", "fused_ratio", "rollout_batch_size")
# rlbook metric name -> the name TRL 1.16's GRPOTrainer logs for the same quantity
# (trl/trainer/grpo_trainer.py, `_metrics`)
TRL_METRIC_NAMES = {"reward": "reward", "zero_std_frac": "frac_reward_zero_std", "response_len": "completions/mean_length",
                    "entropy": "entropy", "clip_frac_low": "clip_ratio/low_mean", "clip_frac_high": "clip_ratio/high_mean",
                    "loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate", "train_acc": "train_acc"}
# objective -> (loss_type, importance_sampling_level); the objectives TRL 1.16 computes
TRL_LOSSES = {"grpo": ("dapo", "token"), "no_clip": ("dapo", "token"), "gspo": ("grpo", "sequence")}
NO_CLIP_EPSILON = 1e6  # an objective without a clip, as a clipped loss with a bound no ratio reaches


def refusals(config: RunConfig) -> list[str]:
    """One line per setting of config that TRL's GRPOTrainer cannot express, naming what TRL offers instead."""
    lines = []
    offers = {
        "m2po": "TRL 1.16 has no second-moment mask; it offers the clipped surrogate (epsilon, epsilon_high) and "
                "off_policy_mask_threshold (a per-sequence mask on negative-advantage, high-KL sequences)",
        "m2po_cap": "TRL 1.16 has no second-moment cap; it offers the clipped surrogate (epsilon, epsilon_high)",
        "tis": "TRL 1.16 truncates importance weights only against vLLM's sampling mismatch (use_vllm=True, "
               "vllm_importance_sampling_mode='token_truncate', vllm_importance_sampling_clip_max), not against a "
               "proximal policy; this backend generates with the trained model, so there is no mismatch to correct",
        "decoupled": "TRL 1.16 has no proximal policy (decoupled PPO is AReaL's: rlbook export --to areal)",
        "dpo": "online DPO is a separate trainer in TRL (trl.experimental.online_dpo.OnlineDPOTrainer), not "
               "GRPOTrainer",
    }
    offers["m2po_areal"] = "TRL 1.16 has no proximal policy and no second-moment mask (AReaL's own: rlbook export --to areal)"
    if config.objective not in TRL_LOSSES:
        lines.append(f"objective={config.objective!r}: "
                     f"{offers.get(config.objective, 'TRL 1.16 has no such loss; it offers loss_type=' + repr(list(TRL_LOSSES)))}")
    if config.staleness:
        lines.append(f"staleness={config.staleness}: TRL trains on-policy; its AsyncGRPOTrainer "
                     "(trl.experimental.async_grpo, max_staleness) discards samples older than a bound instead of "
                     "training every batch exactly s updates late (rlbook's FIFO)")
    if config.sync_every != 1:
        lines.append(f"sync_every={config.sync_every}: GRPOTrainer generates with the current weights every step; "
                     "AsyncGRPOConfig.weight_sync_steps pushes weights to an asynchronous vLLM server every k steps "
                     "(a lag that varies with the server's speed, not rlbook's frozen copy)")
    if config.ar_alpha:
        lines.append(f"ar_alpha={config.ar_alpha}: TRL 1.16 has no Advantage Reweighting; it offers "
                     "top_entropy_quantile (train only on the highest-entropy tokens)")
    if config.lopti_eta:
        lines.append(f"lopti_eta={config.lopti_eta}: TRL 1.16 has no two-stage (Lopti) update; one optimizer step per "
                     "mini-batch")
    if config.router_replay:
        lines.append("router_replay=True: TRL 1.16 has no routing replay (R3); it offers router_aux_loss_coef only "
                     "(verl's router replay: rlbook export --to verl)")
    if config.router_noise:
        lines.append(f"router_noise={config.router_noise}: TRL has no hook on the router logits of its generator")
    if config.rollout_dtype != "float32":
        lines.append(f"rollout_dtype={config.rollout_dtype!r}: TRL generates with the trained model itself (or, with "
                     "use_vllm=True on a GPU, with vLLM in its own dtype, corrected by vllm_importance_sampling_*)")
    mini = config.prompts_per_step * config.group_size // config.updates_per_step
    if config.micro_batch_size and mini % config.micro_batch_size:
        lines.append(f"micro_batch_size={config.micro_batch_size}: TRL accumulates whole micro-batches; it must divide "
                     f"the mini-batch of {mini} sequences")
    return lines


def check_expressible(config: RunConfig) -> None:
    """ValueError (one line) naming every setting of config that TRL cannot express, and what TRL offers instead."""
    lines = refusals(config)
    if lines:
        raise ValueError(f"the TRL backend cannot train this run: {'; '.join(lines)}")


def clip_bounds(config: RunConfig) -> tuple[float, float]:
    """(eps_low, eps_high) of the run's objective (rlbook.objectives' defaults unless objective_params sets them);
    NO_CLIP_EPSILON, a bound no ratio reaches, for an objective without a clip (no_clip, m2po, m2po_cap)."""
    from .objectives import OBJECTIVES, objective_defaults

    defaults = objective_defaults(config.objective) if config.objective in OBJECTIVES else {}
    return tuple(config.objective_params.get(key, defaults.get(key, NO_CLIP_EPSILON))
                 for key in ("eps_low", "eps_high"))


def trl_arguments(config: RunConfig, max_completion_length: int) -> dict:
    """GRPOConfig keyword arguments of config, without the machine's own; an objective TRL lacks (refusals())
    gets TRL's clipped surrogate with the objective's clip bounds (none: NO_CLIP_EPSILON)."""
    loss_type, level = TRL_LOSSES.get(config.objective, ("dapo", "token"))
    params = config.objective_params
    low, high = clip_bounds(config)
    samples = config.prompts_per_step * config.group_size
    mini = samples // config.updates_per_step  # sequences per model update
    per_pass = config.micro_batch_size or mini  # sequences per forward/backward pass
    arguments = dict(
        learning_rate=config.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm, optim="adamw_torch", max_steps=config.total_updates,
        per_device_train_batch_size=per_pass, gradient_accumulation_steps=mini // per_pass,
        steps_per_generation=samples // per_pass, num_iterations=config.epochs,
        num_generations=config.group_size, max_completion_length=max_completion_length,
        temperature=config.temperature, top_p=1.0, top_k=0,
        beta=0.0, loss_type=loss_type, importance_sampling_level=level, epsilon=low, epsilon_high=high,
        scale_rewards="group" if config.normalize_adv_std else "none", shuffle_dataset=False,
    )
    if params.get("dual_clip") is not None:
        arguments["delta"] = params["dual_clip"]  # TRL clamps r at delta: for A < 0 this is the dual clip
    return arguments


def lora_arguments(config: RunConfig) -> dict | None:
    """peft.LoraConfig keyword arguments of a LoRA run (rlbook.models.add_lora's), None for full fine-tuning."""
    from .models import LORA_TARGETS

    if config.finetune != "lora":
        return None
    return dict(r=config.lora_rank, lora_alpha=config.lora_alpha, lora_dropout=0.0, target_modules=list(LORA_TARGETS),
                bias="none", task_type="CAUSAL_LM")


def differences(config: RunConfig) -> list[str]:
    """What TRL computes differently from rlbook for this config (each line read from TRL 1.16,
    trl/trainer/grpo_trainer.py)."""
    lines = ["advantages: TRL divides by (group std + 1e-4), rlbook by (group std + 1e-6); rlbook sets a tied "
             "group's advantages to exactly 0",
             "random streams: TRL samples with transformers' generate from torch's global generator (seeded with the "
             "run's rollout stream), rlbook with its own sampling loop, so the completions differ",
             "ratio: TRL's old log-probs are recomputed by a forward pass (exactly its current ones when a batch "
             "makes one update); rlbook uses the log-probs recorded while sampling"]
    if config.updates_per_step > 1:
        lines.append("mini-batches: TRL shuffles a rollout batch's sequences before splitting it (rlbook keeps whole "
                     "groups together)" + (", and loss_type='dapo' divides by the batch's mean token count per "
                                           "mini-batch, not each mini-batch's own" if config.objective != "gspo" else ""))
    if config.updates_per_step * config.epochs > 1:
        lines.append("rows: TRL logs the batch's reward, train_acc, zero_std_frac and response_len once, on the update "
                     "that sampled it (rlbook: on every update, for its mini-batch)")
    if config.objective == "gspo":
        lines.append("gspo: TRL's 'grpo' aggregation averages over every sequence, rlbook's over sequences with at "
                     "least one response token")
    if config.objective == "no_clip":
        lines.append(f"no_clip: TRL has no unclipped loss; epsilon = epsilon_high = {NO_CLIP_EPSILON:g} never binds")
    ignored = {f.name: getattr(config, f.name) for f in fields(config)
               if f.name in ENGINE_OPTIONS and getattr(config, f.name) != f.default}
    if ignored:
        lines.append(f"rlbook engine options ignored (TRL runs its own forward and generation): {ignored}")
    return lines


def prompt_rows(config: RunConfig, task) -> list[dict]:
    """The training prompts in the order rlbook's trainer draws them: step s samples prompts_per_step problems from
    the "rl_prompts" stream at index s (rlbook.seeds); each row carries its problem for the reward."""
    steps = math.ceil(config.total_updates / (config.updates_per_step * config.epochs))
    return [{"prompt": p["prompt"], "problem": json.dumps(p)}
            for step in range(steps)
            for p in task.generate(config.prompts_per_step, seed=stream_seed("rl_prompts", config.seed, step))]


class RewardFunction:
    """TRL reward function of a task: the task's reward per completion; logs the batch's accuracy as train_acc."""

    def __init__(self, task):
        self.task, self.__name__ = task, "task_reward"

    def __call__(self, prompts, completions, problem, log_metric=None, **_):
        scores = [self.task.score(json.loads(p), c) for p, c in zip(problem, completions)]
        if log_metric is not None:
            log_metric("train_acc", sum(s.correct for s in scores) / len(scores))
        return [s.reward for s in scores]


def train_with_trl(config: RunConfig, store: RunStore | None = None, progress: bool = True) -> Run:
    """Replay a finished TRL run of config, or train it with TRL's GRPOTrainer into the RunStore (no resume: an
    interrupted TRL run is trained again from the start)."""
    check_expressible(config)
    try:
        import trl
    except ImportError:
        raise ValueError("the TRL backend needs TRL: pip install -e \".[trl]\" (trl==1.16.0)") from None
    if trl.__version__ != TRL_VERSION:
        raise ValueError(f"the TRL backend was written for trl=={TRL_VERSION}; this environment has "
                         f"{trl.__version__} (pip install trl=={TRL_VERSION})")
    from .obtain import run_or_load

    return run_or_load(config, store, progress, references=False, backend=BACKEND, train=_train)


def _train(config: RunConfig, run: Run, progress: bool) -> None:
    """Train run from its start with TRL's GRPOTrainer (rows of an interrupted try are dropped)."""
    import torch
    import trl
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from .evaluate import evaluation_problems
    from .models import set_cpu_threads
    from .tasks import make_task
    from .trainer import init_policy, run_completion_budget

    run.truncate(-1)
    set_cpu_threads()
    torch.manual_seed(stream_seed("init", config.seed))  # as rlbook's trainer: the same adapter init
    model, tokenizer = init_policy(config, run.store, progress)
    task = make_task(config.task, **config.task_params)
    max_new = run_completion_budget(config, task, tokenizer)
    eval_set = evaluation_problems(config.task, config.task_params, config.eval_size)
    run.update_meta(complete=False, backend=BACKEND, trl=trl.__version__, differences=differences(config),
                    training_version=TRAINING_VERSION, **environment(config.device))
    recorder = MetricsRecorder(config, run, model, tokenizer, task, eval_set, max_new, progress)
    recorder.evaluate_base()
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, use_cpu=config.device == "cpu", seed=config.seed,
                          **trl_arguments(config, max_new), logging_steps=1, report_to="none", save_strategy="no",
                          disable_tqdm=True, dataloader_num_workers=0, gradient_checkpointing=False)
        trainer = GRPOTrainer(model=model, reward_funcs=RewardFunction(task), args=args,
                              train_dataset=Dataset.from_list(prompt_rows(config, task)), processing_class=tokenizer,
                              callbacks=[recorder])
        trainer.remove_callback(PrinterCallback)  # rows go to metrics.jsonl, not to stdout
        trainer.train()
    recorder.close()
    run.finish(updates=config.total_updates, wall_time_s=round(time.time() - recorder.start, 1))


class MetricsRecorder(TrainerCallback):
    """A TrainerCallback writing one rlbook metrics row per TRL update, with rlbook's evaluations every eval_every."""

    def __init__(self, config: RunConfig, run: Run, model, tokenizer, task, eval_set, max_new: int, progress: bool):
        from .progress import progress_bar

        self.config, self.run, self.model, self.tokenizer = config, run, model, tokenizer
        self.task, self.eval_set, self.max_new = task, eval_set, max_new
        self.bar = progress_bar(None, progress, total=config.total_updates, desc=f"{config.name} (TRL)")
        self.start = self.tic = time.time()
        self.pending: dict = {}

    def evaluation(self, update: int) -> dict:
        from .evaluate import evaluation_row

        config = self.config  # rollout_batch_size is rlbook's memory bound, which TRL ignores (ENGINE_OPTIONS)
        return evaluation_row(self.model, self.tokenizer, self.task, self.eval_set, self.max_new, config.temperature,
                              config.seed, config.eval_samples, update)

    def evaluate_base(self) -> None:
        self.run.append({"update": 0, **self.evaluation(0)})

    def on_train_begin(self, args, state, control, **kwargs):
        import torch

        torch.manual_seed(stream_seed("rollout", self.config.seed))  # TRL samples from torch's global generator
        self.start = self.tic = time.time()

    def on_step_end(self, args, state, control, **kwargs):
        update = state.global_step
        self.pending = {"update_s": time.time() - self.tic}
        if update % self.config.eval_every == 0 or update == self.config.total_updates:
            self.pending.update(self.evaluation(update))

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:  # the summary TRL logs after the last update
            return
        config, update = self.config, state.global_step
        per_batch = config.updates_per_step * config.epochs
        row = {"update": update, "step": (update - 1) // per_batch + 1,
               "epoch": (update - 1) // config.updates_per_step % config.epochs, "policy_lag": 0}
        row.update({ours: logs[theirs] for ours, theirs in TRL_METRIC_NAMES.items() if logs.get(theirs) is not None})
        row.update(self.pending, wall_time_s=time.time() - self.start)
        self.run.append(row)
        self.bar.update(1)
        self.pending, self.tic = {}, time.time()

    def close(self) -> None:
        self.bar.close()
