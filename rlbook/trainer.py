"""The GRPO / M2PO trainer: rollouts -> group advantages -> stale FIFO -> objective -> AdamW, one metrics row per update.

One training step samples `prompts_per_step x group_size` completions and makes `updates_per_step` model updates
with them (mini-batches of whole groups, each sample used once per epoch). With staleness s the batch a step trains
on was sampled s updates earlier (see staleness.py): a constant lag. With `sync_every` = k > 1 (semi-online) the
batches are fresh but sampled by a frozen copy of the policy refreshed every k updates, so the lag cycles 0..k-1
(0: never refreshed, offline from the starting model); the copy is in the checkpoint. Checkpoints are taken at step boundaries, so a resumed run
continues exactly where the uninterrupted one would have been.
"""
from __future__ import annotations

import math
import time
import warnings
from collections import deque

import torch

from .advantages import group_advantages, zero_variance_fraction
from .config import RunConfig
from .evaluate import accuracy, completion_budget, evaluation_problems, sampled_eval_seed
from .models import LARGE_HIDDEN, add_lora, build_model, get_preset, load_pretrained, set_cpu_threads
from .lean_decoder import LeanDecoder
from .losspath import accumulate_gradients, loss_and_tokens, loss_path, no_grad_stats, sequence_inputs
from .objectives import advantage_reweight, lopti_stages
from .pretrain import WarmStartConfig, warm_start
from .progress import progress_bar
from .rollout import Rollout, rollout
from .router_replay import RoutingRecorder, engine_copy, extreme_fraction, is_moe, join_routing, mismatch_stats
from .runs import UNTOUCHED, CorruptRunError, Run, RunStore, environment
from .seeds import stream_seed
from .staleness import queue_depth
from .tasks import make_task
from .token_stats import summarize
from .versions import TRAINING_VERSION

TIMING_KEYS = ("wall_time_s", "tokens_per_s", "update_s", "sample_s")  # a row's clock readings (vary run to run)
PROXIMAL_OBJECTIVES = ("tis", "decoupled")  # they need the policy of the step's start (recomputed once per step)
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")


def warm_start_of(config: RunConfig, store: RunStore | None = None, progress: bool = True):
    """The warm-started checkpoint a run starts from (trained once and cached), or None if it starts elsewhere."""
    preset = get_preset(config.preset)
    if config.init != "warm" or preset.hub_id is not None or config.preset == "qwen3-1.7b-random":
        return None
    start = WarmStartConfig(preset=config.preset, task=config.task, task_params=config.task_params,
                            **config.warm_start)
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
        model.gradient_checkpointing_enable()
        model.enable_input_require_grads()
    return model.to("cuda" if torch.cuda.is_available() else "cpu"), tokenizer


def train_update(model, optimizer, batch: Rollout, sample_advantages, prox_logp, config: RunConfig, path: str,
                 update: int) -> dict:
    """One model update on a mini-batch (Lopti: two optimizer steps, low- then high-probability tokens), in one pass
    or, with config.micro_batch_size, accumulated over micro-batches with the same result (losspath.py)."""
    device = next(model.parameters()).device
    mask, blogp = batch.response_mask.to(device), batch.behavior_logp.to(device)
    advantages = sample_advantages.to(device)[:, None] * mask
    if config.ar_alpha:
        advantages = advantage_reweight(advantages, blogp, config.ar_alpha)
    stages = lopti_stages(blogp, config.lopti_eta, mask) if config.lopti_eta else [mask]
    params = [p for p in model.parameters() if p.requires_grad]
    if batch.routing is not None:  # a mixture of experts: the trainer's own routing against the rollout's, with
        routing = mismatch_stats(model, sequence_inputs(model, batch), batch)  # the weights of the update's forward
    union, grad_norm = None, 0.0
    for stage in stages:
        if not stage.any():  # an empty Lopti stage makes no step (AdamW would still move the weights)
            continue
        optimizer.zero_grad(set_to_none=True)
        if config.micro_batch_size:
            loss, logp, entropy, flags = accumulate_gradients(model, batch, advantages * stage, prox_logp, config, path)
            for p in params:  # a stage whose every gradient is 0 still steps AdamW, as the unsplit update does
                p.grad = torch.zeros_like(p) if p.grad is None else p.grad
        else:
            loss, logp, entropy, flags = loss_and_tokens(model, batch, advantages * stage, prox_logp, config, path)
            loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm).item()
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


def join_rollouts(parts: list[Rollout], pad_id: int) -> Rollout:
    """One batch from rollouts sampled in turn (rollout_batch_size): prompts left-, responses right-padded."""
    if len(parts) == 1:
        return parts[0]

    def cat(name: str, value=0, left: bool = False) -> torch.Tensor:
        tensors = [getattr(p, name) for p in parts]
        width = max(t.shape[1] for t in tensors)
        return torch.cat([torch.nn.functional.pad(t, (width - t.shape[1], 0) if left else (0, width - t.shape[1]),
                                                  value=value) for t in tensors])

    routing = None if parts[0].routing is None else join_routing([p.routing for p in parts],
                                                                    [p.prompt_ids.shape[1] for p in parts])
    return Rollout(cat("prompt_ids", pad_id, left=True), cat("prompt_mask", left=True), cat("response_ids", pad_id),
                   cat("response_mask"), cat("behavior_logp"), torch.cat([p.rewards for p in parts]),
                   torch.cat([p.correct for p in parts]), [c for p in parts for c in p.completions],
                   [q for p in parts for q in p.problems], parts[0].policy_version, routing=routing,
                   replay_routing=parts[0].replay_routing)


def batch_row(batch: Rollout, group_size: int) -> dict:
    return {"reward": batch.rewards.mean().item(), "train_acc": batch.correct.float().mean().item(),
            "zero_std_frac": zero_variance_fraction(batch.rewards, group_size),
            "response_len": batch.response_mask.sum(1).mean().item()}


def save_state(run: Run, model, optimizer, update: int, queue, generator, snapshot=None) -> None:
    trainable = {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}
    tmp = run.path / ".state.pt.tmp"
    extra = {} if snapshot is None else {"snapshot": snapshot}  # sync_every != 1: the generator's frozen weights
    torch.save({"update": update, "model": trainable, "optimizer": optimizer.state_dict(), "queue": list(queue),
                "generator": generator.get_state(), **extra}, tmp)
    tmp.replace(run.path / "state.pt")


def load_state(run: Run, state: dict, model, optimizer, generator) -> None:
    """Restore what save_state saved; the trainable weights must be exactly this model's trainable parameters."""
    path = run.path / "state.pt"
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


def train(config: RunConfig, run: Run, progress: bool = True) -> None:
    """Train (or resume) the run described by config, appending one metrics row per update to run."""
    set_cpu_threads()
    torch.manual_seed(stream_seed("init", config.seed))
    model, tokenizer = init_policy(config, RunStore(run.path.parent.parent), progress)
    device = next(model.parameters()).device
    task = make_task(config.task, **config.task_params)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr,
                                  weight_decay=config.weight_decay)
    generator = torch.Generator(device=device).manual_seed(stream_seed("rollout", config.seed))
    per_batch = config.updates_per_step * config.epochs
    depth, total_steps = queue_depth(config.staleness, per_batch), math.ceil(config.total_updates / per_batch)
    max_new = config.max_new_tokens or completion_budget(task, tokenizer)
    eval_set = evaluation_problems(config.task, config.task_params, config.eval_size)
    path = loss_path(config, device)
    update, queue, snapshot = 0, deque(), None
    state = run.read_state()
    if state is not None:
        load_state(run, state, model, optimizer, generator)
        update, queue, snapshot = state["update"], deque(state["queue"]), state.get("snapshot")
    run.truncate(update if update else -1)  # rows past the checkpoint (or of a run killed before one) are re-made
    run.update_meta(complete=False, resumed_at=update or None, fused_ratio=path not in ("reference", "shared"),
                    loss_path=path,
                    training_version=TRAINING_VERSION,
                    **environment())

    moe = is_moe(model)  # rollouts record the experts of every token (rlbook.router_replay)
    if config.router_replay and not moe:
        raise ValueError(f"router_replay=True needs a mixture-of-experts model; {config.init!r} is dense")
    lean = config.merged_sampling or config.sampling_graph
    sampler = LeanDecoder(model, merged=config.merged_sampling) if lean else None

    def sample_batch(step: int) -> Rollout:
        nonlocal snapshot
        if config.sync_every == 1:
            return sample_with_current_weights(step, update)
        # Semi-online (arXiv 2506.21495): the generator is a frozen copy of the policy, refreshed every sync_every
        # updates (0: never, offline from the starting model), so the lag cycles 0..sync_every-1.
        if snapshot is None or (config.sync_every and update - snapshot["version"] >= config.sync_every):
            snapshot = {"version": update, "weights": {name: p.detach().clone()
                                                       for name, p in model.named_parameters() if p.requires_grad}}
        if snapshot["version"] == update:
            return sample_with_current_weights(step, update)
        current = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
        model.load_state_dict(snapshot["weights"], strict=False)
        try:
            return sample_with_current_weights(step, snapshot["version"])
        finally:
            model.load_state_dict(current, strict=False)

    def sample_with_current_weights(step: int, version: int) -> Rollout:
        problems = task.generate(config.prompts_per_step, seed=stream_seed("rl_prompts", config.seed, step))
        per_call = config.rollout_batch_size // config.group_size or len(problems)  # prompts sampled at once
        policy = sampler.refresh(model) if sampler is not None else model  # the current weights
        policy = engine_copy(policy, config.rollout_dtype)  # as the inference engine holds them
        noise = (torch.Generator(device=device).manual_seed(stream_seed("router_noise", config.seed, step))
                 if config.router_noise else None)
        batch = join_rollouts([rollout(policy, tokenizer, task, problems[i:i + per_call], config.group_size, max_new,
                                       config.temperature, generator, policy_version=version,
                                       graph=config.sampling_graph, static=config.static_sampling,
                                       router=RoutingRecorder(policy, config.router_noise, noise) if moe else None)
                               for i in range(0, len(problems), per_call)], tokenizer.pad_token_id)
        batch.replay_routing = config.router_replay
        return batch

    while len(queue) < depth and update == 0:  # the first s updates train on rollouts of the base model
        queue.append(sample_batch(-1 - len(queue)))
    start_time = time.time() - run.meta.get("wall_time_s", 0.0)
    def evaluation(after_update: int) -> dict:
        at_once = {"batch_size": config.rollout_batch_size} if config.rollout_batch_size else {}  # the KV cache bound
        return {"eval_greedy_acc": accuracy(model, tokenizer, task, eval_set, max_new, **at_once),
                "eval_sampled_acc": accuracy(model, tokenizer, task, eval_set, max_new, config.temperature,
                                             seed=sampled_eval_seed(config.seed, after_update),
                                             samples=config.eval_samples, **at_once)}

    if update == 0:  # the base model's accuracy, as row 0
        run.append({"update": 0, **evaluation(0)})
    bar = progress_bar(None, progress, total=config.total_updates, initial=update,
                       desc=f"{config.name} ({config.objective}, s={config.staleness})")
    for step in range(update // per_batch, total_steps):
        tic = time.time()
        if step + depth < total_steps:  # a batch that would only be trained after the run ends is never sampled
            queue.append(sample_batch(step))
        sample_s = time.time() - tic  # generation (and, semi-online, swapping the generator's weights in and out)
        batch = queue.popleft()
        advantages = group_advantages(batch.rewards, config.group_size, config.normalize_adv_std)
        prox = no_grad_stats(model, batch, config, path)[0] if config.objective in PROXIMAL_OBJECTIVES else None
        groups = torch.arange(len(batch)).view(-1, config.group_size)
        for epoch in range(config.epochs):
            for rows in groups.chunk(config.updates_per_step):
                if update == config.total_updates:
                    break
                tic = time.time()
                rows = rows.flatten()
                mini = batch.select(rows)
                row = {"update": update + 1, "step": step + 1, "epoch": epoch, "policy_lag": update - batch.policy_version,
                       "lr": optimizer.param_groups[0]["lr"], **batch_row(mini, config.group_size)}
                row.update(train_update(model, optimizer, mini, advantages[rows], None if prox is None else prox[rows],
                                        config, path, update + 1))
                update += 1
                row["tokens_per_s"] = mini.response_mask.sum().item() / (time.time() - tic)
                row["update_s"], row["sample_s"] = time.time() - tic, sample_s
                sample_s = 0.0  # a step's generation is charged to its first update
                if update % config.eval_every == 0 or update == config.total_updates:
                    row.update(evaluation(update))
                row["wall_time_s"] = time.time() - start_time
                run.append(row)
                bar.update(1)
                bar.set_postfix(reward=f"{row['reward']:.2f}", acc=f"{row.get('eval_greedy_acc', float('nan')):.2f}")
        if (update // config.checkpoint_every) > ((update - per_batch) // config.checkpoint_every):
            save_state(run, model, optimizer, update, queue, generator, snapshot)
            run.update_meta(updates=update, wall_time_s=round(time.time() - start_time, 1))
    bar.close()
    save_state(run, model, optimizer, update, queue, generator, snapshot)
    run.update_meta(complete=True, updates=update, wall_time_s=round(time.time() - start_time, 1))

