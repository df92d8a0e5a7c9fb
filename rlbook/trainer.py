"""The GRPO / M2PO trainer: rollouts -> group advantages -> stale FIFO -> objective -> AdamW, one metrics row per update.

One training step samples `prompts_per_step x group_size` completions (rlbook.rollout.BatchSampler) and makes
`updates_per_step` model updates with them (mini-batches of whole groups, each sample used once per epoch). With
staleness s the batch a step trains on was sampled s updates earlier (rlbook.staleness.StaleQueue): a constant lag.
With `sync_every` = k > 1 the batches are fresh but sampled by a frozen copy of the policy refreshed every k updates
(rlbook.semi_online), so the lag cycles 0..k-1. Checkpoints are taken at step boundaries and hold the queue and the
copy, so a resumed run continues exactly where the uninterrupted one would have been.
"""
from __future__ import annotations

import math
import time
import warnings
from collections import deque
from functools import partial

import torch

from . import checkpoint
from .advantages import group_advantages, zero_variance_fraction
from .config import RunConfig
from .evaluate import completion_budget, evaluation_problems, evaluation_row
from .models import LARGE_HIDDEN, add_lora, build_model, get_preset, load_pretrained, set_cpu_threads
from .losspath import (LogProbPath, Objective, accumulate_gradients, loss_and_tokens, loss_path, no_grad_stats,
                       sequence_inputs)
from .objectives import advantage_reweight, lopti_stages
from .pretrain import WarmStartConfig, warm_start
from .progress import progress_bar
from .rollout import BatchSampler, Rollout
from .router_replay import extreme_fraction, mismatch_stats
from .runs import UNTOUCHED, CorruptRunError, Run, RunStore, environment
from .seeds import stream_seed
from .semi_online import SemiOnlineGenerator
from .staleness import StaleQueue
from .tasks import make_task
from .token_stats import summarize
from .versions import TRAINING_VERSION

TIMING_KEYS = ("wall_time_s", "tokens_per_s", "update_s", "sample_s")  # a row's clock readings (vary run to run)
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")


def run_completion_budget(config: RunConfig, task, tokenizer) -> int:
    """A run's max_new_tokens: the config's when set, else evaluate.completion_budget for its task and tokenizer."""
    return config.max_new_tokens or completion_budget(task, tokenizer)


def warm_start_of(config: RunConfig, store: RunStore | None = None, progress: bool = True):
    """The warm-started checkpoint a run starts from (trained once and cached), or None if it starts elsewhere."""
    preset = get_preset(config.preset)
    if config.init != "warm" or preset.hub_id is not None or config.preset == "qwen3-1.7b-random":
        return None
    start = WarmStartConfig(preset=config.preset, task=config.task, task_params=config.task_params,
                            device=config.device, **config.warm_start)
    return warm_start(start, store, progress)


def init_policy(config: RunConfig, store: RunStore | None = None, progress: bool = True):
    """The starting model: a warm-started nano model, random weights, a checkpoint path, or a real model."""
    preset = get_preset(config.preset)
    if config.init not in ("warm", "scratch"):
        model, tokenizer = load_pretrained(config.init)
    elif preset.hub_id is not None:
        model, tokenizer = load_pretrained(preset.hub_id)
    elif config.init == "scratch" or config.preset == "qwen3-1.7b-random":
        model, tokenizer = build_model(config.preset, seed=stream_seed("init", config.seed))
    else:
        checkpoint = warm_start_of(config, store, progress)
        # the same adapter init whether the warm start was cached or trained just now
        torch.manual_seed(stream_seed("init", config.seed))
        model, tokenizer = load_pretrained(str(checkpoint))
    if config.finetune == "lora":
        model = add_lora(model, config.lora_rank, config.lora_alpha)
    if model.config.hidden_size >= LARGE_HIDDEN:  # a 1.7B model: each layer is recomputed in the backward
        model.train()
        model.activation_checkpointing_enable()
        model.enable_input_require_grads()
    return model.to(config.device), tokenizer


def resolve(config: RunConfig, device: torch.device) -> tuple[Objective, LogProbPath]:
    """What an update needs of config on device: its objective and the log-prob path of its training pass."""
    engine = config.resolved_engine
    objective = Objective(config.objective, dict(config.objective_params), config.group_size, config.ar_alpha,
                          config.lopti_eta)
    path = LogProbPath(loss_path(engine, config.fused_ratio, device), config.temperature, config.micro_batch_size,
                       engine.skip_zero_advantage)
    return objective, path


def train_update(model, optimizer, batch: Rollout, sample_advantages, prox_logp, objective: Objective,
                 path: LogProbPath, max_grad_norm: float, update: int) -> dict:
    """One model update on a mini-batch (Lopti: two optimizer steps, low- then high-probability tokens), in one pass
    or, with path.micro_batch_size, accumulated over micro-batches with the same result (losspath.py)."""
    device = next(model.parameters()).device
    mask, blogp = batch.response_mask.to(device), batch.behavior_logp.to(device)
    advantages = sample_advantages.to(device)[:, None] * mask
    if objective.ar_alpha:
        advantages = advantage_reweight(advantages, blogp, objective.ar_alpha)
    stages = lopti_stages(blogp, objective.lopti_eta, mask) if objective.lopti_eta else [mask]
    params = [p for p in model.parameters() if p.requires_grad]
    if batch.routing is not None:  # a mixture of experts: the trainer's own routing against the rollout's, with
        routing = mismatch_stats(model, sequence_inputs(model, batch), batch)  # the weights of the update's forward
    union, grad_norm = None, 0.0
    for stage in stages:
        if not stage.any():  # an empty Lopti stage makes no step (AdamW would still move the weights)
            continue
        optimizer.zero_grad(set_to_none=True)
        if path.micro_batch_size:
            loss, logp, entropy, flags = accumulate_gradients(model, batch, advantages * stage, prox_logp, objective,
                                                              path)
            for p in params:  # a stage whose every gradient is 0 still steps AdamW, as the unsplit update does
                p.grad = torch.zeros_like(p) if p.grad is None else p.grad
        else:
            loss, logp, entropy, flags = loss_and_tokens(model, batch, advantages * stage, prox_logp, objective, path)
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm).item()
        if not (math.isfinite(loss.item()) and math.isfinite(grad_norm)):
            raise FloatingPointError(f"update {update}: loss {loss.item()} / gradient norm {grad_norm} is not "
                                     f"finite; stats of this mini-batch: {summarize(logp.detach(), blogp, advantages, mask, entropy.detach(), flags)}")
        optimizer.step()
        union = flags if union is None else {k: union[k] | flags[k] for k in union}
    row = summarize(logp.detach(), blogp, advantages, mask, entropy.detach(), union)
    row.update(loss=loss.item(), grad_norm=grad_norm)
    if batch.routing is not None:
        row.update(routing, f2=extreme_fraction(logp, blogp, mask))
    return row


def batch_row(batch: Rollout, group_size: int) -> dict:
    return {"reward": batch.rewards.mean().item(), "train_acc": batch.correct.float().mean().item(),
            "zero_std_frac": zero_variance_fraction(batch.rewards, group_size),
            "response_len": batch.response_mask.sum(1).mean().item()}


def mini_batches(rows: int, group_size: int, updates_per_step: int, epochs: int) -> list[tuple[int, torch.Tensor]]:
    """(epoch, rows) of every update a rollout batch of `rows` sequences feeds: updates_per_step mini-batches of whole
    groups per epoch, each sample used once per epoch."""
    groups = torch.arange(rows).view(-1, group_size)
    return [(epoch, part.flatten()) for epoch in range(epochs) for part in groups.chunk(updates_per_step)]


def save_state(run: Run, model, optimizer, update: int, batches, generator, snapshot=None) -> None:
    trainable = {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}
    extra = {} if snapshot is None else {"snapshot": snapshot}  # sync_every != 1: the generator's frozen weights
    run.write_state({"update": update, "model": trainable, "optimizer": optimizer.state_dict(),
                     "queue": [vars(batch) for batch in batches], "generator": generator.get_state(),
                     "generator_device": generator.device.type, **extra})


def resume(run: Run, model, optimizer, generator) -> tuple[int, deque, dict | None]:
    """Restore what save_state saved (weights, optimizer, random stream) and return (update, queued batches, the
    semi-online snapshot); (0, empty, None) for a run without a checkpoint. The trainable weights must be exactly this
    model's trainable parameters."""
    state, path = run.read_state(next(model.parameters()).device), checkpoint.location(run.path)
    if state is None:
        return 0, deque(), None
    if state.get("generator_device", "cpu") != generator.device.type:  # a CPU stream never goes into a CUDA generator
        raise CorruptRunError(f"{path}: its random stream is a {state.get('generator_device', 'cpu')} generator's and "
                              f"this run samples on {generator.device.type}, so it cannot continue the same stream; "
                              f"resume it where it was made, or delete the run's directory to train it anew")
    expected = {name for name, p in model.named_parameters() if p.requires_grad}
    missing, unexpected = sorted(expected - state["model"].keys()), sorted(state["model"].keys() - expected)
    if missing or unexpected:
        raise CorruptRunError(f"{path} does not fit this model: missing keys {missing[:3]} ({len(missing)} in all), "
                              f"unexpected keys {unexpected[:3]} ({len(unexpected)} in all); {UNTOUCHED}")
    try:
        model.load_state_dict(state["model"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
    except (RuntimeError, ValueError, TypeError, KeyError) as error:
        raise CorruptRunError(f"{path} does not fit this run ({str(error).splitlines()[0]}); {UNTOUCHED}") from None
    return state["update"], deque(Rollout(**batch) for batch in state["queue"]), state.get("snapshot")


def train(config: RunConfig, run: Run, progress: bool = True) -> None:
    """Train (or resume) the run described by config, appending one metrics row per update to run.

    The config is resolved once, at the top, into what the loop uses: the policy and its optimizer, `sample` (the
    engine's sampler of rollout batches, through a frozen semi-online copy when sync_every != 1), the stale queue, the
    `objective` with its parameters, the engine's log-prob `path` and the evaluation; nothing below the loop sees the
    config. The loop between the two marker comments is the update every engine runs (chapter 1 shows it): sample ->
    reward -> stale queue -> advantages -> objective -> step -> log."""
    # the policy, its optimizer and the task that rewards a completion
    set_cpu_threads()
    torch.manual_seed(stream_seed("init", config.seed))
    model, tokenizer = init_policy(config, run.store, progress)
    task = make_task(config.task, **config.task_params)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr,
                                  weight_decay=config.weight_decay)
    # the sampler of rollout batches (the engine's), the stale queue in front of it and where a resumed run left them
    engine, max_new = config.resolved_engine, run_completion_budget(config, task, tokenizer)
    sampler = BatchSampler(model, tokenizer, task, engine, seed=config.seed, prompts_per_step=config.prompts_per_step,
                           group_size=config.group_size, max_new_tokens=max_new, temperature=config.temperature,
                           rollout_batch_size=config.rollout_batch_size, rollout_dtype=config.rollout_dtype,
                           router_noise=config.router_noise, router_replay=config.router_replay)
    per_batch = config.updates_per_step * config.epochs
    queue = StaleQueue(config.staleness, per_batch, math.ceil(config.total_updates / per_batch))
    update, queue.batches, snapshot = resume(run, model, optimizer, sampler.generator)
    sample = SemiOnlineGenerator(model, sampler, config.sync_every, snapshot)  # online: the sampler itself
    # the objective with its parameters, the log-prob path of the training pass, and the evaluation a metrics row
    # carries every eval_every updates
    objective, path = resolve(config, sampler.device)
    evaluation = partial(evaluation_row, model, tokenizer, task,
                         evaluation_problems(config.task, config.task_params, config.eval_size), max_new,
                         config.temperature, config.seed, config.eval_samples, batch_size=config.rollout_batch_size)
    run.truncate(update if update else -1)  # rows past the checkpoint (or of a run killed before one) are re-made
    run.update_meta(complete=False, resumed_at=update or None, fused_ratio=path.name not in ("reference", "shared"),
                    loss_path=path.name, engine=engine.name, training_version=TRAINING_VERSION,
                    **environment(config.device))
    start_time = time.time() - run.meta.get("wall_time_s", 0.0)
    if update == 0:  # the first s + k updates train on rollouts of the base model; row 0 is its accuracy
        queue.fill(sample)
        run.append({"update": 0, **evaluation(0)})
    bar = progress_bar(None, progress, total=config.total_updates, initial=update,
                       desc=f"{config.name} ({config.objective}, s={config.staleness})")
    # loop-begin
    for step in range(update // per_batch, queue.total_steps):
        tic = time.time()
        # G completions per prompt, rewarded by the task; the stale queue hands
        # out the batch sampled s updates ago
        batch = queue.next_batch(step, update, sample)
        sample_s = time.time() - tic  # generation (semi-online: and weight swaps)
        advantages = group_advantages(batch.rewards, config.group_size,
                                      config.normalize_adv_std)
        prox = no_grad_stats(model, batch, path)[0] if objective.proximal else None
        for epoch, rows in mini_batches(len(batch), config.group_size,
                                        config.updates_per_step, config.epochs):
            if update == config.total_updates:
                break
            tic, mini = time.time(), batch.select(rows)
            row = {"update": update + 1, "step": step + 1, "epoch": epoch,
                   "policy_lag": update - batch.policy_version,
                   "lr": optimizer.param_groups[0]["lr"],
                   **batch_row(mini, config.group_size)}
            # the objective on the mini-batch, then the optimizer step
            row.update(train_update(model, optimizer, mini, advantages[rows],
                                    None if prox is None else prox[rows],
                                    objective, path, config.max_grad_norm,
                                    update + 1))
            update, seconds = update + 1, time.time() - tic
            row.update(tokens_per_s=mini.response_mask.sum().item() / seconds,
                       update_s=seconds, sample_s=sample_s)
            sample_s = 0.0  # a step's generation is charged to its first update
            if update % config.eval_every == 0 or update == config.total_updates:
                row.update(evaluation(update))
            # log: one metrics row per update
            run.append({**row, "wall_time_s": time.time() - start_time})
            bar.update(1)
            bar.set_postfix(reward=f"{row['reward']:.2f}",
                            acc=f"{row.get('eval_greedy_acc', float('nan')):.2f}")
        every = config.checkpoint_every  # checkpoint: the step crossed a multiple
        if update // every > (update - per_batch) // every:
            save_state(run, model, optimizer, update, queue.batches,
                       sampler.generator, sample.snapshot)
            seconds = round(time.time() - start_time, 1)
            run.update_meta(updates=update, wall_time_s=seconds)
    # loop-end
    bar.close()
    save_state(run, model, optimizer, update, queue.batches, sampler.generator, sample.snapshot)
    run.finish(updates=update, wall_time_s=round(time.time() - start_time, 1))
