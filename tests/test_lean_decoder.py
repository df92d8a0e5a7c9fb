"""The lean sampling copy computes the model's logits within MERGED_TOLERANCE, with merged projections
(the fast engine) or LoRA ones; it samples the same tokens with the same random stream and follows the
model's weights on refresh. Sampled with its graph (the graph engine), the log-probs and their gradients are
the training pass's within the same tolerances; both options are opt-in."""
import math

import pytest
import torch

import rlbook.trainer
from rlbook.config import RunConfig
from rlbook.lean_decoder import MERGED_TOLERANCE, LeanDecoder
from rlbook.losspath import PREFIX_SHARING_TOLERANCE, token_logprobs
from rlbook.models import add_lora, build_model
from rlbook.obtain import run_or_load
from rlbook.decoding import positions
from rlbook.rollout import rollout, sample
from rlbook.runs import RunStore
from rlbook.tasks import make_task
from rlbook.tokenizer import char_tokenizer
from shaped import ShapedTask

pytestmark = pytest.mark.usefixtures("one_thread")


def policy(preset: str = "nano-small", seed: int = 0, std: float = 0.05):
    model, tokenizer = build_model(preset, seed=seed)
    model = add_lora(model)
    for name, p in model.named_parameters():  # LoRA's B starts at 0: make the adapter non-trivial
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=std)
    return model.eval(), tokenizer


def prompts(n: int, group: int, seed: int) -> list[str]:
    numbers = torch.randint(0, 1000, (n, 2), generator=torch.Generator().manual_seed(seed)).tolist()
    return [f"{a}+{b}=" for a, b in numbers for _ in range(group)]


@pytest.mark.parametrize("merged", [True, False])
@torch.no_grad()
def test_logits_match_the_model_through_prefill_and_decoding(merged):
    """Teacher-forced: left-padded prompts, then 4 decoding steps with one row's mask gaining 0s (it finished: its
    logits are never used again, the other rows' must not change)."""
    model, tokenizer = policy()
    decoder = LeanDecoder(model, merged)
    enc = tokenizer(prompts(6, 1, 0), return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert not mask.all()  # the prompts are padded
    mine, theirs = (m(input_ids=ids, attention_mask=mask, position_ids=positions(mask), use_cache=True)
                    for m in (decoder, model))
    assert (mine.logits[:, -1] - theirs.logits[:, -1]).abs().max() < MERGED_TOLERANCE
    tokens = torch.randint(3, len(tokenizer), (4, len(ids)), generator=torch.Generator().manual_seed(0))
    for step, token in enumerate(tokens):
        mask = torch.cat([mask, torch.ones(len(ids), 1, dtype=mask.dtype)], 1)
        mask[0, -1] = int(step < 2)
        mine, theirs = (m(input_ids=token[:, None], attention_mask=mask, position_ids=positions(mask)[:, -1:],
                          past_key_values=out.past_key_values, use_cache=True)
                        for m, out in ((decoder, mine), (model, theirs)))
        live = slice(0 if step < 2 else 1, None)
        difference = (mine.logits[live, -1] - theirs.logits[live, -1]).abs().max()
        assert difference < MERGED_TOLERANCE and theirs.logits.std() > 0.1


@pytest.mark.parametrize("merged", [True, False])
def test_sampling_draws_the_models_tokens(merged):
    model, tokenizer = policy(seed=1)
    batch = prompts(8, 8, 1)
    fast = sample(LeanDecoder(model, merged), tokenizer, batch, 12, 1.0, torch.Generator().manual_seed(1))
    plain = sample(model, tokenizer, batch, 12, 1.0, torch.Generator().manual_seed(1))
    assert torch.equal(fast[2], plain[2]) and torch.equal(fast[3], plain[3])
    assert (fast[4] - plain[4]).abs().max() < MERGED_TOLERANCE
    assert plain[3].sum(1).min() < plain[3].sum(1).max()  # rows finished at different steps


@torch.no_grad()
def test_refresh_follows_the_models_weights():
    model, tokenizer = policy()
    decoder = LeanDecoder(model)
    ids = tokenizer(["12+34="], return_tensors="pt", add_special_tokens=False)["input_ids"].repeat(4, 1)
    call = dict(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions(torch.ones_like(ids)))
    before = decoder(**call).logits
    for name, p in model.named_parameters():
        if "lora_A" in name:
            p.mul_(-1.0)
    assert torch.equal(decoder(**call).logits, before)  # a copy: the model's new weights are not seen yet
    after = decoder.refresh(model)(**call).logits
    assert (after - model(**call).logits[:, -1:]).abs().max() < MERGED_TOLERANCE
    assert (after - before).abs().max() > 100 * MERGED_TOLERANCE


def test_the_lean_sampler_is_dense_only():
    config = RunConfig(engine="reference")
    assert config.replace(engine="fast").hash() != config.hash()
    with pytest.raises(ValueError, match="engine='fast' cannot compute this config: the lean sampler needs a dense"):
        RunConfig(preset="nano-moe", engine="fast")
    with pytest.raises(ValueError, match="dense Qwen3"):
        LeanDecoder(build_model("nano-moe")[0])


def test_runs_with_the_speed_options_train_as_the_reference_run(tmp_path, monkeypatch):
    monkeypatch.setattr(rlbook.trainer, "make_task", lambda name, **params: ShapedTask(make_task(name, **params)))
    base = RunConfig(experiment="t", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4,
                     total_updates=2, eval_every=2, eval_size=8, max_new_tokens=6, engine="reference")
    runs = [run_or_load(c, RunStore(tmp_path), progress=False, references=False)
            for c in (base, base.replace(engine="fast"), base.replace(engine="graph"))]
    assert runs[1].meta["loss_path"] == "shared"
    reference = runs[0].metrics[1]  # the first update: the same sampled batch
    for fast in (runs[1].metrics[1], runs[2].metrics[1]):
        assert fast["reward"] == reference["reward"] and fast["response_len"] == reference["response_len"]
        assert math.isclose(fast["loss"], reference["loss"], abs_tol=1e-5)
        assert math.isclose(fast["entropy"], reference["entropy"], abs_tol=1e-5)


def test_the_sampling_graph_gives_the_training_pass_logprobs_and_gradients():
    model, tokenizer = policy(seed=2)
    problems = make_task("arithmetic").generate(4, seed=2)
    batch = rollout(LeanDecoder(model, merged=False), tokenizer, make_task("arithmetic"), problems, 4, 10, 1.0,
                    torch.Generator().manual_seed(2), policy_version=0, graph=True)
    params = [p for p in model.parameters() if p.requires_grad]
    weights = torch.linspace(-1, 1, batch.response_mask.numel()).view(batch.response_mask.shape) * batch.response_mask
    sampled = torch.autograd.grad((batch.logp_graph * weights).sum(), params)
    model.train()
    logp, entropy = token_logprobs(model, batch, 1.0)
    trained = torch.autograd.grad((logp * weights).sum(), params)
    live = batch.response_mask.bool()
    assert (batch.logp_graph.detach() - logp.detach())[live].abs().max() < PREFIX_SHARING_TOLERANCE["logp"]
    assert torch.equal(batch.behavior_logp, batch.logp_graph.detach())
    assert (batch.entropy - entropy)[live].abs().max() < PREFIX_SHARING_TOLERANCE["logp"]
    worst = max(((a - b).norm() / a.norm()).item() for a, b in zip(trained, sampled))
    assert worst < PREFIX_SHARING_TOLERANCE["grad_rel"]
    assert batch.response_mask.sum(1).min() < batch.response_mask.shape[1]  # rows finished early (left the batch)


def test_the_graph_engine_needs_an_on_policy_single_update_config():
    config = RunConfig(engine="graph")
    assert config.hash() != RunConfig(engine="fast").hash()
    for wrong in (dict(staleness=4, updates_per_step=4), dict(objective="tis"), dict(sync_every=2),
                  dict(micro_batch_size=4)):
        with pytest.raises(ValueError, match="engine='graph'.*backpropagates through the sampling pass"):
            RunConfig(engine="graph", **wrong)
    with pytest.raises(ValueError, match="engine='graph'.*dense Qwen3 model"):
        RunConfig(engine="graph", preset="nano-moe")


def bfloat16_policy():
    """One layer at Qwen3-1.7B's width, in bfloat16 (models.checkpoint_dtype), with a float32 LoRA adapter (peft's
    default), as a 1.7B run holds it."""
    model, tokenizer = build_model("qwen3-1.7b-random", num_hidden_layers=1, vocab_size=len(char_tokenizer()))
    model = add_lora(model)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    assert model.get_base_model().lm_head.weight.dtype == torch.bfloat16 and all(
        p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)
    return model.eval(), tokenizer


@torch.no_grad()
def test_a_bfloat16_model_with_a_float32_adapter_is_sampled_as_peft_computes_it():
    """LoRA projections: peft's own forward, bit for bit. Merged: peft's own merge (W + s B A in float32, rounded
    once to bfloat16), so the lean copy computes what `merge_and_unload` would."""
    model, tokenizer = bfloat16_policy()
    enc = tokenizer(prompts(4, 1, 3), return_tensors="pt", padding=True, add_special_tokens=False)
    call = dict(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                position_ids=positions(enc["attention_mask"]))
    peft_logits = model(**call).logits[:, -1:]
    assert torch.equal(LeanDecoder(model, merged=False)(**call).logits, peft_logits)
    merged = LeanDecoder(model, merged=True)(**call).logits
    assert merged.dtype == torch.bfloat16 and (merged - peft_logits).abs().max() > 0  # rounded otherwise
    assert torch.equal(merged, model.merge_and_unload()(**call).logits[:, -1:])
