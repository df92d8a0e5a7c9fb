"""The engine setting: each engine is one combination of speed paths, the default is the fastest one a config allows
(chosen from the config alone), the engine is part of a run's identity, and golden results pin what the default engines compute (the reference engine's: tests/test_versions.py).

When the golden comparison fails, the change alters what a default-engine run computes: bump TRAINING_VERSION in
rlbook/versions.py, then rewrite the golden file with `TRITON_INTERPRET=1 .venv/bin/python tests/test_engines.py`.
"""
import json
from pathlib import Path

import pytest
import torch

from rlbook.config import RunConfig
from rlbook.engines import DEFAULT_ORDER, ENGINES
from rlbook.versions import TRAINING_VERSION, WARM_START_VERSION
from test_versions import KEYS, RUN, close

GOLDEN = Path(__file__).parent / "golden" / "engines.json"
# The golden run of tests/test_versions.py (stale, two updates per batch) and its on-policy form, each on the engine
# the default picks for it
DEFAULT_RUNS = {"fast": {**RUN, "engine": "auto"},
                "graph": {**RUN, "engine": "auto", "staleness": 0, "updates_per_step": 1, "total_updates": 3}}


@pytest.mark.parametrize("changes, expected", [
    ({}, "graph"),  # on-policy, one update per batch, LoRA, a dense model
    ({"staleness": 4, "updates_per_step": 4}, "fast"),
    ({"objective": "tis"}, "fast"), ({"objective": "dpo"}, "fast"), ({"sync_every": 0}, "fast"),
    ({"micro_batch_size": 4}, "fast"), ({"finetune": "full"}, "fast"), ({"lopti_eta": 0.5}, "fast"),
    ({"preset": "nano-moe", "finetune": "full"}, "reference"),  # the lean sampler is dense-only
    ({"rollout_dtype": "bfloat16", "preset": "nano-moe", "finetune": "full"}, "reference"),
    ({"fused_ratio": "chunked", "updates_per_step": 2}, "reference"),  # shared prompts take the reference loss path
    ({"init": "/some/checkpoint"}, "reference"),  # no config.json to say what it is
])
def test_the_default_is_the_fastest_engine_the_config_allows(changes, expected):
    config = RunConfig(**changes)
    assert config.engine == "auto" and config.resolved_engine.name == expected
    faster = DEFAULT_ORDER[:DEFAULT_ORDER.index(expected)]
    for name in faster:  # each faster engine is refused by name, with the reason
        with pytest.raises(ValueError, match=f"engine={name!r} cannot compute this config"):
            config.replace(engine=name)
    assert config.replace(engine=expected).resolved_engine.name == expected


def test_a_checkpoint_directory_is_read_for_its_architecture(tmp_path):
    """--init DIR: a dense Qwen3 checkpoint gets the fast engines, a mixture of experts or an unreadable one the
    reference engine (the lean sampler refused by name)."""
    from rlbook.models import build_model

    for preset in ("nano-tiny", "nano-moe-tiny"):
        model, tokenizer = build_model(preset)
        model.save_pretrained(tmp_path / preset)
        tokenizer.save_pretrained(tmp_path / preset)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "config.json").write_text("")
    assert RunConfig(init=str(tmp_path / "nano-tiny")).resolved_engine.name == "graph"
    assert RunConfig(init=str(tmp_path / "nano-tiny"), staleness=4, updates_per_step=4).resolved_engine.name == "fast"
    for directory, kind in (("nano-moe-tiny", "is a mixture of experts"), ("junk", "is unreadable")):
        config = RunConfig(init=str(tmp_path / directory))
        assert config.resolved_engine.name == "reference"
        with pytest.raises(ValueError, match=f"lean sampler needs a dense Qwen3 model; the checkpoint in .* {kind}"):
            config.replace(engine="fast")


def test_each_engine_is_one_setting_of_the_speed_paths():
    fast = {"prefix_sharing", "merged_sampling", "skip_zero_advantage"}
    assert {e.name: {k for k, v in vars(e).items() if v is True} for e in ENGINES.values()} == {
        "reference": set(), "fast": fast, "graph": {"sampling_graph"}, "static": fast | {"static_sampling"}}
    with pytest.raises(ValueError, match="engine='turbo' is not valid; choose one of: auto, reference, fast"):
        RunConfig(engine="turbo")


def test_the_engine_is_part_of_the_identity_and_auto_is_the_engine_it_picks():
    config = RunConfig(staleness=4, updates_per_step=4)
    assert config.identity()["engine"] == "fast" and config.hash() == config.replace(engine="fast").hash()
    assert len({config.replace(engine=e).hash() for e in ("reference", "fast", "static")}) == 3


def test_the_identity_holds_the_fields_that_differ_from_their_defaults():
    config = RunConfig(name="x", experiment="y", seed=3, lr=1e-3, lora_alpha=32, init="scratch")
    assert config.identity() == {"seed": 3, "lr": 1e-3, "init": "scratch", "engine": "graph",
                                 "training_version": TRAINING_VERSION}
    assert RunConfig().identity() == {"engine": "graph", "training_version": TRAINING_VERSION,
                                      "warm_start_version": WARM_START_VERSION}


def test_a_speed_option_of_the_knob_era_is_an_unknown_key():
    """Up to TRAINING_VERSION 2 the engine was five separate fields; no stored run has them any more."""
    with pytest.raises(ValueError, match=r"unknown config keys \['prefix_sharing'\]; valid keys: .*engine"):
        RunConfig.from_dict({"prefix_sharing": True})


def compute(root: Path) -> dict:
    import rlbook.trainer
    from rlbook.obtain import run_or_load
    from rlbook.runs import RunStore
    from rlbook.tasks import make_task
    from shaped import ShapedTask

    torch.set_num_threads(1)
    rlbook.trainer.make_task = lambda name, **params: ShapedTask(make_task(name, **params))
    try:
        runs = {name: run_or_load(RunConfig(**values), RunStore(root), progress=False, references=False)
                for name, values in DEFAULT_RUNS.items()}
    finally:
        rlbook.trainer.make_task = make_task
    assert {name: run.meta["engine"] for name, run in runs.items()} == {name: name for name in DEFAULT_RUNS}
    return {"training_version": TRAINING_VERSION,
            "runs": {name: [{k: r[k] for k in KEYS if k in r} for r in run.metrics] for name, run in runs.items()}}


@pytest.mark.usefixtures("one_thread")
def test_the_default_engines_match_their_golden_results(tmp_path):
    golden, now = json.loads(GOLDEN.read_text()), compute(tmp_path)
    assert golden["training_version"] == TRAINING_VERSION, (
        "rlbook.versions changed: rewrite tests/golden/engines.json (see this file's docstring)")
    assert close(golden["runs"], now["runs"]), (
        "a default-engine run now computes other metrics: bump TRAINING_VERSION in rlbook/versions.py, then rewrite "
        "tests/golden/engines.json (see this file's docstring)")


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        GOLDEN.write_text(json.dumps(compute(Path(tmp)), indent=1) + "\n")
    print(f"wrote {GOLDEN}")


@pytest.mark.usefixtures("one_thread")
def test_shared_prompts_under_gradient_checkpointing_are_the_unchecked_path():
    """The fast and static engines' training pass on a model with gradient checkpointing (every model of LARGE_HIDDEN
    width and more): the prompts' KV cache survives into the checkpointed response pass; log-probs bit-equal to the
    unchecked pass, gradients equal up to the recomputation's rounding."""
    from rlbook.lean_decoder import LeanDecoder
    from rlbook.losspath import shared_prompt_logprobs
    from rlbook.models import add_lora, build_model
    from rlbook.rollout import rollout
    from rlbook.tasks import make_task

    model, tokenizer = build_model("nano-small", seed=4)
    model = add_lora(model)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    task = make_task("arithmetic")
    batch = rollout(LeanDecoder(model), tokenizer, task, task.generate(4, seed=4), 4, 8, 1.0,
                    torch.Generator().manual_seed(4), policy_version=0)
    params = [p for p in model.parameters() if p.requires_grad]
    weights = torch.linspace(-1, 1, batch.response_mask.numel()).view(batch.response_mask.shape) * batch.response_mask
    model.train()
    passes = []
    for checkpointed in (False, True):
        if checkpointed:
            model.activation_checkpointing_enable()
        logp, entropy = shared_prompt_logprobs(model, batch, 1.0)
        passes.append((logp.detach(), entropy.detach(), torch.autograd.grad((logp * weights).sum(), params)))
    (logp, entropy, grads), (logp_c, entropy_c, grads_c) = passes
    assert torch.equal(logp, logp_c) and torch.equal(entropy, entropy_c)
    assert max(((a - b).norm() / a.norm()).item() for a, b in zip(grads, grads_c)) < 1e-6
    assert all(layer.gradient_checkpointing for layer in model.get_base_model().model.layers)  # left as it was
