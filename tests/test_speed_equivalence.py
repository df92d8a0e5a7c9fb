"""The fast sampling loop computes exactly what the plain one does: same tokens, masks and behaviour log-probs, bit
for bit (each distinct prompt is prefilled once, finished rows leave the batch; rlbook/rollout.py)."""
import pytest
import torch

from rlbook.models import add_lora, build_model
from rlbook.decoding import distinct, positions
from rlbook.rollout import sample


@torch.no_grad()
def plain_sample(model, tokenizer, prompts, max_new_tokens, temperature=1.0, generator=None):
    """The sampling loop before the speed-up (every row, every step, through the model), kept as the oracle."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    prompt_ids, prompt_mask = enc["input_ids"], enc["attention_mask"]
    attention, finished = prompt_mask, torch.zeros(len(prompts), dtype=torch.bool)
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


def policy(preset: str, seed: int):
    """A random model with a LoRA adapter whose B matrices are non-zero (so the adapter changes the outputs)."""
    model, tokenizer = build_model(preset, seed=seed)
    model = add_lora(model)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.05)
    return model.eval(), tokenizer


def prompts(n_distinct: int, group: int, seed: int, low: int = 0) -> list[str]:
    """Groups of identical prompts; with low=100 all of one length (no padding: running rows' masks are all ones)."""
    rng = torch.Generator().manual_seed(seed)
    numbers = torch.randint(low, 1000, (n_distinct, 2), generator=rng).tolist()
    return [f"{a}+{b}=" for a, b in numbers for _ in range(group)]


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("preset, temperature, seed, low", [
    ("nano-small", 1.0, 0, 0), ("nano-small", 1.0, 1, 100), ("nano-small", 0.0, 2, 0), ("nano-small", 1.0, 5, 100),
    ("nano-tiny", 1.0, 3, 0), ("nano-tiny", 0.7, 4, 100)])
def test_fast_sampling_equals_the_plain_loop(preset, temperature, seed, low):
    model, tokenizer = policy(preset, seed)
    batch = prompts(16, 8, seed, low)
    fast = sample(model, tokenizer, batch, 30, temperature, torch.Generator().manual_seed(seed))
    plain = plain_sample(model, tokenizer, batch, 30, temperature, torch.Generator().manual_seed(seed))
    for a, b in zip(fast, plain):
        assert a.shape == b.shape and torch.equal(a, b)
    lengths = fast[3].sum(1)
    if temperature > 0:  # the test covers rows leaving the batch while others still run
        assert lengths.min() < lengths.max() == fast[3].shape[1]


def test_distinct_prompts_keep_first_rows_and_map_every_row():
    rows, inverse = distinct(["b", "a", "b", "c", "a"])
    assert rows == [0, 1, 3] and inverse.tolist() == [0, 1, 0, 2, 1]
