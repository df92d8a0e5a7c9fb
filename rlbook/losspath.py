"""The trainer's loss path: response-token log-probs and one update's gradient, accumulated over micro-batches.

Nothing here reads a RunConfig: rlbook.trainer.resolve turns the config once into the run's `Objective` (which loss,
its hyper-parameters, the advantage reshaping around it) and its `LogProbPath` (which of the four paths below, at
which temperature, in passes of how many sequences). Four paths to the log-probs (`loss_path`, from the run's engine,
rlbook.engines, its fused_ratio and its device):
  reference (off; auto on a CPU): the model's logits over the whole sequence [B, P+C, V], sliced, divided by T,
      float32 log-softmax. Kept exactly as it was: the CPU golden results (tests/test_versions.py) come from it.
  shared (engines fast and static): the reference path with each distinct prompt run once (a GRPO mini-batch holds every
      prompt group_size times): its KV cache is copied to its rows and the responses run on top of it. The same
      log-probs and gradients up to floating-point order (PREFIX_SHARING_TOLERANCE), about half the training FLOPs.
      Under gradient checkpointing (models of LARGE_HIDDEN width) the prompt pass keeps its activations and the
      response pass is checkpointed, reading the prompts' cache without extending it (PromptCache).
  fused (on; auto on a GPU): the lm_head runs on the hidden states of the response tokens only ([N, H] -> [N, V],
      padding never reaches it), then the Triton op with T inside it and the gradient written into the logits.
  chunked: the same hidden states through `ops.chunked_token_logprobs`: at most CHUNK_TOKENS x V logits exist.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache
from transformers.modeling_layers import GradientCheckpointingLayer

from .decoding import distinct, positions
from .dpo import online_dpo_loss
from .engines import Engine
from .objectives import needs_proximal, policy_loss
from .ops import chunked_token_logprobs, reference_token_logprobs, token_logprobs as op_token_logprobs
from .rollout import Rollout
from .router_replay import replaying

PATHS = ("reference", "fused", "chunked", "shared")
CHUNK_TOKENS = 1024  # tokens per chunk of logits: 1024 x 151936 x bf16 = 0.3 GB
# Largest |logp difference| of the shared path from the reference path, and largest relative difference of a
# parameter's gradient (measured on nano-small rollouts: 6e-6 and 4e-6, bench/results/prefix_sharing/; the tests
# in tests/test_speed_options.py hold the shared path to these bounds).
PREFIX_SHARING_TOLERANCE = {"logp": 2e-5, "grad_rel": 2e-5}


def loss_path(engine: Engine, fused_ratio: str, device: torch.device) -> str:
    """The path (one of PATHS) of an engine's training pass with this fused_ratio on this device."""
    if engine.prefix_sharing:
        return "shared"
    if fused_ratio == "chunked":
        return "chunked"
    if fused_ratio == "on" or (fused_ratio == "auto" and device.type == "cuda"):
        return "fused"
    return "reference"


@dataclass(frozen=True)
class LogProbPath:
    """How the training pass computes the response tokens' log-probs: `name` (one of PATHS) at the sampling
    temperature, micro_batch_size sequences per pass (0: the whole mini-batch), and with skip_zero_advantage (the fast
    engines) the sequences whose every advantage is 0 without grad (live_row_stats)."""
    name: str
    temperature: float = 1.0
    micro_batch_size: int = 0
    skip_zero_advantage: bool = False


@dataclass(frozen=True)
class Objective:
    """A run's objective: `name` (an rlbook.objectives objective, or "dpo", rlbook.dpo) with its hyper-parameters
    `params`; online DPO pairs the completions of each group of group_size; ar_alpha (Advantage Reweighting) and
    lopti_eta (Lopti's two stages) reshape the advantages it is given (0: off; rlbook.trainer.train_update)."""
    name: str
    params: dict = field(default_factory=dict)
    group_size: int = 0
    ar_alpha: float = 0.0
    lopti_eta: float = 0.0

    @property
    def proximal(self) -> bool:
        """The objective reads the log-probs of the policy at the start of the step (prox_logp)."""
        return needs_proximal(self.name)

    def __call__(self, logp, batch: Rollout, advantages, prox_logp):
        """(loss, flags) of a policy-gradient objective on [B, C] log-probs of the whole mini-batch."""
        device = logp.device
        params = dict(self.params)
        if prox_logp is not None:
            params["prox_logp"] = prox_logp.to(device)
        return policy_loss(self.name, logp, batch.behavior_logp.to(device), advantages,
                           batch.response_mask.to(device), **params)


def sequence_inputs(model, batch: Rollout):
    """The model's inputs for a batch's whole sequences [B, P + C]: prompts left-, responses right-padded."""
    device = next(model.parameters()).device
    ids = torch.cat([batch.prompt_ids, batch.response_ids], 1).to(device)
    attention = torch.cat([batch.prompt_mask, batch.response_mask.long()], 1).to(device)
    return dict(input_ids=ids, attention_mask=attention, position_ids=positions(attention))


def response_logits(model, batch: Rollout, temperature: float) -> torch.Tensor:
    """Logits [B, C, V] that predicted each response token, at the sampling temperature (the reference path)."""
    logits = model(**sequence_inputs(model, batch)).logits
    prompt_len = batch.prompt_ids.shape[1]
    return logits[:, prompt_len - 1:-1] / max(temperature, 1e-6)


def token_logprobs(model, batch: Rollout, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, entropy) [B, C] of the response tokens through the reference path (differentiable)."""
    logits = response_logits(model, batch, temperature)
    logp, entropy = reference_token_logprobs(logits.flatten(0, 1), batch.response_ids.flatten().to(logits.device))
    return logp.view(logits.shape[:2]), entropy.view(logits.shape[:2])


class PromptCache(DynamicCache):
    """The prompts' keys and values: written by the prompt pass, then read by the response pass without being
    extended (a layer gets its prompt's keys and values followed by its own), so a checkpointed layer that runs again
    in the backward reads the same cache."""

    read_only = False

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if not self.read_only:
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)
        layer = self.layers[layer_idx]
        return torch.cat([layer.keys, key_states], -2), torch.cat([layer.values, value_states], -2)


@contextmanager
def checkpointed_layers(model, **flags):
    """These attributes on the model's checkpointed layers for a block: gradient_checkpointing=False runs them plainly
    (a checkpointed layer drops its cache), _can_checkpoint_with_cache=True lets them read a cache that nothing writes
    (transformers' flag for such layers). A model without gradient checkpointing is left as it is."""
    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]
    saved = [{name: getattr(layer, name) for name in flags} for layer in layers]
    for layer in layers:
        for name, value in flags.items():
            setattr(layer, name, value)
    try:
        yield
    finally:
        for layer, values in zip(layers, saved):
            for name, value in values.items():
                setattr(layer, name, value)


def shared_prompt_logprobs(model, batch: Rollout, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, entropy) [B, C] as token_logprobs, each distinct prompt run once and its KV cache copied to its rows
    (the copy is an index_select: the rows' gradients add up in the shared prompt)."""
    device = next(model.parameters()).device
    rows, inverse = distinct([tuple(r) for r in batch.prompt_ids.tolist()])
    prompt_ids, prompt_mask = batch.prompt_ids.to(device), batch.prompt_mask.to(device)
    ids, mask, inverse = prompt_ids[rows], prompt_mask[rows], inverse.to(device)
    cache = PromptCache(config=model.config)
    with checkpointed_layers(model, gradient_checkpointing=False):  # the layers fill the cache they are given
        prompt = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), past_key_values=cache,
                       use_cache=False)
    cache.reorder_cache(inverse)
    cache.read_only = True
    attention = torch.cat([prompt_mask, batch.response_mask.to(device).long()], 1)
    with checkpointed_layers(model, _can_checkpoint_with_cache=True):
        response = model(input_ids=batch.response_ids.to(device), attention_mask=attention,
                         position_ids=positions(attention)[:, prompt_ids.shape[1]:], past_key_values=cache,
                         use_cache=False)
    logits = torch.cat([prompt.logits[:, -1:][inverse], response.logits[:, :-1]], 1) / max(temperature, 1e-6)
    logp, entropy = reference_token_logprobs(logits.flatten(0, 1), batch.response_ids.flatten().to(device))
    return logp.view(logits.shape[:2]), entropy.view(logits.shape[:2])


def response_hidden(model, batch: Rollout) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(hidden [N, H], token ids [N], response mask [B, C] bool): the final hidden states at the positions that
    predict the N response tokens (mask 1 only); the lm_head is not run."""
    inner = (model.get_base_model() if hasattr(model, "get_base_model") else model).model  # the decoder stack
    hidden = inner(**sequence_inputs(model, batch), use_cache=False).last_hidden_state
    resp = batch.response_mask.to(hidden.device) != 0
    prompt_len = batch.prompt_ids.shape[1]
    return hidden[:, prompt_len - 1:-1][resp], batch.response_ids.to(hidden.device)[resp], resp


def token_stats(model, batch: Rollout, temperature: float, path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, entropy), float32 [B, C], through `path`; logp differentiable under grad mode; 0 on padding
    (fused and chunked paths). A batch with replay_routing routes every token to its rollout's experts (R3), its
    layers not checkpointed: a checkpointed layer would run again in the backward, after the replay, and route by
    itself."""
    if not batch.replay_routing:
        return _token_stats(model, batch, temperature, path)
    with replaying(model, batch.routing), checkpointed_layers(model, gradient_checkpointing=False):
        return _token_stats(model, batch, temperature, path)


def _token_stats(model, batch: Rollout, temperature: float, path: str) -> tuple[torch.Tensor, torch.Tensor]:
    if path == "reference":
        return token_logprobs(model, batch, temperature)
    if path == "shared":
        return shared_prompt_logprobs(model, batch, temperature)
    hidden, ids, resp = response_hidden(model, batch)
    head, temperature = model.get_output_embeddings(), max(temperature, 1e-6)
    if path == "chunked":
        logp, entropy = chunked_token_logprobs(hidden, head.weight, ids, temperature=temperature,
                                               chunk_size=CHUNK_TOKENS)
    else:  # the logits are this function's own: their buffer may hold their gradient
        logp, entropy = op_token_logprobs(head(hidden), ids, temperature=temperature, backend="triton",
                                          inplace_grad=torch.is_grad_enabled())
    zeros = torch.zeros(resp.shape, dtype=logp.dtype, device=logp.device)
    return zeros.masked_scatter(resp, logp), zeros.masked_scatter(resp, entropy)


def live_row_stats(model, batch: Rollout, advantages, temperature: float, path: str):
    """token_stats with the graph only through the sequences with a non-zero advantage; the others (GRPO's
    zero-variance groups) run without grad. Every objective multiplies each token's term by its advantage, so its
    gradient there is 0 either way; only the weight gradients' summation order changes (not bit-equal)."""
    live = advantages.ne(0).any(1).cpu()
    if live.all() or not live.any() or not torch.is_grad_enabled():
        return token_stats(model, batch, temperature, path)
    rows = torch.cat([live.nonzero()[:, 0], (~live).nonzero()[:, 0]])
    grad = token_stats(model, batch.select(rows[:int(live.sum())]), temperature, path)
    with torch.no_grad():
        no_grad = token_stats(model, batch.select(rows[int(live.sum()):]), temperature, path)
    order = torch.argsort(rows).to(grad[0].device)
    return tuple(torch.cat([g, n])[order] for g, n in zip(grad, no_grad))


def loss_and_tokens(model, batch, advantages, prox_logp, objective: Objective, path: LogProbPath):
    """Objective loss (differentiable) plus per-token (logp, entropy, flags), in one pass over the mini-batch."""
    if batch.logp_graph is not None:  # sampled with its graph (the graph engine): no training forward
        logp, entropy = batch.logp_graph.to(advantages.device), batch.entropy.to(advantages.device)
    elif path.skip_zero_advantage:
        logp, entropy = live_row_stats(model, batch, advantages, path.temperature, path.name)
    else:
        logp, entropy = token_stats(model, batch, path.temperature, path.name)
    if objective.name == "dpo":  # the reference policy: the model with its LoRA adapters off (the starting one)
        with torch.no_grad(), model.disable_adapter():
            ref_logp, _ = token_stats(model, batch, path.temperature, path.name)
        loss, flags = online_dpo_loss(logp, ref_logp, batch.response_mask, batch.rewards, objective.group_size,
                                      objective.params)
    else:
        loss, flags = objective(logp, batch, advantages, prox_logp)
    return loss, logp, entropy, flags


def micro_batches(rows: torch.Tensor, size: int) -> list[torch.Tensor]:
    """Rows in runs of `size` (0: all at once); no run when there are no rows."""
    return [part for part in (rows.split(size) if size else [rows]) if len(part)]


@torch.no_grad()
def no_grad_stats(model, batch: Rollout, path: LogProbPath) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp, entropy) [B, C] without a graph, micro_batch_size sequences at a time (the proximal log-probs too)."""
    parts = [token_stats(model, batch.select(rows), path.temperature, path.name)
             for rows in micro_batches(torch.arange(len(batch)), path.micro_batch_size)]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def accumulate_gradients(model, batch: Rollout, advantages, prox_logp, objective: Objective, path: LogProbPath):
    """The unsplit `loss_and_tokens(...)` + `loss.backward()`, micro_batch_size sequences at a time; returns the
    same (loss, logp, entropy, flags) of the whole mini-batch, detached, with the gradients in the parameters.

    Pass 1 (no grad): logp of every response token. The objective runs once on the whole mini-batch [B, C], so
    every batch-wide decision (M2PO's mask, m2po_cap's cap, GSPO's sequence ratios, the token-mean denominator) is
    the unsplit one, and autograd gives coef = d loss / d logp. Pass 2: per micro-batch of the sequences with a
    non-zero coef (zero-advantage groups have none), logp again with grad, backward of sum(coef * logp). The
    gradients add up to d loss / d theta = sum_t coef_t d logp_t / d theta. Cost: one extra no-grad forward.
    """
    logp, entropy = no_grad_stats(model, batch, path)
    logp.requires_grad_()
    loss, flags = objective(logp, batch, advantages, prox_logp)
    coef, = torch.autograd.grad(loss, logp, allow_unused=True, materialize_grads=True)
    live = coef.ne(0).any(1).nonzero().squeeze(1).cpu()
    for rows in micro_batches(live, path.micro_batch_size):
        part, _ = token_stats(model, batch.select(rows), path.temperature, path.name)
        (part * coef[rows.to(coef.device)]).sum().backward()
    return loss.detach(), logp.detach(), entropy, flags
