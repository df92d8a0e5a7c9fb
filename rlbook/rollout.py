"""Rollouts: sample G completions per prompt with the KV cache, recording what the trainer needs later.

We write the sampling loop ourselves (instead of `generate`) because the behavior log-probability of each sampled
token must be exactly the log-prob under the distribution it was drawn from: `log softmax(logits / T)`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

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

    def __len__(self) -> int:
        return self.response_ids.shape[0]

    def select(self, rows: slice | torch.Tensor) -> "Rollout":
        index = torch.arange(len(self))[rows].tolist()
        return Rollout(self.prompt_ids[index], self.prompt_mask[index], self.response_ids[index],
                       self.response_mask[index], self.behavior_logp[index], self.rewards[index], self.correct[index],
                       [self.completions[i] for i in index], [self.problems[i] for i in index], self.policy_version)


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip left padding."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


@torch.no_grad()
def sample(model, tokenizer, prompts: list[str], max_new_tokens: int, temperature: float = 1.0,
           generator: torch.Generator | None = None):
    """Sample one completion per prompt (greedy when temperature == 0). Returns ids, mask, logp, prompt ids/mask."""
    device = next(model.parameters()).device
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    prompt_ids, prompt_mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
    attention, finished = prompt_mask, torch.zeros(len(prompts), dtype=torch.bool, device=device)
    out = model(input_ids=prompt_ids, attention_mask=attention, position_ids=positions(attention), use_cache=True)
    tokens, logps, masks = [], [], []
    for _ in range(max_new_tokens):
        logits = out.logits[:, -1].float()
        if temperature == 0:
            token = logits.argmax(-1)
            logp = torch.log_softmax(logits, -1).gather(-1, token[:, None])[:, 0]
        else:
            logprobs = torch.log_softmax(logits / temperature, -1)
            token = torch.multinomial(logprobs.exp(), 1, generator=generator)[:, 0]
            logp = logprobs.gather(-1, token[:, None])[:, 0]
        live = ~finished
        tokens.append(torch.where(live, token, tokenizer.pad_token_id))
        logps.append(torch.where(live, logp, 0.0))
        masks.append(live)
        finished = finished | (token == tokenizer.eos_token_id)
        if finished.all():
            break
        attention = torch.cat([attention, live[:, None].long()], dim=1)
        out = model(input_ids=tokens[-1][:, None], attention_mask=attention,
                    position_ids=positions(attention)[:, -1:], past_key_values=out.past_key_values, use_cache=True)
    return prompt_ids, prompt_mask, torch.stack(tokens, 1), torch.stack(masks, 1).float(), torch.stack(logps, 1)


def decode(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Completion texts without padding and EOS."""
    texts = []
    for ids, mask in zip(response_ids.tolist(), response_mask.tolist()):
        kept = [i for i, m in zip(ids, mask) if m and i != tokenizer.eos_token_id]
        texts.append(tokenizer.decode(kept))
    return texts


def rollout(model, tokenizer, task, problems: list[Problem], group_size: int, max_new_tokens: int,
            temperature: float, generator: torch.Generator, policy_version: int) -> Rollout:
    """G completions for each problem (rows grouped: problem i owns rows i*G .. i*G+G-1), scored by the task."""
    repeated = [p for p in problems for _ in range(group_size)]
    was_training = model.training
    model.eval()
    prompt_ids, prompt_mask, ids, mask, logp = sample(model, tokenizer, [p["prompt"] for p in repeated],
                                                      max_new_tokens, temperature, generator)
    model.train(was_training)
    completions = decode(tokenizer, ids, mask)
    scores = [task.score(p, c) for p, c in zip(repeated, completions)]
    rewards = torch.tensor([s.reward for s in scores], dtype=torch.float32)
    correct = torch.tensor([s.correct for s in scores])
    return Rollout(prompt_ids.cpu(), prompt_mask.cpu(), ids.cpu(), mask.cpu(), logp.cpu(), rewards, correct,
                   completions, repeated, policy_version)
