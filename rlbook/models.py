"""Named model presets and `load_policy`: nano Qwen3 models built from a config, or real checkpoints.

Every preset goes through the same code path: a `Qwen3ForCausalLM` (or `Qwen3MoeForCausalLM`) plus a tokenizer,
optionally wrapped with a LoRA adapter (peft) on all linear layers. Real checkpoints load with the ordinary
`from_pretrained`; nothing is ever downloaded at run time.
"""
from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (AutoConfig, AutoModelForCausalLM, AutoTokenizer, OlmoeConfig, OlmoeForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

from transformers.utils import logging as hf_logging

from .tokenizer import char_tokenizer

CHECKPOINT_FILES = {"config": ["config.json"], "weights": ["*.safetensors", "pytorch_model*.bin"],
                    "tokenizer": ["tokenizer.json", "tokenizer_config.json"]}
LARGE_HIDDEN = 1024  # models at least this wide are built and loaded in bfloat16
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Preset:
    description: str
    config: dict = field(default_factory=dict)  # config values of a model built from scratch (a checkpoint: its shape)
    hub_id: str | None = None  # set for real checkpoints loaded with from_pretrained
    moe: bool = False


def _nano(hidden: int, layers: int, heads: int, kv_heads: int, mlp: int, **extra) -> dict:
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                head_dim=hidden // heads, intermediate_size=mlp, tie_word_embeddings=True, max_position_embeddings=512,
                rms_norm_eps=1e-6, rope_theta=10000.0, **extra)


# Qwen3-1.7B's shape (Qwen3 Technical Report, arXiv 2505.09388; public model card values).
QWEN3_1_7B = dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  intermediate_size=6144, vocab_size=151936, tie_word_embeddings=True, rms_norm_eps=1e-6,
                  rope_theta=1_000_000.0, max_position_embeddings=32768)
# OLMoE-1B-7B's shape (Muennighoff et al., arXiv 2409.02060; allenai/OLMoE-1B-7B-0924's config): 16 layers of 64
# experts, top-8, 6.9B parameters of which 1.3B are active per token. Chapter 6's GPU profiles (why this model:
# book/calibration_06_router_replay.md).
OLMOE_1B_7B = dict(model_type="olmoe", hidden_size=2048, num_hidden_layers=16, num_attention_heads=16,
                   num_key_value_heads=16, intermediate_size=1024, num_experts=64, num_experts_per_tok=8,
                   norm_topk_prob=False, vocab_size=50304, tie_word_embeddings=False, rms_norm_eps=1e-5,
                   max_position_embeddings=4096)
ARCHITECTURES = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM),
                 "olmoe": (OlmoeConfig, OlmoeForCausalLM)}  # a preset's model_type (default: qwen3, or qwen3_moe)

PRESETS: dict[str, Preset] = {
    "nano-tiny": Preset("0.1M-parameter Qwen3 for the smoke profile (CI, laptops)", _nano(64, 2, 4, 2, 256)),
    "nano-small": Preset("1M-parameter Qwen3 (hidden 128, 4 layers): the CPU-standard model", _nano(128, 4, 4, 2, 512)),
    "nano-base": Preset("25M-parameter Qwen3 (hidden 512, 8 layers) for the standard profile on a GPU",
                        _nano(512, 8, 8, 4, 1536)),
    "nano-moe": Preset("1.8M-parameter Qwen3-MoE (8 experts, top-2) for the router-replay chapter",
                       _nano(128, 4, 4, 2, 512, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=128,
                             decoder_sparse_step=1, norm_topk_prob=True), moe=True),
    "nano-moe-tiny": Preset("0.13M-parameter Qwen3-MoE (hidden 64, 2 layers, 4 experts, top-2): nano-moe for the smoke "
                            "profile", _nano(64, 2, 4, 2, 256, num_experts=4, num_experts_per_tok=2,
                                             moe_intermediate_size=64, decoder_sparse_step=1, norm_topk_prob=True),
                            moe=True),
    "qwen3-1.7b": Preset("Qwen/Qwen3-1.7B-Base from a local path or the Hugging Face cache (paper profile)",
                         QWEN3_1_7B, hub_id="Qwen/Qwen3-1.7B-Base"),
    "qwen3-1.7b-random": Preset("Qwen3-1.7B's shape with random weights, for memory and speed measurements",
                                QWEN3_1_7B),
    "olmoe-1b-7b": Preset("allenai/OLMoE-1B-7B-0924 (a mixture of experts) from a local path or the Hugging Face "
                          "cache (chapter 6's GPU profiles)", OLMOE_1B_7B, hub_id="allenai/OLMoE-1B-7B-0924",
                          moe=True),
    "olmoe-1b-7b-random": Preset("OLMoE-1B-7B's shape with random weights, for tests and measurements", OLMOE_1B_7B,
                                 moe=True),
}


def get_preset(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
    return PRESETS[name]


def build_model(preset: str, tokenizer=None, seed: int = 0, **overrides) -> tuple[torch.nn.Module, object]:
    """A model with random weights from a preset's config, in `checkpoint_dtype` of its width (nano presets get the
    character tokenizer); `overrides` change config values (e.g. num_hidden_layers, for a shallower model)."""
    spec = get_preset(preset)
    if spec.hub_id is not None:
        raise ValueError(f"preset {preset!r} is a pretrained checkpoint; load it with load_pretrained")
    tokenizer = tokenizer if tokenizer is not None else char_tokenizer()
    values = {**spec.config, **overrides}
    values.setdefault("vocab_size", len(tokenizer))
    values.update(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(checkpoint_dtype(values["hidden_size"]))  # not built in float32 first (1.7B: 6.8 GB)
    config_class, model_class = ARCHITECTURES[values.pop("model_type", "qwen3_moe" if spec.moe else "qwen3")]
    try:
        model = model_class(config_class(**values))
    finally:
        torch.set_default_dtype(default)
    return model, tokenizer


def checkpoint_dtype(hidden_size: int) -> torch.dtype:
    """bfloat16 for a real model (hidden size >= LARGE_HIDDEN: Qwen3-0.6B and up), float32 for the nano models."""
    return torch.bfloat16 if hidden_size >= LARGE_HIDDEN else torch.float32


def load_pretrained(path_or_id: str, dtype: torch.dtype | None = None):
    """Load a checkpoint (a local directory, or a hub id already in the local cache) with from_pretrained, in
    `dtype` or, by default, in `checkpoint_dtype` of its hidden size (a 1.7B model never loads in float32)."""
    local = Path(path_or_id).expanduser()
    if local.is_dir():
        missing = [what for what, patterns in CHECKPOINT_FILES.items()
                   if not any(next(local.glob(p), None) for p in patterns)]
        if missing:
            raise FileNotFoundError(f"checkpoint directory {local.resolve()} is incomplete: no {', '.join(missing)} "
                                    f"(expected files like {[CHECKPOINT_FILES[m][0] for m in missing]})")
    elif local.is_absolute() or path_or_id.startswith(".") or local.exists() or path_or_id.count("/") != 1:
        raise FileNotFoundError(f"checkpoint {path_or_id!r} not found: no directory at {local.resolve()}")
    hf_logging.disable_progress_bar()  # no "Loading weights" bar per load in notebooks
    try:
        tokenizer = AutoTokenizer.from_pretrained(path_or_id, local_files_only=True)
        if dtype is None:
            dtype = checkpoint_dtype(AutoConfig.from_pretrained(path_or_id, local_files_only=True).hidden_size)
        model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as error:
        from huggingface_hub.constants import HF_HUB_CACHE

        raise FileNotFoundError(
            f"could not load {path_or_id!r} offline: it is not a local directory and not in the Hugging Face cache "
            f"({HF_HUB_CACHE}). Download it on a machine with internet (`hf download {path_or_id}`) and copy the "
            f"cache here, or pass --init <directory saved with save_pretrained>. ({error})"
        ) from None
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def routers(model) -> list[torch.nn.Module]:
    """The top-k routers of an MoE model, in layer order (empty for a dense model)."""
    return [m for m in model.modules() if type(m).__name__.endswith("TopKRouter")]


def is_moe(model) -> bool:
    return bool(routers(model))


def add_lora(model, rank: int = 16, alpha: float = 32.0, targets: tuple[str, ...] = LORA_TARGETS):
    """Wrap a model with a LoRA adapter; only the adapter trains (dropout 0 so sampling and training agree). A mixture
    of experts keeps its experts as they are (fused 3-D weights, which LoRA does not adapt): its other linear layers
    take the adapter and its routers train in full, so that routing keeps learning (chapter 6, router replay)."""
    if rank < 1:
        raise ValueError(f"lora_rank={rank}: must be >= 1")
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    moe = routers(model)
    if moe:
        targets = tuple(t for t in targets if t in present)
    missing = [t for t in targets if t not in present]
    if missing:
        raise ValueError(f"LoRA targets {missing} are not modules of this model; it has {sorted(present)}")
    from peft import LoraConfig, get_peft_model  # here, not at the top: importing peft takes seconds, and a page
    #                                               that replays stored runs never builds an adapter

    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets), bias="none")
    model = get_peft_model(model, config)
    for router in moe:
        router.weight.requires_grad_(True)
    return model


def set_cpu_threads() -> None:
    """On CPU, use $RLBOOK_THREADS threads (default 1): nano models are so small that thread synchronisation costs
    more than it saves (measured: 20 ms vs 470 ms per warm-start step of nano-tiny with the cores shared)."""
    if not torch.cuda.is_available():
        torch.set_num_threads(int(os.environ.get("RLBOOK_THREADS", "1")))


def count_parameters(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def check_checkpoint(name: str, checkpoint: str) -> None:
    """A checkpoint directory with a config, weights and a tokenizer that can be read (config.json a model config,
    every safetensors header and JSON file whole), or a hub id in the local Hugging Face cache; a ValueError naming the
    setting `name` otherwise."""
    from huggingface_hub import try_to_load_from_cache

    if "\x00" in checkpoint:
        raise ValueError(f"{name}={checkpoint!r}: a path cannot hold a NUL character")
    local = Path(checkpoint).expanduser()
    if local.is_dir():
        missing = [what for what, patterns in CHECKPOINT_FILES.items() if not any(any(local.glob(p)) for p in patterns)]
        if missing:
            raise ValueError(f"{name}={checkpoint!r}: the checkpoint directory {local.resolve()} has no "
                             f"{', '.join(missing)} (save it with save_pretrained)")
        unreadable = unreadable_file(local)
        if unreadable:
            raise ValueError(f"{name}={checkpoint!r}: {unreadable} (save the checkpoint again with save_pretrained)")
        return
    try:
        cached = isinstance(try_to_load_from_cache(checkpoint, "config.json"), str)
    except ValueError:  # not even a valid hub id
        cached = False
    if not (checkpoint.count("/") == 1 and not checkpoint.startswith((".", "/", "~")) and cached):
        raise ValueError(f"{name}={checkpoint!r}: no checkpoint directory at {local.resolve()} and no such model in "
                         "the Hugging Face cache; use init=warm, init=scratch or a directory saved with "
                         "save_pretrained")


def unreadable_file(directory: Path) -> str | None:
    """What in a checkpoint directory cannot be read without loading it (None: nothing): config.json that is no model
    config, a safetensors file whose header does not parse, a PyTorch weights file that is no zip archive, a JSON file
    of the tokenizer that does not parse."""
    from safetensors import safe_open

    try:
        AutoConfig.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"{directory / 'config.json'} is not a model config ({first_line(error)})"
    for path in sorted(directory.glob("*.safetensors")):
        try:
            with safe_open(path, "pt") as weights:
                weights.keys()
        except Exception as error:  # safetensors raises its own SafetensorError (and OSError, ValueError)
            return f"{path} is not a safetensors file ({first_line(error)})"
    for path in sorted(directory.glob("pytorch_model*.bin")):
        if not zipfile.is_zipfile(path):
            return f"{path} is not a PyTorch weights file (not a zip archive)"
    for path in sorted(directory.glob("tokenizer*.json")):
        try:
            json.loads(path.read_bytes())
        except ValueError as error:
            return f"{path} is not JSON ({first_line(error)})"
    return None


def first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def model_values(preset: str, init: str) -> dict | None:
    """The config values of the model a run loads, known before it is loaded: a checkpoint directory's config.json
    (init), else the preset's own (a nano preset with the character tokenizer's vocabulary; a pretrained preset's
    published shape); None when there is none to read."""
    spec = get_preset(preset)
    if init in ("warm", "scratch"):
        return ({"vocab_size": len(char_tokenizer()), **spec.config,
                 "model_type": spec.config.get("model_type", "qwen3_moe" if spec.moe else "qwen3")}
                if spec.config else None)
    try:
        values = json.loads((Path(init).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return values if isinstance(values, dict) else None


def architecture(preset: str, init: str) -> str:
    """What a run's model is, before it is loaded: 'qwen3' (a dense Qwen3), 'a mixture of experts', or what its
    config.json says it is ('unreadable' without one). A checkpoint directory (init) decides by its config.json, a
    preset by its definition."""
    if init in ("warm", "scratch"):
        return "a mixture of experts" if get_preset(preset).moe else "qwen3"
    values = model_values(preset, init)
    if values is None:
        return f"unreadable (no readable config.json in {init})"
    if any(values.get(key) for key in ("num_experts", "num_local_experts", "n_routed_experts")):
        return "a mixture of experts"
    return str(values.get("model_type", "of no model_type"))
