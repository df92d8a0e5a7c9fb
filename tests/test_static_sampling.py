"""The static-cache sampler (the static engine) draws the tokens `rollout.sample` draws through the same lean
decoder, with behaviour log-probs within MERGED_TOLERANCE, greedy and sampled, with padded prompts and rows that
finish early; a run with it trains as one without. On the CPU the decoding step runs eagerly: the CUDA graph replays
this same step on a GPU (bench/static_sampling.py measures it there)."""
import math

import pytest
import torch

import rlbook.trainer
from rlbook.config import RunConfig
from rlbook.lean_decoder import MERGED_TOLERANCE, LeanDecoder
from rlbook.obtain import run_or_load
from rlbook.rollout import sample
from rlbook.runs import RunStore
from rlbook.static_sampling import static_sample
from rlbook.tasks import make_task
from shaped import ShapedTask
from test_lean_decoder import policy, prompts

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_static_sampling_draws_the_same_tokens(temperature):
    model, tokenizer = policy(seed=1)
    decoder = LeanDecoder(model, merged=True)
    batch = prompts(8, 8, 1)
    static = static_sample(decoder, tokenizer, batch, 12, temperature, torch.Generator().manual_seed(1))
    plain = sample(decoder, tokenizer, batch, 12, temperature, torch.Generator().manual_seed(1))
    assert torch.equal(static[0], plain[0]) and torch.equal(static[1], plain[1])  # the prompts, left-padded
    assert not plain[1].all()  # prompts of different lengths
    assert torch.equal(static[2], plain[2]) and torch.equal(static[3], plain[3])  # tokens and response mask
    assert (static[4] - plain[4]).abs().max() < MERGED_TOLERANCE
    if temperature:
        assert plain[3].sum(1).min() < plain[3].sum(1).max()  # rows finished at different steps


def test_static_sampling_needs_the_lean_decoder_and_a_dense_model():
    model, tokenizer = policy()
    with pytest.raises(TypeError, match="LeanDecoder"):
        static_sample(model, tokenizer, prompts(2, 2, 0), 4)
    with pytest.raises(ValueError, match="engine='static'.*dense Qwen3 model"):
        RunConfig(engine="static", preset="nano-moe", finetune="full")
    config = RunConfig(engine="fast")
    assert config.replace(engine="static").hash() != config.hash()


def test_a_run_with_static_sampling_trains_as_one_without(tmp_path, monkeypatch):
    monkeypatch.setattr(rlbook.trainer, "make_task", lambda name, **params: ShapedTask(make_task(name, **params)))
    base = RunConfig(experiment="t", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4,
                     total_updates=2, eval_every=2, eval_size=8, max_new_tokens=6, engine="fast")
    merged, static = (run_or_load(c, RunStore(tmp_path), progress=False, references=False).metrics
                      for c in (base, base.replace(engine="static")))
    for update in (1, 2):
        assert static[update]["reward"] == merged[update]["reward"]
        assert static[update]["response_len"] == merged[update]["response_len"]
        assert math.isclose(static[update]["loss"], merged[update]["loss"], abs_tol=1e-5)
