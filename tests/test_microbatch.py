"""Micro-batched updates are the unsplit update, and the chunked loss path never holds full-vocabulary logits.

One update of a 16-sequence mini-batch, split into micro-batches of 16, 8 and 4 sequences (1, 2 and 4 passes),
must give the unsplit update's loss, token statistics and weights after the step (SGD, so the step is the
gradient) for every objective, with Advantage Reweighting and Lopti's two stages, on every loss path.
"""
import copy
import dataclasses
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import rlbook.losspath
from rlbook.config import RunConfig
from rlbook.models import add_lora, build_model
from rlbook.objectives import OBJECTIVES, needs_proximal
from rlbook.rollout import Rollout, join_rollouts
from rlbook.trainer import resolve, train_update

pytestmark = pytest.mark.usefixtures("one_thread")
B, P, C = 16, 5, 12
VARIANTS = {"plain": {}, "ar+lopti": {"ar_alpha": 0.3, "lopti_eta": 0.5}}


def synthetic_batch(vocab: int, seed: int = 0, batch: int = B, response: int = C) -> Rollout:
    """Left-padded prompts, right-padded responses of mixed lengths, one all-zero-advantage group."""
    g = torch.Generator().manual_seed(seed)
    prompt_mask = torch.ones(batch, P, dtype=torch.long)
    prompt_mask[::3, :2] = 0
    lengths = torch.randint(2, response + 1, (batch,), generator=g)
    response_mask = (torch.arange(response)[None] < lengths[:, None]).float()
    rewards = torch.rand(batch, generator=g)
    rewards[:4] = 1.0  # the first group has zero advantages: its sequences are skipped in pass 2
    return Rollout(prompt_ids=torch.randint(1, vocab, (batch, P), generator=g) * prompt_mask, prompt_mask=prompt_mask,
                   response_ids=torch.randint(1, vocab, (batch, response), generator=g),
                   response_mask=response_mask, behavior_logp=torch.zeros(batch, response),
                   rewards=rewards, correct=torch.zeros(batch, dtype=torch.bool),
                   completions=[""] * batch, problems=[{}] * batch, policy_version=0)


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model, _ = build_model("nano-tiny", seed=0)
    model = add_lora(model, 4, 8.0)
    for name, p in model.named_parameters():  # LoRA's B starts at 0: make the adapter non-trivial
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    batch = synthetic_batch(model.config.vocab_size)
    config = RunConfig(preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4, engine="reference")
    with torch.no_grad():  # behavior log-probs near the current ones: some tokens clip, m2po masks some
        logp, _ = rlbook.losspath.token_logprobs(model, batch, 1.0)
    noise = torch.randn(logp.shape, generator=torch.Generator().manual_seed(1))
    mask = batch.response_mask
    batch = dataclasses.replace(batch, behavior_logp=(logp + 0.3 * noise) * mask)
    prox = (logp + 0.1 * noise.flip(0)) * mask
    advantages = batch.rewards.view(-1, 4) - batch.rewards.view(-1, 4).mean(1, keepdim=True)
    return model, batch, advantages.flatten(), prox, config


def update(setup, path, micro, objective, **changes):
    model, batch, advantages, prox, config = setup
    model = copy.deepcopy(model)
    config = config.replace(objective=objective, micro_batch_size=micro, max_grad_norm=1e6, **changes)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    prox = prox if needs_proximal(objective) else None
    objective, resolved = resolve(config, torch.device("cpu"))
    row = train_update(model, optimizer, batch, advantages, prox, objective, dataclasses.replace(resolved, name=path),
                       config.max_grad_norm, 1)
    return row, [p.detach() for p in model.parameters() if p.requires_grad]


def numbers(row, prefix=""):
    """The row's numbers, flattened (ratio_bins too)."""
    if isinstance(row, dict):
        return {k: v for key, value in row.items() for k, v in numbers(value, f"{prefix}{key}.").items()}
    if isinstance(row, list):
        return {k: v for i, value in enumerate(row) for k, v in numbers(value, f"{prefix}{i}.").items()}
    return {prefix: row}


def assert_same_update(a, b):
    (row_a, weights_a), (row_b, weights_b) = a, b
    flat_a, flat_b = numbers(row_a), numbers(row_b)
    assert flat_a.keys() == flat_b.keys()
    for key, value in flat_b.items():
        if isinstance(value, float):
            assert flat_a[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
        else:
            assert flat_a[key] == value, key
    for wa, wb in zip(weights_a, weights_b, strict=True):
        torch.testing.assert_close(wa, wb, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
@pytest.mark.parametrize("path", ["reference", "chunked"])
def test_micro_batches_give_the_unsplit_update(setup, path, objective, variant):
    unsplit = update(setup, path, 0, objective, **VARIANTS[variant])
    row, weights = unsplit
    assert row["loss"] != 0 and row["grad_norm"] > 0 and math.isfinite(row["loss"])
    if objective == "m2po":
        assert row["mask_frac"] > 0  # the batch-wide mask drops tokens: the split must reproduce it
    if objective in ("grpo", "tis", "decoupled", "m2po_cap"):
        assert row["clip_frac"] > 0
    for micro in (B, B // 2, B // 4):
        assert_same_update(update(setup, path, micro, objective, **VARIANTS[variant]), unsplit)


@pytest.mark.parametrize("objective", ["m2po", "gspo", "tis"])
def test_fused_path_micro_batches(setup, objective):
    """The Triton op (interpreted) on response positions only: the same update as the reference path, split or not."""
    pytest.importorskip("triton")
    reference = update(setup, "reference", 0, objective)
    for micro in (0, B // 4):
        assert_same_update(update(setup, "fused", micro, objective), reference)


def test_chunked_path_equals_reference(setup):
    assert_same_update(update(setup, "chunked", 0, "m2po", **VARIANTS["ar+lopti"]),
                       update(setup, "reference", 0, "m2po", **VARIANTS["ar+lopti"]))


def test_pass_two_skips_sequences_without_gradient(setup, monkeypatch):
    calls, original = [], rlbook.losspath.token_stats

    def token_stats(model, batch, temperature, path):
        calls.append((torch.is_grad_enabled(), len(batch)))
        return original(model, batch, temperature, path)

    monkeypatch.setattr(rlbook.losspath, "token_stats", token_stats)
    update(setup, "chunked", 4, "grpo")
    with_grad = [n for grad, n in calls if grad]
    assert [n for grad, n in calls if not grad] == [4, 4, 4, 4]  # pass 1 sees every sequence
    assert sum(with_grad) == 12  # pass 2: the zero-advantage group's 4 sequences are never run


def test_micro_batch_size_is_validated():
    with pytest.raises(ValueError, match="micro_batch_size"):
        RunConfig(micro_batch_size=-1)
    with pytest.raises(ValueError, match="chunked"):
        RunConfig(fused_ratio="chunked", finetune="full")
    assert "micro_batch_size" not in RunConfig().identity() and RunConfig(micro_batch_size=4).identity()[
        "micro_batch_size"] == 4


class LargestAllocation(TorchDispatchMode):
    """Bytes of the largest tensor an op allocates (outputs that alias an input, i.e. views, are not allocations)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if torch.is_tensor(t)}
        for t in tree_flatten(out)[0]:
            if torch.is_tensor(t) and t.untyped_storage().data_ptr() not in inputs:
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


@pytest.mark.parametrize("path", ["reference", "chunked"])
def test_largest_tensor_of_the_loss_path(path, monkeypatch):
    """At a scaled shape (V = 8192, 8 x 96 response tokens): the chunked update never allocates more than one chunk
    of logits; the reference path allocates the full [tokens, V] float32 log-softmax (the check can see it)."""
    vocab, chunk = 8192, 64
    monkeypatch.setattr(rlbook.losspath, "CHUNK_TOKENS", chunk)
    model, _ = build_model("nano-tiny", vocab_size=vocab)
    model = add_lora(model, 4, 8.0)
    batch = synthetic_batch(vocab, batch=8, response=96)
    batch = dataclasses.replace(batch, response_mask=torch.ones(8, 96), behavior_logp=torch.full((8, 96), -9.0))
    config = RunConfig(preset="nano-tiny", init="scratch", prompts_per_step=2, group_size=4, micro_batch_size=4,
                       fused_ratio="chunked" if path == "chunked" else "off")
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    advantages = torch.linspace(-1, 1, 8)
    full = 8 * 96 * vocab * 4  # float32 logits of every response token
    with LargestAllocation() as seen:
        train_update(model, optimizer, batch, advantages, None, *resolve(config, torch.device("cpu")),
                     config.max_grad_norm, 1)
    if path == "chunked":
        assert seen.largest <= chunk * vocab * 4 < full / 8
    else:
        assert seen.largest >= 4 * (P + 96) * vocab * 4 / 2  # a micro-batch's full-sequence logits, at least


def test_rollouts_sampled_in_turn_join_into_one_batch(setup):
    """rollout_batch_size: parts with their own paddings join into one batch whose rows keep their log-probs."""
    model, batch, *_ = setup
    first, second = batch.select(slice(0, 8)), batch.select(slice(8, 16))
    first = dataclasses.replace(first, prompt_ids=first.prompt_ids[:, 2:], prompt_mask=first.prompt_mask[:, 2:],
                                response_ids=first.response_ids[:, :9], response_mask=first.response_mask[:, :9],
                                behavior_logp=first.behavior_logp[:, :9])
    first = dataclasses.replace(first, response_mask=first.response_mask * (first.prompt_mask.sum(1, keepdim=True) > 0))
    joined = join_rollouts([first, second], pad_id=0)
    assert joined.prompt_ids.shape == (B, P) and joined.response_ids.shape == (B, C) and len(joined.problems) == B
    assert (joined.prompt_mask[:8, :2] == 0).all() and (joined.response_mask[:8, 9:] == 0).all()
    with torch.no_grad():
        alone = rlbook.losspath.token_stats(model, first, 1.0, "chunked")[0]
        together = rlbook.losspath.token_stats(model, joined, 1.0, "chunked")[0]
    torch.testing.assert_close(together[:8, :9], alone, rtol=1e-5, atol=1e-5)


def test_a_run_with_rollout_and_micro_batches(tmp_path):
    from rlbook.obtain import run_or_load
    from rlbook.runs import RunStore

    config = RunConfig(experiment="t", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4,
                       total_updates=2, updates_per_step=2, eval_every=2, eval_size=4, max_new_tokens=5,
                       rollout_batch_size=8, micro_batch_size=3, fused_ratio="chunked")
    rows = run_or_load(config, RunStore(tmp_path), progress=False, references=False).metrics
    assert [r["update"] for r in rows] == [0, 1, 2] and all(math.isfinite(r["loss"]) for r in rows[1:])
    with pytest.raises(ValueError, match="rollout_batch_size"):
        config.replace(rollout_batch_size=6)
