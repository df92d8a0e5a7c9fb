"""A run's checkpoint as tensors and JSON, never a pickle: `state.safetensors`.

A checkpoint is a tree of dicts, lists, tuples, numbers, strings and tensors (the trainable weights, AdamW's state,
the stale queue's batches as dicts of their fields, the random stream). `write` stores its tensors in a safetensors
file and the tree around them, as JSON with each tensor named by its key, in the same file's metadata ("outline"):
one file, written whole or not at all. Reading it runs no code from the file. A run made before this format holds
`state.pt`, which is read with `torch.load(weights_only=True)` only: it may hold tensors and containers, and anything
else (a pickled object, a payload) is refused, never run.

Tensors are read onto the CPU; those that were saved from an accelerator go to the `device` asked for, so a run made
on a GPU opens on a CPU and resumes on a GPU.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from .storage import UNTOUCHED, CorruptRunError, write_atomic_with

STATE, OLD_STATE = "state.safetensors", "state.pt"
FORMAT = "rlbook-checkpoint-1"
KEYS = {"update", "model", "optimizer", "queue", "generator"}  # what a training checkpoint holds
TERMINAL_CODES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # torch styles parts of its messages (bold) for a terminal


def outline(value, tensors: dict):
    """value as JSON, each tensor moved (a CPU copy) into `tensors` and replaced by {"tensor": key, "device": type}.
    Every container is tagged ({"dict": ...}, {"pairs": ...} for non-text keys, {"list": ...}, {"tuple": ...})."""
    import torch

    if isinstance(value, torch.Tensor):
        key = str(len(tensors))
        tensors[key] = value.detach().to("cpu", copy=True).contiguous()
        return {"tensor": key, "device": value.device.type}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"dict": {k: outline(v, tensors) for k, v in value.items()}}
        return {"pairs": [[outline(k, tensors), outline(v, tensors)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [outline(v, tensors) for v in value]}
    if value is None or type(value) in (bool, int, float, str):
        return value
    raise TypeError(f"a checkpoint holds tensors, containers, numbers and text, not {type(value).__name__}")


def rebuild(tree, tensors: dict, device):
    """The value `outline` wrote, its tensors from `tensors` (accelerator-saved ones moved to `device`)."""
    if not isinstance(tree, dict):
        return tree
    if "tensor" in tree:
        tensor = tensors[tree["tensor"]]
        return tensor.to(device) if device is not None and tree["device"] != "cpu" else tensor
    (tag, body), = tree.items()
    if tag == "dict":
        return {k: rebuild(v, tensors, device) for k, v in body.items()}
    if tag == "pairs":
        return {rebuild(k, tensors, device): rebuild(v, tensors, device) for k, v in body}
    if tag in ("list", "tuple"):
        items = [rebuild(v, tensors, device) for v in body]
        return items if tag == "list" else tuple(items)
    raise ValueError(f"not a checkpoint outline node: {sorted(tree)}")


def write(directory: Path, state: dict) -> None:
    """Write `state` as state.safetensors, whole or not at all; a state.pt of older code is removed after."""
    from safetensors.torch import save_file

    tensors: dict = {}
    metadata = {"format": FORMAT, "outline": json.dumps(outline(state, tensors))}
    write_atomic_with(directory / STATE, lambda f: save_file(tensors, f.name, metadata=metadata))
    (directory / OLD_STATE).unlink(missing_ok=True)


def location(directory: Path) -> Path | None:
    """The run's checkpoint file (state.safetensors, else an older run's state.pt), or None."""
    return next((directory / name for name in (STATE, OLD_STATE) if (directory / name).exists()), None)


def load(directory: Path, device=None) -> dict | None:
    """The checkpoint's tree as written (None when there is none); unreadable: CorruptRunError naming the file."""
    path = location(directory)
    if path is None:
        return None
    try:
        return _load_safetensors(path, device) if path.name == STATE else _load_old(path)
    except CorruptRunError:
        raise
    except Exception as error:  # safetensors, json and torch raise many kinds for a damaged file
        first_line = str(error).splitlines()[0] if str(error) else ""
        reason = TERMINAL_CODES.sub("", first_line).strip() or type(error).__name__
        raise CorruptRunError(f"{path}: not a readable checkpoint ({reason}); it was not unpickled; "
                              f"{UNTOUCHED}") from None


def _load_safetensors(path: Path, device):
    from safetensors import safe_open

    with safe_open(str(path), framework="pt", device="cpu") as f:
        metadata = f.metadata() or {}
        if metadata.get("format") != FORMAT:
            raise CorruptRunError(f"{path}: not an rlbook checkpoint (format {metadata.get('format')!r}, this code "
                                  f"reads {FORMAT}); {UNTOUCHED}")
        tensors = {key: f.get_tensor(key) for key in f.keys()}
    return rebuild(json.loads(metadata["outline"]), tensors, device)


def _load_old(path: Path):
    import torch

    return torch.load(path, weights_only=True, map_location="cpu")  # never unpickles an object


def read(directory: Path, device=None) -> dict | None:
    """A training checkpoint (load, checked to hold KEYS), or None when the run has none."""
    state = load(directory, device)
    if state is not None and (not isinstance(state, dict) or not KEYS <= state.keys()):
        raise CorruptRunError(f"{location(directory)}: not a training checkpoint (needs keys {sorted(KEYS)}); "
                              f"{UNTOUCHED}")
    return state


def read_weights(directory: Path) -> dict:
    """The trainable weights a checkpoint holds ({name: tensor}, on the CPU), for reading a finished run's policy."""
    state = load(directory)
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise CorruptRunError(f"{location(directory) or directory / STATE}: holds no weights ('model'); {UNTOUCHED}")
    return state["model"]
