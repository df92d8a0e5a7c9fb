"""The decoding loop every sampler runs: draw one token per row, stop a row at its EOS, record what the trainer needs.

The behaviour log-probability of each sampled token must be exactly the log-prob under the distribution it was drawn
from, `log softmax(logits / T)`, so we write the loop ourselves instead of calling `generate`. A sampler brings its
KV cache as a `step` (rlbook.rollout.sample: a cache that grows and drops finished rows; rlbook.static_sampling: one
allocated once, its step replayed from a CUDA graph); the draw, the stopping rule and the records are the same code
for both, so the same random stream draws the same tokens.
"""
from __future__ import annotations

from typing import Callable

import torch

from .ops.rows import entropy_terms

# Matrix products of fewer rows take another kernel on the CPU (torch 2.13: M < 4), whose rounding differs: the
# batch never shrinks below this many rows, so every row's numbers are those of the full batch.
MIN_ROWS = 4
# step(token [B], live [B], finished [B], t) -> logits [B, V] after feeding the tokens drawn at step t
Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]


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


def draw(logits: torch.Tensor, temperature: float, generator: torch.Generator | None):
    """One token per row [B] from logits [B, V] (greedy when temperature == 0), its behaviour log-prob
    log softmax(logits / T)[token] [B], and the log-probs of the distribution it was drawn from [B, V]."""
    logprobs = torch.log_softmax(logits / temperature if temperature else logits, -1)
    token = torch.multinomial(logprobs.exp(), 1, generator=generator)[:, 0] if temperature else logits.argmax(-1)
    return token, logprobs.gather(-1, token[:, None])[:, 0], logprobs


def check_generator(generator: torch.Generator | None, device: torch.device) -> None:
    """A generator draws only for tensors of its own device: a CPU generator given to a model on a GPU would fail
    there alone, at its first draw, so it is refused here on any machine."""
    if generator is not None and generator.device.type != device.type:
        raise ValueError(f"the random generator is on {generator.device.type} and the model on {device.type}; make it "
                         "on the model's device: torch.Generator(device=next(model.parameters()).device)")


def decode_loop(step: Step, logits: torch.Tensor, max_new_tokens: int, temperature: float,
                generator: torch.Generator | None, eos_id: int, pad_id: int, entropy: bool = False):
    """(tokens [B, C], response mask [B, C] float, behaviour log-probs [B, C]) of up to max_new_tokens tokens per row,
    and with entropy=True the entropy [B, C] of each token's sampling distribution. `logits` [B, V]: float32, after
    the prompts. A row is live until it draws EOS (which is part of its response); a finished row still draws (from
    whatever logits its step gave it) and its draw is discarded, so every row sees the random stream of the full
    batch. The loop stops when every row has finished. `generator` is on the logits' device."""
    check_generator(generator, logits.device)
    finished = torch.zeros(len(logits), dtype=torch.bool, device=logits.device)
    tokens, logps, masks, entropies = [], [], [], []
    for t in range(max_new_tokens):
        token, logp, logprobs = draw(logits, temperature, generator)
        live = ~finished
        tokens.append(torch.where(live, token, pad_id))
        logps.append(torch.where(live, logp, 0.0))
        masks.append(live)
        if entropy:
            entropies.append(torch.where(live, entropy_terms(logprobs.detach()), 0.0))
        finished = finished | (token == eos_id)
        if finished.all():
            break
        logits = step(tokens[-1], live, finished, t)
    out = torch.stack(tokens, 1), torch.stack(masks, 1).float(), torch.stack(logps, 1)
    return (*out, torch.stack(entropies, 1)) if entropy else out
