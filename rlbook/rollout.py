"""Rollouts: sample G completions per prompt with the KV cache, recording what the trainer needs later.

We write the sampling loop ourselves (instead of `generate`) because the behavior log-probability of each sampled
token must be exactly the log-prob under the distribution it was drawn from: `log softmax(logits / T)`.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from .ops.rows import entropy_terms
from .tasks.base import Problem

# Matrix products of fewer rows take another kernel on the CPU (torch 2.13: M < 4), whose rounding differs: the
# batch never shrinks below this many rows, so every row's numbers are those of the full batch.
MIN_ROWS = 4


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


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def distinct(prompts: list) -> tuple[list[int], torch.Tensor]:
    """(rows of the first occurrence of each distinct prompt, index [B] of every prompt's row among them); prompts
    are strings or tuples of token ids."""
    first: dict = {}
    for row, prompt in enumerate(prompts):
        first.setdefault(prompt, row)
    index = {prompt: k for k, prompt in enumerate(first)}
    return list(first.values()), torch.tensor([index[p] for p in prompts])


def prefill(model, ids: torch.Tensor, mask: torch.Tensor, inverse: torch.Tensor):
    """(last-position logits [B, V], KV cache of B rows) of the prompts ids[inverse] (ids: the distinct prompts):
    on the CPU each distinct prompt runs once, then is copied to its rows (a GRPO batch repeats every prompt
    group_size times; a row's result does not depend on the batch's other rows there,
    tests/test_speed_equivalence.py)."""
    if ids.device.type != "cpu" or ids.numel() < MIN_ROWS:
        ids, mask = ids[inverse], mask[inverse]
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True)
    if len(ids) == len(inverse):
        return out.logits[:, -1], out.past_key_values
    out.past_key_values.reorder_cache(inverse)
    return out.logits[:, -1][inverse], out.past_key_values


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


def draw(logits: torch.Tensor, temperature: float, generator: torch.Generator | None):
    """One token per row [B] from logits [B, V] (greedy when temperature == 0), its behaviour log-prob
    log softmax(logits / T)[token] [B], and the log-probs of the distribution it was drawn from [B, V]."""
    logprobs = torch.log_softmax(logits / temperature if temperature else logits, -1)
    token = torch.multinomial(logprobs.exp(), 1, generator=generator)[:, 0] if temperature else logits.argmax(-1)
    return token, logprobs.gather(-1, token[:, None])[:, 0], logprobs


def sample(model, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float = 1.0,
           generator: torch.Generator | None = None, graph: bool = False, router=None):
    """Sample one completion per prompt (greedy when temperature == 0). Returns ids, mask, logp, prompt ids/mask.

    On the CPU only the rows still running go through the model (the KV cache drops finished rows, down to
    MIN_ROWS); the sampling step still sees all B rows (finished rows get uniform logits, their draw is discarded),
    so the random stream, and with it every sampled token, is the same as when every row runs to the end.

    graph=True samples under grad mode: logp carries the graph to the model's trainable parameters (the on-policy
    update backpropagates through it: the graph engine, rlbook.engines), and a sixth value holds each token's entropy [B, C]
    of the sampling distribution. `router` (a router_replay.RoutingRecorder installed on the model) is told which
    rows and positions each model call ran."""
    with torch.set_grad_enabled(graph):
        device = next(model.parameters()).device
        rows, inverse = distinct(prompts)
        enc = tokenizer([prompts[r] for r in rows], return_tensors="pt", padding=True, add_special_tokens=False)
        ids, mask, inverse = enc["input_ids"].to(device), enc["attention_mask"].to(device), inverse.to(device)
        prompt_ids, prompt_mask = ids[inverse], mask[inverse]
        attention, finished = prompt_mask, torch.zeros(len(prompts), dtype=torch.bool, device=device)
        running, floor = torch.arange(len(prompts), device=device), MIN_ROWS if device.type == "cpu" else len(prompts)
        last, cache = prefill(model, ids, mask, inverse)
        if router is not None:
            router.after_prefill(inverse, ids.shape[1])
        tokens, logps, masks, entropies = [], [], [], []
        for _ in range(max_new_tokens):
            logits = last.float().new_zeros(len(prompts), last.shape[-1]).index_copy_(0, running, last.float())
            token, logp, logprobs = draw(logits, temperature, generator)
            live = ~finished
            tokens.append(torch.where(live, token, tokenizer.pad_token_id))
            logps.append(torch.where(live, logp, 0.0))
            masks.append(live)
            if graph:
                entropies.append(torch.where(live, entropy_terms(logprobs.detach()), 0.0))
            finished = finished | (token == tokenizer.eos_token_id)
            if finished.all():
                break
            attention = torch.cat([attention, live[:, None].long()], dim=1)
            keep = still_running(finished[running], floor)
            if len(keep) < len(running):
                cache.batch_select_indices(keep)
                running = running[keep]
            rows = attention[running]
            out = model(input_ids=tokens[-1][running, None], attention_mask=step_mask(rows, attention),
                        position_ids=positions(rows)[:, -1:], past_key_values=cache, use_cache=True)
            last, cache = out.logits[:, -1], out.past_key_values
            if router is not None:
                router.after_step(running)
        out = prompt_ids, prompt_mask, torch.stack(tokens, 1), torch.stack(masks, 1).float(), torch.stack(logps, 1)
        return (*out, torch.stack(entropies, 1)) if graph else out


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
        from .static_sampling import static_sample  # it builds on this module
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
