"""Rollouts: sample G completions per prompt with the KV cache, recording what the trainer needs later.

The sampling loop is rlbook.decoding's, which every sampler shares; here its step with a KV cache that grows and
drops finished rows (`sample`), the batch the trainer takes (`Rollout`, `rollout`) and the batches of a run
(`BatchSampler`).
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from .decoding import MIN_ROWS, decode_loop, distinct, positions, prefill
from .engines import Engine
from .lean_decoder import LeanDecoder
from .models import is_moe
from .router_replay import RoutingRecorder, join_routing, rollout_copy
from .seeds import stream_seed
from .static_sampling import static_sample
from .tasks.base import Problem


@dataclass
class Rollout:
    prompt_ids: torch.Tensor  # [B, P] left-padded
    prompt_mask: torch.Tensor  # [B, P] 1 on real prompt tokens
    response_ids: torch.Tensor  # [B, C] right-padded; the EOS token is part of the response
    response_mask: torch.Tensor  # [B, C] 1 on response tokens
    behavior_logp: torch.Tensor  # [B, C] log-prob of each sampled token under the sampling policy
    rewards: torch.Tensor  # [B]
    correct: torch.Tensor  # [B] bool
    completions: list[str]
    problems: list[Problem]
    policy_version: int  # number of model updates the sampling policy had received
    # sampled with graph=True: the log-probs [B, C] with the graph of the sampling pass, and the entropies [B, C]
    logp_graph: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    # mixture of experts: the experts each token was routed to, uint8 [B, layers, P + C, k] (rlbook.router_replay);
    # replay_routing: the training forwards route the tokens to them (R3, RunConfig.router_replay)
    routing: torch.Tensor | None = None
    replay_routing: bool = False

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    def select(self, rows: slice | torch.Tensor) -> "Rollout":
        index = torch.arange(len(self))[rows].tolist()
        return Rollout(self.prompt_ids[index], self.prompt_mask[index], self.response_ids[index],
                       self.response_mask[index], self.behavior_logp[index], self.rewards[index], self.correct[index],
                       [self.completions[i] for i in index], [self.problems[i] for i in index], self.policy_version,
                       *(None if t is None else t[index] for t in (self.logp_graph, self.entropy, self.routing)),
                       self.replay_routing)


def still_running(done: torch.Tensor, floor: int) -> torch.Tensor:
    """Positions (ascending) of the rows to keep in the batch: the unfinished ones, topped up to `floor` rows with
    finished ones."""
    order = torch.argsort(done.int(), stable=True)  # unfinished rows first
    return order[:max(int((~done).sum()), floor)].sort().values


def step_mask(rows: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """The attention mask of a decoding step for the running rows: their padding mask, or, when it has no zero but
    the whole batch's does, the same as the [b, 1, 1, T] mask the model builds for the whole batch (from an all-ones
    padding mask it would build none, and the attention kernel without a mask rounds differently)."""
    if attention.all() or not rows.all():
        return rows
    return rows[:, None, None, :].bool()


class ShrinkingCache:
    """The decoding step of `sample`: the KV cache grows by one position per step and, on the CPU, drops the rows
    that finished (down to MIN_ROWS rows), so the work scales with the rows still running."""

    def __init__(self, model, cache, prompt_mask: torch.Tensor, router=None):
        self.model, self.cache, self.attention, self.router = model, cache, prompt_mask, router
        self.running = torch.arange(len(prompt_mask), device=prompt_mask.device)
        self.floor = MIN_ROWS if prompt_mask.device.type == "cpu" else len(prompt_mask)

    def __call__(self, token: torch.Tensor, live: torch.Tensor, finished: torch.Tensor, t: int) -> torch.Tensor:
        self.attention = torch.cat([self.attention, live[:, None].long()], dim=1)
        keep = still_running(finished[self.running], self.floor)
        if len(keep) < len(self.running):
            self.cache.batch_select_indices(keep)
            self.running = self.running[keep]
        rows = self.attention[self.running]
        out = self.model(input_ids=token[self.running, None], attention_mask=step_mask(rows, self.attention),
                         position_ids=positions(rows)[:, -1:], past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        if self.router is not None:
            self.router.after_step(self.running)
        return full_batch(out.logits[:, -1], self.running, len(finished))


def full_batch(last: torch.Tensor, running: torch.Tensor, rows: int) -> torch.Tensor:
    """float32 logits [rows, V]: the running rows' own, 0 (uniform) for the rows that left the batch."""
    return last.float().new_zeros(rows, last.shape[-1]).index_copy_(0, running, last.float())


def sample(model, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float = 1.0,
           generator: torch.Generator | None = None, graph: bool = False, router=None):
    """Sample one completion per prompt (greedy when temperature == 0). Returns ids, mask, logp, prompt ids/mask.

    On the CPU only the rows still running go through the model (ShrinkingCache); the draw still sees all B rows
    (rlbook.decoding.decode_loop), so the random stream, and with it every sampled token, is the same as when every
    row runs to the end.

    graph=True samples under grad mode: logp carries the graph to the model's trainable parameters (the on-policy
    update backpropagates through it: the graph engine, rlbook.engines), and a sixth value holds each token's entropy
    [B, C] of the sampling distribution. `router` (a router_replay.RoutingRecorder installed on the model) is told
    which rows and positions each model call ran."""
    with torch.set_grad_enabled(graph):
        device = next(model.parameters()).device
        rows, inverse = distinct(prompts)
        enc = tokenizer([prompts[r] for r in rows], return_tensors="pt", padding=True, add_special_tokens=False)
        ids, mask, inverse = enc["input_ids"].to(device), enc["attention_mask"].to(device), inverse.to(device)
        prompt_ids, prompt_mask = ids[inverse], mask[inverse]
        last, cache = prefill(model, ids, mask, inverse)
        if router is not None:
            router.after_prefill(inverse, ids.shape[1])
        step = ShrinkingCache(model, cache, prompt_mask, router)
        out = decode_loop(step, full_batch(last, step.running, len(prompts)), max_new_tokens, temperature, generator,
                          tokenizer.eos_token_id, tokenizer.pad_token_id, entropy=graph)
        return prompt_ids, prompt_mask, *out


def decode(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Completion texts without padding and EOS."""
    texts = []
    for ids, mask in zip(response_ids.tolist(), response_mask.tolist()):
        kept = [i for i, m in zip(ids, mask) if m and i != tokenizer.eos_token_id]
        texts.append(tokenizer.decode(kept))
    return texts


def rollout(model, tokenizer, task, problems: list[Problem], group_size: int, max_new_tokens: int,
            temperature: float, generator: torch.Generator, policy_version: int, graph: bool = False,
            router=None, static: bool = False) -> Rollout:
    """G completions for each problem (rows grouped: problem i owns rows i*G .. i*G+G-1), scored by the task; with
    graph=True the batch keeps the sampling pass's graph (`sample`); with a router_replay.RoutingRecorder the batch
    holds the experts every token was routed to; static=True samples with a static KV cache (`model`: a lean
    decoder, rlbook.static_sampling)."""
    repeated = [p for p in problems for _ in range(group_size)]
    was_training = model.training
    model.eval()
    texts = [p["prompt"] for p in repeated]
    if static:
        prompt_ids, prompt_mask, ids, mask, logp = static_sample(model, tokenizer, texts, max_new_tokens, temperature,
                                                                 generator)
        entropy = []
    else:
        with router.installed() if router is not None else nullcontext():
            prompt_ids, prompt_mask, ids, mask, logp, *entropy = sample(model, tokenizer, texts, max_new_tokens,
                                                                        temperature, generator, graph, router)
    model.train(was_training)
    routing = None if router is None else router.experts(prompt_mask, mask)
    completions = decode(tokenizer, ids, mask)
    scores = [task.score(p, c) for p, c in zip(repeated, completions)]
    rewards = torch.tensor([s.reward for s in scores], dtype=torch.float32)
    correct = torch.tensor([s.correct for s in scores])
    return Rollout(prompt_ids.cpu(), prompt_mask.cpu(), ids.cpu(), mask.cpu(), logp.detach().cpu(), rewards, correct,
                   completions, repeated, policy_version, logp if graph else None, entropy[0] if graph else None,
                   routing)


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


class BatchSampler:
    """The rollout batches of a run: at step s, prompts_per_step problems of the seed's prompt stream, group_size
    completions each, rollout_batch_size sequences at a time (0: all at once; the KV cache bound), drawn from the
    run's rollout stream through the engine's sampler (the model, or a lean copy refreshed with its current weights)
    at rollout_dtype (rlbook.router_replay.rollout_copy), with the experts of every token recorded on a mixture of
    experts (rlbook.router_replay: router_noise on the router logits, router_replay replays them in training)."""

    def __init__(self, model, tokenizer, task, engine: Engine, *, seed: int, prompts_per_step: int, group_size: int,
                 max_new_tokens: int, temperature: float, rollout_batch_size: int = 0, rollout_dtype: str = "float32",
                 router_noise: float = 0.0, router_replay: bool = False):
        self.model, self.tokenizer, self.task, self.engine = model, tokenizer, task, engine
        self.seed, self.prompts_per_step, self.group_size, self.max_new_tokens = seed, prompts_per_step, group_size, \
            max_new_tokens
        self.temperature, self.rollout_batch_size, self.rollout_dtype = temperature, rollout_batch_size, rollout_dtype
        self.router_noise, self.router_replay = router_noise, router_replay
        self.device, self.moe = next(model.parameters()).device, is_moe(model)
        self.generator = torch.Generator(device=self.device).manual_seed(stream_seed("rollout", seed))
        self.lean = LeanDecoder(model, merged=engine.merged_sampling) if engine.lean_sampler else None
        if router_replay and not self.moe:
            raise ValueError(f"router_replay=True needs a mixture-of-experts model; {type(model).__name__} is dense")

    def __call__(self, step: int, version: int) -> Rollout:
        """The batch of `step`, sampled with the model's current weights (`version`: the updates they have had)."""
        problems = self.task.generate(self.prompts_per_step, seed=stream_seed("rl_prompts", self.seed, step))
        per_call = self.rollout_batch_size // self.group_size or len(problems)  # prompts sampled at once
        policy = self.lean.refresh(self.model) if self.lean is not None else self.model  # the current weights
        policy = rollout_copy(policy, self.rollout_dtype)  # as the inference engine holds them
        noise = (torch.Generator(device=self.device).manual_seed(stream_seed("router_noise", self.seed, step))
                 if self.router_noise else None)
        batch = join_rollouts([rollout(policy, self.tokenizer, self.task, problems[i:i + per_call], self.group_size,
                                       self.max_new_tokens, self.temperature, self.generator, policy_version=version,
                                       graph=self.engine.sampling_graph, static=self.engine.static_sampling,
                                       router=RoutingRecorder(policy, self.router_noise, noise) if self.moe else None)
                               for i in range(0, len(problems), per_call)], self.tokenizer.pad_token_id)
        batch.replay_routing = self.router_replay
        return batch
