"""What every export shares: the Export being written, its header, the settings all frameworks read alike, writers.

A header says, in this order: what the file is and which command checked it with the framework's own code; the
precision and the length unit; what the reader must set (the model, the data, the machine); what the framework lacks;
what it computes differently, with the two values on rlbook's toy batch (rlbook.export.toy_batch) where they differ.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..config import RunConfig

MODEL_PLACEHOLDER = "<your model: a Hugging Face id or path>"


class Refused(ValueError):
    """A run the framework cannot train as rlbook does, with the reason in one line."""


@dataclass
class Export:
    """A framework configuration being written: keys with values and sources, and the header's lines."""

    framework: str
    version: str
    checked_by: str  # what bench/check_exports.py runs on the file (the framework's own code)
    precision: str = ""  # the training and sampling precision the file asks for, against rlbook's
    values: dict = field(default_factory=dict)  # dotted key -> value
    sources: dict = field(default_factory=dict)  # dotted key -> the framework file the key lives in
    yours: list = field(default_factory=list)  # what the reader must set: model, data, machine
    lacks: list = field(default_factory=list)  # rlbook settings the framework has no flag for
    differs: list = field(default_factory=list)  # settings it has, computed differently

    def set(self, key: str, value, source: str) -> None:
        self.values[key], self.sources[key] = value, source


def integer_alpha(config: RunConfig, framework: str) -> int:
    """The LoRA alpha as the integer every framework's config takes (a non-integer alpha is refused)."""
    if not float(config.lora_alpha).is_integer():
        raise Refused(f"lora_alpha={config.lora_alpha}: {framework} takes an integer LoRA alpha")
    return int(config.lora_alpha)


def refuse_dpo(config: RunConfig, framework: str, offers: str) -> None:
    """Chapter 7's online DPO pairs the best and the worst of each group of G samples of a frozen generator refreshed
    every sync_every updates; a framework without that trainer refuses the run."""
    if config.objective == "dpo":
        raise Refused(f"objective='dpo' (online DPO on the best and worst of {config.group_size} samples per prompt, "
                      f"sync_every={config.sync_every}): {offers}")


def response_budget(config: RunConfig) -> int | None:
    """Completion tokens: the run's max_new_tokens, or the budget rlbook computes for a nano preset's task."""
    from ..evaluate import completion_budget
    from ..models import get_preset
    from ..tasks import make_task
    from ..tokenizer import char_tokenizer

    if config.max_new_tokens:
        return config.max_new_tokens
    if get_preset(config.preset).hub_id is not None:
        return None
    return completion_budget(make_task(config.task, **config.task_params), char_tokenizer())


def set_lengths(out: Export, config: RunConfig, key: str, source: str) -> None:
    """The completion length flag and the header's line on its unit: a nano preset counts characters (rlbook's
    character tokenizer), so the reader sets it again in their tokenizer's tokens."""
    from ..models import get_preset

    budget = response_budget(config)
    if get_preset(config.preset).hub_id is None:
        out.set(key, budget, source)
        out.yours.append(f"{key}: {budget} is in rlbook's character tokens (preset {config.preset}, one token per "
                         "character); set your task's longest answer in your tokenizer's tokens")
    elif budget:
        out.set(key, budget, source)
    else:
        out.yours.append(f"{key}: set it for your task (rlbook derives it from the task's traces)")


def model_name(config: RunConfig) -> str:
    from ..models import get_preset

    return get_preset(config.preset).hub_id or MODEL_PLACEHOLDER


def common_lacks(config: RunConfig, framework: str) -> list[str]:
    """Settings verl and AReaL lack alike: Lopti, router noise, a frozen generator (TRL's are its refusals)."""
    lines = []
    if config.lopti_eta:
        lines.append(f"lopti_eta={config.lopti_eta}: {framework} has no two-stage Lopti update (arXiv 2505.12929)")
    if config.router_noise:
        lines.append(f"router_noise={config.router_noise}: {framework} has no noise on the router logits (a dose of "
                     "mismatch for a small experiment; at scale the mismatch is the inference engine's own)")
    if config.sync_every != 1:
        lines.append(f"sync_every={config.sync_every}: {framework} has no frozen generator refreshed every k updates")
    return lines


def on_toy_batch(quantity: str, framework: str, theirs: float, ours: float) -> str:
    """A header's clause comparing the framework's value with rlbook's on the toy batch (rlbook.export.toy_batch)."""
    return (f"on rlbook's toy batch (rlbook.export.toy_batch) {framework}'s {quantity} is {theirs:.5f}, rlbook's "
            f"{ours:.5f}")


def header(config: RunConfig, out: Export, seeds: list[int]) -> list[str]:
    lines = [f"{out.framework} {out.version} configuration of rlbook run {config.experiment}/{config.name} "
             f"(seeds {', '.join(map(str, seeds))}), written by `python -m rlbook export`.",
             f"Checked with {out.framework}'s own code by `python bench/check_exports.py`: {out.checked_by}.",
             f"Each key's comment names the {out.framework} {out.version} file it lives in.",
             f"precision: rlbook trains in float32 and samples in {config.rollout_dtype}; {out.precision}",
             f"yours to set:" + ("" if out.yours else " nothing")]
    lines += [f"  - {line}" for line in out.yours]
    lines += [f"rlbook settings {out.framework} lacks:" + ("" if out.lacks else " none")]
    lines += [f"  - {line}" for line in out.lacks]
    lines += [f"computed differently in {out.framework}:" + ("" if out.differs else " nothing")]
    lines += [f"  - {line}" for line in out.differs]
    return lines


def yaml_scalar(value) -> str:
    """JSON, which is YAML, except floats with an exponent get a decimal point: YAML 1.1 readers (PyYAML) read 1e-06
    as a string, 1.0e-06 as a number."""
    if isinstance(value, float) and "e" in repr(value) and "." not in repr(value):
        mantissa, exponent = repr(value).split("e")
        return f"{mantissa}.0e{exponent}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {yaml_scalar(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(yaml_scalar(v) for v in value) + "]"
    return json.dumps(value)


def yaml_text(out: Export, head: list[str], nested: bool = True) -> str:
    """YAML (JSON scalars are YAML) with each key's source as a comment: nested by the dots of the keys, or flat."""
    tree: dict = {}
    for key in out.values:
        node, *path = tree, *(key.split(".") if nested else [key])
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = key
    lines = [f"# {line}" for line in head]

    def emit(node: dict, indent: int) -> None:
        for name, child in node.items():
            if isinstance(child, dict):
                lines.append(f"{'  ' * indent}{name}:")
                emit(child, indent + 1)
            else:
                lines.append(f"{'  ' * indent}{name}: {yaml_scalar(out.values[child])}  # {out.sources[child]}")

    emit(tree, 0)
    return "\n".join(lines) + "\n"
