"""Checkpoint merging (PMA): weights by hand, streaming from disk, LoRA delta merging, atomic saving, errors."""

import copy
import os

import peft
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3ForCausalLM

from rlbook import merging
from rlbook.merging import merge_lora_adapters, merge_state_dicts, merge_weights, save_merged


def tiny_config(**kw):
    return Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=2, head_dim=16, vocab_size=50, **kw)


def tiny_model(seed):
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(tiny_config()).eval()


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Three saved checkpoints of a tiny Qwen3 model (different seeds), with a stand-in tokenizer file."""
    root = tmp_path_factory.mktemp("ckpts")
    dirs = []
    for seed in range(3):
        d = root / f"step{seed}"
        tiny_model(seed).save_pretrained(d)
        (d / "tokenizer_config.json").write_text('{"model_max_length": 64}')
        dirs.append(d)
    return dirs


# ---- weights -------------------------------------------------------------------------------------------------

def test_weights_by_hand_for_three_checkpoints():
    assert merge_weights("sma", 3) == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    assert merge_weights("wma", 3) == pytest.approx([1 / 6, 2 / 6, 3 / 6])
    assert merge_weights("ema", 3, alpha=0.2) == pytest.approx([0.64, 0.16, 0.2])
    assert merge_weights("ema", 3, alpha=1.0) == pytest.approx([0.0, 0.0, 1.0])  # a = 1 keeps the newest only


@pytest.mark.parametrize("n", [1, 2, 3, 6, 10, 15])
def test_weights_sum_to_one(n):
    for method, alpha in [("sma", 0.2), ("wma", 0.2), ("ema", 0.1), ("ema", 0.2), ("ema", 0.5)]:
        assert sum(merge_weights(method, n, alpha)) == pytest.approx(1.0)


def test_ema_weights_unroll_the_recursion():
    values = [3.0, -1.0, 4.0, 1.5, 9.0]  # M^(1) = M_1, M^(i) = a M_i + (1 - a) M^(i-1)
    m = values[0]
    for v in values[1:]:
        m = 0.1 * v + 0.9 * m
    assert sum(w * v for w, v in zip(merge_weights("ema", 5, 0.1), values)) == pytest.approx(m)


# ---- merging full checkpoints ----------------------------------------------------------------------------------

def hand_checkpoints(dtype=torch.float32):
    return [{"w": torch.tensor([1.0, 2.0], dtype=dtype), "steps": torch.tensor([7])},
            {"w": torch.tensor([4.0, 8.0], dtype=dtype), "steps": torch.tensor([7])},
            {"w": torch.tensor([10.0, 20.0], dtype=dtype), "steps": torch.tensor([7])}]


@pytest.mark.parametrize("method, expected", [
    ("sma", [5.0, 10.0]),                     # (1 + 4 + 10) / 3
    ("wma", [6.5, 13.0]),                     # (1 * 1 + 2 * 4 + 3 * 10) / 6
    ("ema", [3.28, 6.56]),                    # 0.64 * 1 + 0.16 * 4 + 0.2 * 10
])
def test_merged_tensor_by_hand(method, expected):
    merged = merge_state_dicts(hand_checkpoints(), method, alpha=0.2)
    torch.testing.assert_close(merged["w"], torch.tensor(expected))
    assert torch.equal(merged["steps"], torch.tensor([7]))  # integer buffers are copied


def test_result_keeps_the_checkpoint_dtype():
    merged = merge_state_dicts(hand_checkpoints(torch.bfloat16), "sma")
    assert merged["w"].dtype == torch.bfloat16 and merged["steps"].dtype == torch.int64
    torch.testing.assert_close(merged["w"], torch.tensor([5.0, 10.0], dtype=torch.bfloat16))


@pytest.mark.parametrize("method", ["sma", "wma", "ema"])
def test_identical_checkpoints_merge_to_themselves(method):
    sd = tiny_model(0).state_dict()
    merged = merge_state_dicts([sd] * 4, method)
    assert merged.keys() == sd.keys()
    for key in sd:
        torch.testing.assert_close(merged[key], sd[key])


def test_streaming_from_paths_equals_merging_in_memory(checkpoints, tmp_path):
    in_memory = [load_file(d / "model.safetensors") for d in checkpoints]
    save_file(in_memory[2], tmp_path / "last.safetensors")  # a bare .safetensors file is a checkpoint too
    sources = [checkpoints[0], str(checkpoints[1]), tmp_path / "last.safetensors"]
    for method in ("sma", "wma", "ema"):
        expected, streamed = merge_state_dicts(in_memory, method), merge_state_dicts(sources, method)
        assert streamed.keys() == expected.keys()
        for key in expected:
            assert torch.equal(streamed[key], expected[key])


def test_save_merged_loads_with_from_pretrained_and_gives_the_same_logits(checkpoints, tmp_path):
    merged = merge_state_dicts(checkpoints, "wma")
    out = save_merged(merged, checkpoints[-1], tmp_path / "merged")
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors", "tokenizer_config.json"]
    in_memory = Qwen3ForCausalLM(tiny_config()).eval()
    in_memory.load_state_dict(merged)
    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = torch.tensor([[1, 5, 9, 2, 49, 0]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, in_memory(ids).logits, rtol=0, atol=0)


def test_save_merged_replaces_atomically_and_cleans_up_on_failure(checkpoints, tmp_path, monkeypatch):
    out = tmp_path / "merged"
    save_merged(merge_state_dicts(checkpoints[:1], "sma"), checkpoints[0], out)
    first = load_file(out / "model.safetensors")
    save_merged(merge_state_dicts(checkpoints, "sma"), checkpoints[0], out)  # overwrites
    assert not torch.equal(load_file(out / "model.safetensors")["lm_head.weight"], first["lm_head.weight"])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    before = load_file(out / "model.safetensors")
    monkeypatch.setattr(merging, "save_file", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_merged(first, checkpoints[0], out)
    assert os.listdir(tmp_path) == ["merged"]  # no temporary directory left behind
    assert all(torch.equal(v, before[k]) for k, v in load_file(out / "model.safetensors").items())


def test_save_merged_handles_tied_weights(tmp_path):
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_config(tie_word_embeddings=True)).eval()
    model.save_pretrained(tmp_path / "tied")
    sd = model.state_dict()  # lm_head.weight and embed_tokens.weight share memory here
    out = save_merged(sd, tmp_path / "tied", tmp_path / "copy")
    ids = torch.tensor([[3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(AutoModelForCausalLM.from_pretrained(out)(ids).logits, model(ids).logits)


# ---- LoRA ------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory):
    """Three LoRA adapters on one base (lora_B perturbed: nonzero deltas), saved, plus their folded weights."""
    root = tmp_path_factory.mktemp("lora")
    base = tiny_model(0)
    dirs, folded, in_memory = [], [], []
    for i in range(3):
        config = peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")
        wrapped = peft.get_peft_model(copy.deepcopy(base), config)
        gen = torch.Generator().manual_seed(100 + i)
        with torch.no_grad():
            for name, p in wrapped.named_parameters():
                if "lora_B" in name:
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
        wrapped.save_pretrained(root / f"adapter{i}")
        dirs.append(root / f"adapter{i}")
        in_memory.append({k: v.clone() for k, v in wrapped.state_dict().items() if ".lora_" in k})
        folded.append({k: v.clone() for k, v in wrapped.merge_and_unload().state_dict().items()})
    return base.state_dict(), dirs, folded, in_memory


def test_peft_key_naming(lora_runs):
    _, dirs, _, in_memory = lora_runs
    saved = load_file(dirs[0] / "adapter_model.safetensors")
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in saved
    assert "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight" in saved
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight" in in_memory[0]
    assert not any("lm_head" in k for k in saved)  # all-linear leaves the output layer alone


@pytest.mark.parametrize("method", ["sma", "wma", "ema"])
def test_lora_delta_merging_equals_merging_folded_weights(lora_runs, method):
    base, dirs, folded, _ = lora_runs
    merged = merge_lora_adapters(dirs, base, method)
    expected = merge_state_dicts(folded, method)
    assert merged.keys() == base.keys()
    for key in base:
        torch.testing.assert_close(merged[key], expected[key])
    assert not torch.equal(merged["model.layers.0.mlp.up_proj.weight"], base["model.layers.0.mlp.up_proj.weight"])


def test_lora_state_dicts_with_explicit_scaling(lora_runs):
    base, dirs, _, in_memory = lora_runs
    from_dirs = merge_lora_adapters(dirs, base, "wma")
    from_dicts = merge_lora_adapters(in_memory, base, "wma", scaling=8 / 4)  # lora_alpha / r
    for key in base:
        torch.testing.assert_close(from_dicts[key], from_dirs[key])


def test_averaging_a_and_b_separately_is_not_the_same(lora_runs):
    _, dirs, _, _ = lora_runs
    key = "base_model.model.model.layers.0.self_attn.v_proj.lora_"
    adapters = [load_file(d / "adapter_model.safetensors") for d in dirs]
    mean_of_products = sum(a[key + "B.weight"] @ a[key + "A.weight"] for a in adapters) / 3
    mean_a, mean_b = (sum(a[key + ab + ".weight"] for a in adapters) / 3 for ab in "AB")
    product_of_means = mean_b @ mean_a
    assert not torch.allclose(mean_of_products, product_of_means, atol=1e-4)


# ---- errors ----------------------------------------------------------------------------------------------------

def test_unknown_method():
    with pytest.raises(ValueError, match="'lerp'.*sma, ema, wma"):
        merge_state_dicts(hand_checkpoints(), "lerp")


def test_empty_list():
    with pytest.raises(ValueError, match="at least one checkpoint"):
        merge_state_dicts([], "sma")


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5])
def test_ema_alpha_outside_unit_interval(alpha):
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\]"):
        merge_state_dicts(hand_checkpoints(), "ema", alpha=alpha)


def test_different_keys_name_the_key():
    a, b = hand_checkpoints()[:2]
    with pytest.raises(ValueError, match="checkpoint 1.*missing key 'steps'"):
        merge_state_dicts([a, {"w": b["w"]}], "sma")
    with pytest.raises(ValueError, match="checkpoint 1.*extra key 'bias'"):
        merge_state_dicts([a, {**b, "bias": torch.zeros(2)}], "sma")


def test_different_shapes_name_key_and_both_shapes():
    a, b = hand_checkpoints()[:2]
    with pytest.raises(ValueError, match=r"'w' has shape \(3,\), the first checkpoint has \(2,\)"):
        merge_state_dicts([a, {**b, "w": torch.zeros(3)}], "sma")


def test_integer_buffers_must_agree():
    a, b = hand_checkpoints()[:2]
    with pytest.raises(ValueError, match="non-floating tensor 'steps' differs"):
        merge_state_dicts([a, {**b, "steps": torch.tensor([8])}], "sma")


def test_lora_errors(lora_runs, tmp_path):
    base, dirs, _, in_memory = lora_runs
    with pytest.raises(ValueError, match="explicit scaling"):
        merge_lora_adapters(in_memory, base, "sma")
    with pytest.raises(ValueError, match="not a peft adapter directory"):
        merge_lora_adapters([tmp_path], base, "sma")
    with pytest.raises(ValueError, match="which the base state dict does not have"):
        merge_lora_adapters(dirs, {"lm_head.weight": base["lm_head.weight"]}, "sma")
    with pytest.raises(ValueError, match="unknown merge method"):
        merge_lora_adapters(dirs, base, "mean")


def test_save_merged_needs_a_checkpoint_directory(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        save_merged(hand_checkpoints()[0], tmp_path, tmp_path / "out")
