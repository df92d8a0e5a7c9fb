"""The training-pass speed paths of the fast engine give the reference update within a stated tolerance: the
shared-prompt loss path (PREFIX_SHARING_TOLERANCE: the prompt's gradient is summed in another order) and the no-grad
pass over zero-advantage sequences (live_row_stats)."""
import copy

import pytest
import torch

from rlbook.config import RunConfig
from rlbook.losspath import (PREFIX_SHARING_TOLERANCE, live_row_stats, shared_prompt_logprobs, token_logprobs,
                             token_stats)
from rlbook.models import add_lora, build_model
from rlbook.rollout import Rollout
from rlbook.trainer import resolve, train_update

pytestmark = pytest.mark.usefixtures("one_thread")
GROUPS, G, P, C = 4, 4, 6, 7


def grouped_batch(vocab: int, shuffle: bool) -> Rollout:
    """GROUPS prompts (two left-padded) x G responses of mixed lengths; rows shuffled (groups not contiguous) or
    grouped."""
    g = torch.Generator().manual_seed(0)
    prompt_mask = torch.ones(GROUPS, P, dtype=torch.long)
    prompt_mask[1, :2] = prompt_mask[3, :1] = 0
    prompt_ids = torch.randint(1, vocab, (GROUPS, P), generator=g) * prompt_mask
    rows = torch.arange(GROUPS).repeat_interleave(G)
    if shuffle:
        rows = rows[torch.randperm(len(rows), generator=g)]
    lengths = torch.randint(1, C + 1, (len(rows),), generator=g)
    response_mask = (torch.arange(C)[None] < lengths[:, None]).float()
    return Rollout(prompt_ids[rows], prompt_mask[rows], torch.randint(1, vocab, (len(rows), C), generator=g),
                   response_mask, torch.zeros(len(rows), C), torch.rand(len(rows), generator=g),
                   torch.zeros(len(rows), dtype=torch.bool), [""] * len(rows), [{}] * len(rows), 0)


@pytest.fixture(scope="module")
def policy():
    model, _ = build_model("nano-small", seed=0)
    model = add_lora(model)
    for name, p in model.named_parameters():  # LoRA's B starts at 0: make the adapter non-trivial
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    return model.train()


def logp_and_grads(model, logprobs, batch):
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    logp, _ = logprobs(model, batch, 0.7)
    weights = torch.linspace(-1, 1, logp.numel()).view(logp.shape) * batch.response_mask
    (logp * weights).sum().backward()
    return logp.detach(), [p.grad.clone() for p in params]


@pytest.mark.parametrize("shuffle", [False, True])
def test_shared_prompts_give_the_reference_logprobs_and_gradients(policy, shuffle):
    batch = grouped_batch(policy.config.vocab_size, shuffle)
    ref_logp, ref_grads = logp_and_grads(policy, token_logprobs, batch)
    logp, grads = logp_and_grads(policy, shared_prompt_logprobs, batch)
    live = batch.response_mask.bool()
    assert (logp - ref_logp)[live].abs().max() < PREFIX_SHARING_TOLERANCE["logp"]
    worst = max(((a - b).norm() / a.norm()).item() for a, b in zip(ref_grads, grads))
    assert worst < PREFIX_SHARING_TOLERANCE["grad_rel"]
    assert ref_logp[live].std() > 0.1  # the comparison is on log-probs that vary, not constants


def test_an_update_through_shared_prompts_is_the_reference_update(policy):
    batch = grouped_batch(policy.config.vocab_size, shuffle=False)
    advantages = batch.rewards - batch.rewards.view(GROUPS, G).mean(1).repeat_interleave(G)
    after = {}
    for sharing in (False, True):
        model = copy.deepcopy(policy)
        config = RunConfig(preset="nano-small", init="scratch", prompts_per_step=GROUPS, group_size=G,
                           engine="fast" if sharing else "reference")
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
        row = train_update(model, optimizer, batch, advantages, None, *resolve(config, torch.device("cpu")),
                           config.max_grad_norm, 1)
        after[sharing] = row, [p.detach() for p in model.parameters() if p.requires_grad]
    assert after[True][0]["loss"] == pytest.approx(after[False][0]["loss"], abs=PREFIX_SHARING_TOLERANCE["logp"])
    moved = [(b - a).norm() / a.norm() for a, b in zip(after[False][1], after[True][1])]
    assert max(moved) < PREFIX_SHARING_TOLERANCE["grad_rel"]


def test_the_fast_engine_shares_prompts_and_names_what_it_cannot_combine_with():
    config = RunConfig(engine="reference")
    assert resolve(config, torch.device("cpu"))[1].name == "reference"
    shared = config.replace(engine="fast")
    assert shared.hash() != config.hash() and resolve(shared, torch.device("cpu"))[1].name == "shared"
    with pytest.raises(ValueError, match="engine='fast'.*fused_ratio='chunked'"):
        RunConfig(engine="fast", fused_ratio="chunked")


@pytest.mark.parametrize("objective", ["grpo", "gspo", "m2po"])
@pytest.mark.parametrize("sharing", [False, True])
def test_zero_advantage_sequences_without_grad_give_the_same_update(policy, objective, sharing):
    batch = grouped_batch(policy.config.vocab_size, shuffle=True)
    group = batch.prompt_ids[:, -1]  # rows of a group share their prompt
    advantages = (batch.rewards - 0.5) * (group != group[0])  # one group's advantages are all 0
    advantages = advantages[:, None] * batch.response_mask
    results, path = {}, "shared" if sharing else "reference"
    for skip in (False, True):
        model = copy.deepcopy(policy)
        config = RunConfig(preset="nano-small", init="scratch", prompts_per_step=GROUPS, group_size=G,
                           objective=objective)
        logp, entropy = (live_row_stats(model, batch, advantages, config.temperature, path) if skip else
                         token_stats(model, batch, config.temperature, path))
        loss, _ = resolve(config, torch.device("cpu"))[0](logp, batch, advantages, None)
        loss.backward()
        results[skip] = loss.item(), logp.detach(), entropy, [p.grad for p in model.parameters() if p.requires_grad]
    (loss, logp, entropy, grads), (ref_loss, ref_logp, ref_entropy, ref_grads) = results[True], results[False]
    assert loss == pytest.approx(ref_loss, abs=1e-6)
    assert (logp - ref_logp).abs().max() < 1e-5 and (entropy - ref_entropy).abs().max() < 1e-5  # rows in order
    assert max(((a - b).norm() / a.norm()).item() for a, b in zip(ref_grads, grads)) < 1e-5
    assert 0 < (advantages.ne(0).any(1)).sum() < len(batch)

