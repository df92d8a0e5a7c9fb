"""Checkpoint merging (PMA, arXiv 2505.12082): M = sum_i w_i M_i over N checkpoints, oldest first.

Full checkpoints are merged with `merge_state_dicts` (streamed from disk one at a time when given paths), LoRA
adapters with `merge_lora_adapters` (averaging the weight deltas B @ A), and `save_merged` writes the result as an
ordinary checkpoint that `AutoModelForCausalLM.from_pretrained` loads.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Mapping, Sequence, Union

import torch
from safetensors.torch import load_file, save_file

StateDict = Mapping[str, torch.Tensor]
Checkpoint = Union[StateDict, str, os.PathLike]
METHODS = ("sma", "ema", "wma")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".index.json")  # not copied by save_merged
# peft adapter keys: `base_model.model.<module>.lora_A.weight` on disk, `...lora_A.<adapter name>.weight` in memory
_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<AB>[AB])(?:\.[^.]+)?\.weight$")


def sma_weights(n: int) -> list[float]:
    # PMA (arXiv 2505.12082) eq. SMA: w_i = 1 / N
    return [1.0 / n] * n


def wma_weights(n: int) -> list[float]:
    # PMA (arXiv 2505.12082) eq. WMA: w_i = i / sum_j j, i = 1..N, newer checkpoints weigh more
    total = n * (n + 1) / 2
    return [i / total for i in range(1, n + 1)]


def ema_weights(n: int, alpha: float) -> list[float]:
    # PMA (arXiv 2505.12082) eq. EMA: M^(1) = M_1, M^(i) = a M_i + (1 - a) M^(i-1), unrolled:
    # w_1 = (1 - a)^(N-1), w_i = a (1 - a)^(N-i) for i >= 2 (the weights sum to 1)
    return [(1 - alpha) ** (n - 1)] + [alpha * (1 - alpha) ** (n - i) for i in range(2, n + 1)]


def merge_weights(method: str, n: int, alpha: float = 0.2) -> list[float]:
    """The coefficient of each of `n` checkpoints (oldest first) under `method` ('sma' | 'ema' | 'wma')."""
    if method not in METHODS:
        raise ValueError(f"unknown merge method {method!r}; valid choices: {', '.join(METHODS)}")
    if n < 1:
        raise ValueError(f"nothing to merge: need at least one checkpoint, got {n}")
    if method == "ema":
        if not 0 < alpha <= 1:
            raise ValueError(f"ema alpha must be in (0, 1], got {alpha}")
        return ema_weights(n, alpha)
    return sma_weights(n) if method == "sma" else wma_weights(n)


def load_checkpoint(source: Checkpoint) -> dict[str, torch.Tensor]:
    """A state dict as is, or the tensors of a .safetensors file or of a `save_pretrained` directory (sharded too)."""
    if isinstance(source, Mapping):
        return dict(source)
    path = Path(source)
    if path.is_file():
        return load_file(path)
    if (path / "model.safetensors").is_file():
        return load_file(path / "model.safetensors")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return {k: v for shard in shards for k, v in load_file(path / shard).items()}
    raise ValueError(f"{path} is not a state dict, a .safetensors file, or a directory with model.safetensors")


def _check_same_layout(ref_shapes: Mapping[str, torch.Size], sd: StateDict, where: str) -> None:
    missing, extra = sorted(set(ref_shapes) - set(sd)), sorted(set(sd) - set(ref_shapes))
    if missing or extra:
        detail = f"missing key {missing[0]!r}" if missing else f"extra key {extra[0]!r}"
        raise ValueError(f"{where} has different keys from the first checkpoint: {detail} "
                         f"({len(missing)} missing, {len(extra)} extra)")
    for key, tensor in sd.items():
        if tensor.shape != ref_shapes[key]:
            raise ValueError(f"{where}: {key!r} has shape {tuple(tensor.shape)}, "
                             f"the first checkpoint has {tuple(ref_shapes[key])}")


def merge_state_dicts(state_dicts: Sequence[Checkpoint], method: str, alpha: float = 0.2) -> dict[str, torch.Tensor]:
    """Merge checkpoints (oldest first) as sum_i w_i M_i; each is a state dict or a checkpoint path.

    Paths are read one at a time into a running float32 sum, so memory stays at about two models for any N.
    Floating tensors come back in the first checkpoint's dtype; other tensors (int buffers) must be identical
    across checkpoints and are copied.
    """
    weights = merge_weights(method, len(state_dicts), alpha)
    shapes, dtypes, acc, fixed = {}, {}, {}, {}
    for i, (w, source) in enumerate(zip(weights, state_dicts)):
        sd = load_checkpoint(source)
        if i == 0:
            shapes, dtypes = {k: v.shape for k, v in sd.items()}, {k: v.dtype for k, v in sd.items()}
            acc = {k: torch.zeros(v.shape, dtype=torch.float32) for k, v in sd.items() if v.is_floating_point()}
            fixed = {k: v.clone() for k, v in sd.items() if not v.is_floating_point()}
        _check_same_layout(shapes, sd, f"checkpoint {i}")
        for key, tensor in sd.items():
            if key in acc:
                acc[key].add_(tensor.to(torch.float32), alpha=w)
            elif not torch.equal(tensor, fixed[key]):
                raise ValueError(f"checkpoint {i}: non-floating tensor {key!r} differs from the first checkpoint")
        del sd  # free this checkpoint before reading the next
    return {k: acc.pop(k).to(dtypes[k]) if k in acc else fixed[k] for k in shapes}  # pop: free as we cast


def lora_scaling(config: Mapping) -> float:
    """peft's LoRA scaling from an adapter_config.json: s = lora_alpha / r (lora_alpha / sqrt(r) with rsLoRA)."""
    unsupported = [k for k in ("use_dora", "fan_in_fan_out", "rank_pattern", "alpha_pattern", "modules_to_save")
                   if config.get(k)]
    if unsupported:
        raise ValueError(f"adapter options not supported by merge_lora_adapters: {', '.join(unsupported)}")
    r = config["r"]
    return config["lora_alpha"] / (math.sqrt(r) if config.get("use_rslora") else r)


def _load_adapter(source: Checkpoint, scaling: float | None) -> tuple[dict[str, torch.Tensor], float]:
    if isinstance(source, Mapping):
        if scaling is None:
            raise ValueError("adapters given as state dicts need an explicit scaling (lora_alpha / r)")
        return dict(source), scaling
    path = Path(source)
    if not (path / "adapter_model.safetensors").is_file():
        raise ValueError(f"{path} is not a peft adapter directory (no adapter_model.safetensors)")
    if scaling is None:
        scaling = lora_scaling(json.loads((path / "adapter_config.json").read_text()))
    return load_file(path / "adapter_model.safetensors"), scaling


def _lora_pairs(adapter: StateDict) -> dict[str, dict[str, torch.Tensor]]:
    """{base weight name: {'A': lora_A, 'B': lora_B}} from peft adapter keys."""
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in adapter.items():
        match = _LORA_KEY.match(key)
        if match is None:
            raise ValueError(f"adapter key {key!r} is not a lora_A/lora_B weight "
                             "(modules_to_save, biases and DoRA are not supported)")
        pairs.setdefault(match["module"] + ".weight", {})[match["AB"]] = tensor
    for target, ab in pairs.items():
        if len(ab) != 2:
            raise ValueError(f"adapter has lora_{next(iter(ab))} but not its partner for {target!r}")
    return pairs


def merge_lora_adapters(adapters: Sequence[Checkpoint], base_state_dict: Checkpoint, method: str,
                        alpha: float = 0.2, scaling: float | None = None) -> dict[str, torch.Tensor]:
    """Merge LoRA adapters (oldest first) into full weights: W = W0 + sum_i w_i s_i B_i @ A_i.

    `adapters` are peft adapter directories (s_i read from each adapter_config.json unless `scaling` is given) or
    adapter state dicts (peft key names; `scaling` required). `base_state_dict` (a state dict or checkpoint path)
    has the plain names of the un-wrapped model; the result has the same names and dtypes, and shares the base's
    tensors where no adapter applies.
    """
    weights = merge_weights(method, len(adapters), alpha)
    base = load_checkpoint(base_state_dict)
    acc: dict[str, torch.Tensor] = {}
    for i, (w, source) in enumerate(zip(weights, adapters)):
        adapter, s = _load_adapter(source, scaling)
        for target, ab in _lora_pairs(adapter).items():
            if target not in base:
                raise ValueError(f"adapter {i} changes {target!r}, which the base state dict does not have")
            # PMA: average the deltas B @ A, never A and B separately: mean(B) @ mean(A) != mean(B @ A)
            # (the product of averages adds cross terms B_i A_j).
            delta = ab["B"].to(torch.float32) @ ab["A"].to(torch.float32)
            if delta.shape != base[target].shape:
                raise ValueError(f"adapter {i}: B @ A for {target!r} has shape {tuple(delta.shape)}, "
                                 f"the base weight has {tuple(base[target].shape)}")
            if target not in acc:
                acc[target] = base[target].to(torch.float32, copy=True)
            acc[target].add_(delta, alpha=w * s)
    return {k: acc[k].to(v.dtype) if k in acc else v for k, v in base.items()}


def save_merged(state_dict: StateDict, like: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Write `state_dict` as a checkpoint `from_pretrained` loads, with the config and tokenizer files of `like`.

    Written to a temporary directory beside `out_dir` and renamed into place (replacing an older `out_dir`),
    so an interrupted save never leaves a half checkpoint.
    """
    like, out = Path(like), Path(out_dir)
    if not (like / "config.json").is_file():
        raise ValueError(f"{like} has no config.json: `like` must be a checkpoint directory from save_pretrained")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        for f in like.iterdir():  # config, generation config, tokenizer files; never the old weights
            if f.is_file() and not f.name.endswith(_WEIGHT_SUFFIXES):
                shutil.copy2(f, tmp / f.name)
        tensors, seen = {}, set()
        for key, tensor in state_dict.items():  # safetensors refuses tensors sharing memory (tied weights)
            ptr = tensor.untyped_storage().data_ptr()
            tensors[key] = tensor.clone() if ptr in seen else tensor.contiguous()
            seen.add(ptr)
        save_file(tensors, tmp / "model.safetensors", metadata={"format": "pt"})
        os.chmod(tmp, 0o755)
        old = tmp.with_name(tmp.name + "-old")
        if out.exists():
            os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
