"""Model presets, LoRA wrapping, and the from_pretrained path (on nano checkpoints the tests save themselves)."""
import shutil

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeForCausalLM

from rlbook.models import (LORA_TARGETS, PRESETS, add_lora, build_model, count_parameters, get_preset,
                           load_pretrained)
from rlbook.tokenizer import char_tokenizer

IDS = torch.tensor([[2, 40, 50, 60, 70, 1], [68, 69, 70, 71, 72, 73]])


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(
    "preset, cls, low, high",
    [
        ("nano-tiny", Qwen3ForCausalLM, 0.10e6, 0.16e6),
        ("nano-small", Qwen3ForCausalLM, 0.9e6, 1.1e6),
        ("nano-moe", Qwen3MoeForCausalLM, 1.0e6, 2.0e6),
        ("nano-moe-tiny", Qwen3MoeForCausalLM, 0.10e6, 0.16e6),
    ],
)
def test_nano_presets_build(preset, cls, low, high):
    model, tok = build_model(preset)
    assert type(model) is cls
    trainable, total = count_parameters(model)
    assert low < total < high and trainable == total
    assert model.config.vocab_size == len(tok) == 98
    assert (model.config.pad_token_id, model.config.eos_token_id) == (tok.pad_token_id, tok.eos_token_id) == (0, 1)
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    logits = model(IDS).logits
    assert logits.shape == (2, 6, 98) and torch.isfinite(logits).all()


def test_nano_tiny_shape_and_count():
    model, _ = build_model("nano-tiny")
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.intermediate_size) == (64, 2, 4, 2, 16, 256)
    # embeddings (tied) + per layer: q, k, v, o, gate/up/down, 2 RMSNorms, q/k norms; + final norm
    per_layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 256 + 2 * 64 + 2 * 16
    assert count_parameters(model)[1] == 98 * 64 + 2 * per_layer + 64 == 129536


def test_nano_moe_experts():
    model, _ = build_model("nano-moe")
    assert model.config.num_experts == 8 and model.config.num_experts_per_tok == 2
    assert model.config.decoder_sparse_step == 1


def test_build_is_seeded():
    a, _ = build_model("nano-tiny", seed=1)
    b, _ = build_model("nano-tiny", seed=1)
    c, _ = build_model("nano-tiny", seed=2)
    assert torch.equal(a(IDS).logits, b(IDS).logits)
    assert not torch.allclose(a(IDS).logits, c(IDS).logits)


def test_unknown_preset_lists_presets():
    with pytest.raises(ValueError) as error:
        build_model("nano-huge")
    message = str(error.value)
    assert "nano-huge" in message and all(name in message for name in PRESETS)
    with pytest.raises(ValueError, match="nano-huge"):
        get_preset("nano-huge")


def test_hub_preset_is_not_built():
    with pytest.raises(ValueError, match="load_pretrained"):
        build_model("qwen3-1.7b")
    assert get_preset("qwen3-1.7b").hub_id == "Qwen/Qwen3-1.7B-Base"


def test_qwen3_1_7b_random_shape():
    values = get_preset("qwen3-1.7b-random").config
    config = Qwen3Config(**values)
    assert config.num_hidden_layers == 28
    assert config.hidden_size == 2048
    assert config.vocab_size == 151936
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (16, 8, 128)
    assert config.intermediate_size == 6144
    assert config.tie_word_embeddings is True
    # the shape gives Qwen3-1.7B's 1.72B parameters; counted on the meta device, which allocates nothing
    with torch.device("meta"):
        model, _ = build_model("qwen3-1.7b-random")
    assert count_parameters(model)[1] == 1_720_574_976


def test_lora_only_adapter_trains_and_starts_as_base():
    base, _ = build_model("nano-tiny", seed=3)
    reference = base(IDS).logits.detach().clone()
    model = add_lora(base, rank=4, alpha=8.0)
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    # every target module of every layer got A and B: 2 layers x 7 targets x 2 matrices
    assert len(trainable) == 2 * len(LORA_TARGETS) * 2
    n_trainable, total = count_parameters(model)
    # rank 4: A is r x in, B is out x r, per layer: q(64->64) k,v(64->32) o(64->64) gate,up(64->256) down(256->64)
    per_layer = 4 * ((64 + 64) + 2 * (64 + 32) + (64 + 64) + 2 * (64 + 256) + (256 + 64))
    assert n_trainable == 2 * per_layer
    assert total == 129536 + n_trainable
    assert all(torch.count_nonzero(p) == 0 for name, p in model.named_parameters() if "lora_B" in name)
    assert torch.equal(model(input_ids=IDS).logits, reference)
    # and it does train: one step on the adapter changes the output
    loss = model(input_ids=IDS, labels=IDS).loss
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p -= 0.1 * p.grad
    assert not torch.allclose(model(input_ids=IDS).logits, reference)


def test_lora_bad_target_and_rank():
    model, _ = build_model("nano-tiny")
    with pytest.raises(ValueError) as error:
        add_lora(model, targets=("q_proj", "qkv_proj"))
    assert "qkv_proj" in str(error.value) and "q_proj" in str(error.value)
    with pytest.raises(ValueError, match="lora_rank=0"):
        add_lora(model, rank=0)


def test_load_pretrained_round_trip(tmp_path):
    model, tok = build_model("nano-tiny", seed=5)
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    loaded, loaded_tok = load_pretrained(str(tmp_path / "ckpt"))
    assert type(loaded) is Qwen3ForCausalLM
    assert torch.equal(loaded(IDS).logits, model(IDS).logits)
    assert loaded_tok("47+385=")["input_ids"] == tok("47+385=")["input_ids"]
    assert (loaded_tok.padding_side, loaded_tok.pad_token_id, loaded_tok.eos_token_id) == ("left", 0, 1)


def test_load_pretrained_moe_round_trip(tmp_path):
    model, tok = build_model("nano-moe", seed=5)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, _ = load_pretrained(str(tmp_path))
    assert type(loaded) is Qwen3MoeForCausalLM
    assert torch.allclose(loaded(IDS).logits, model(IDS).logits, atol=1e-6)


def test_load_pretrained_sets_a_pad_token(tmp_path):
    model, _ = build_model("nano-tiny")
    model.save_pretrained(tmp_path)
    tok = char_tokenizer()
    tok.pad_token = None
    tok.padding_side = "right"
    tok.save_pretrained(tmp_path)
    _, loaded = load_pretrained(str(tmp_path))
    assert loaded.pad_token == loaded.eos_token == "<eos>"
    assert loaded.padding_side == "left"


def test_missing_local_directory(tmp_path):
    missing = tmp_path / "no-such-checkpoint"
    with pytest.raises(FileNotFoundError) as error:
        load_pretrained(str(missing))
    assert str(missing) in str(error.value)


def test_directory_without_weights(tmp_path):
    model, tok = build_model("nano-tiny")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError) as error:
        load_pretrained(str(tmp_path))
    assert str(tmp_path) in str(error.value)


def _incomplete_checkpoint(path, missing):
    model, tok = build_model("nano-tiny")
    if missing != "model":
        model.save_pretrained(path)
    if missing != "tokenizer":
        tok.save_pretrained(path)


@pytest.mark.parametrize("missing", ["everything", "model", "tokenizer"])
def test_incomplete_directory_is_reported(tmp_path, missing):
    if missing != "everything":
        _incomplete_checkpoint(tmp_path, missing)
    with pytest.raises(FileNotFoundError) as error:
        model, tok = load_pretrained(str(tmp_path))
        assert tok("47+385=")["input_ids"], "the loaded tokenizer encodes nothing"
    assert str(tmp_path) in str(error.value)


@pytest.fixture
def empty_hub(tmp_path, monkeypatch):
    """An offline hub with an empty cache (huggingface_hub reads its cache path at import, so patch it too)."""
    import huggingface_hub.constants as constants

    home = tmp_path / "hf-home"
    home.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)  # so "Qwen/..." is not a relative directory by accident
    return home


def test_hub_id_not_in_cache_says_where_and_how(empty_hub):
    with pytest.raises(FileNotFoundError) as error:
        load_pretrained("Qwen/Qwen3-1.7B-Base")
    message = str(error.value)
    assert "Qwen/Qwen3-1.7B-Base" in message
    assert str(empty_hub) in message  # where it looked
    assert "local directory" in message
    assert "download" in message and "save_pretrained" in message  # how to get the weights
    assert not any(empty_hub.iterdir())  # nothing was fetched or written


def test_hub_message_names_a_cli_that_is_installed(empty_hub):
    with pytest.raises(FileNotFoundError) as error:
        load_pretrained("Qwen/Qwen3-1.7B-Base")
    command = str(error.value).split("`")[1].split()[0]
    assert shutil.which(command) is not None or command == "hf", command
