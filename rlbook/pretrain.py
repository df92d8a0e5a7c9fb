"""Warm start: supervised training of a nano model on task traces, so the RL "base model" has headroom.

The model trains on fresh problems every step (prompt + trace + EOS, loss on the trace) and stops as soon as its
greedy accuracy on the validation split (never the evaluation set) reaches `target_accuracy` (accuracy jumps
quickly, so a step count would give a different base model for every small change). Checkpoints along the
trajectory are kept for chapter 5. The result is cached in the RunStore under `warmstart/`, saved with
`save_pretrained` and loaded back with `from_pretrained`, the same path real checkpoints take. Its settings are
WarmStartConfig (below).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch

from .checks import check_type, choose
from .evaluate import accuracy, completion_budget, validation_problems
from .models import build_model, set_cpu_threads
from .progress import progress_bar
from .seeds import stream_seed
from .storage import DEVICES, default_root, environment, reference_root, write_json
from .tasks import make_task
from .versions import WARM_START_VERSION

SCHEDULES = ("constant", "wsd")
FROM_RUN = ("preset", "task", "task_params", "device")  # a run's warm start: its preset, task and device


@dataclass
class WarmStartConfig:
    preset: str = "nano-small"
    task: str = "arithmetic"
    task_params: dict = field(default_factory=dict)
    seed: int = 0
    batch_size: int = 128
    lr: float = 1e-3
    schedule: str = "constant"  # wsd: warmup-stable-decay (linear warmup, constant, linear decay to 0)
    warmup_steps: int = 20
    decay_steps: int = 0  # wsd: the last decay_steps of max_steps anneal the learning rate
    target_accuracy: float | None = 0.3  # stop at this greedy accuracy on the validation split (None: run max_steps)
    max_steps: int = 3000
    eval_every: int = 25
    validation_size: int = 200  # validation problems (disjoint from the evaluation set) for early stopping
    checkpoint_every: int = 0  # keep a checkpoint every this many steps (0: only the final model)
    device: str = "cpu"  # where it trains (RunConfig.device): cpu or cuda

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}; choose one of: {', '.join(SCHEDULES)}")
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ValueError(f"target_accuracy={self.target_accuracy}: must be in (0, 1] or None")
        choose("device", self.device, list(DEVICES))
        if min(self.batch_size, self.max_steps, self.eval_every, self.validation_size) <= 0 or self.lr <= 0:
            raise ValueError("batch_size, max_steps, eval_every, validation_size and lr must be > 0")

    @classmethod
    def check_overrides(cls, overrides: dict) -> None:
        """Keys, types and values of a run's overrides of its warm start (RunConfig.warm_start; preset, task and
        task_params come from the run)."""
        valid = {f.name: f for f in fields(cls) if f.name not in FROM_RUN}
        unknown = sorted(set(overrides) - set(valid))
        if unknown:
            raise ValueError(f"warm_start keys {unknown} are not valid; valid keys: {', '.join(valid)}")
        for key, value in overrides.items():
            check_type(f"warm_start.{key}", value, valid[key].default, optional="None" in str(valid[key].type))
            if isinstance(value, (int, float)) and value < 0:
                raise ValueError(f"warm_start.{key}={value!r} must be >= 0")
        try:
            cls(**overrides)
        except ValueError as error:
            raise ValueError(f"warm_start={overrides!r}: {error}") from None

    def key(self) -> str:
        """Cache key: the preset, the task and a digest of every setting and of the warm-start code's version (the
        device only when it is not the CPU, so every warm start trained on a CPU keeps its key)."""
        settings = {k: v for k, v in asdict(self).items() if k != "device" or v != "cpu"}
        values = json.dumps({**settings, "warm_start_version": WARM_START_VERSION}, sort_keys=True)
        return f"{self.preset}-{self.task}-{hashlib.sha256(values.encode()).hexdigest()[:10]}"




def learning_rate(config: WarmStartConfig, step: int) -> float:
    """Warmup then constant; with wsd, a linear decay to zero over the last decay_steps (PMA, arXiv 2505.12082)."""
    warm = min(1.0, (step + 1) / max(config.warmup_steps, 1))
    if config.schedule == "wsd" and step >= config.max_steps - config.decay_steps:
        return config.lr * (config.max_steps - step) / max(config.decay_steps, 1)
    return config.lr * warm


def trace_batch(tokenizer, task, problems):
    """Left-padded prompt + trace + EOS, with a loss mask on the trace and EOS."""
    prompts = tokenizer([p["prompt"] for p in problems], add_special_tokens=False)["input_ids"]
    targets = tokenizer([task.trace(p) for p in problems], add_special_tokens=False)["input_ids"]
    sequences = [p + t + [tokenizer.eos_token_id] for p, t in zip(prompts, targets)]
    width = max(map(len, sequences))
    ids = torch.full((len(sequences), width), tokenizer.pad_token_id)
    attention, loss_mask = torch.zeros_like(ids), torch.zeros_like(ids, dtype=torch.float32)
    for row, (seq, prompt) in enumerate(zip(sequences, prompts)):
        ids[row, width - len(seq):] = torch.tensor(seq)
        attention[row, width - len(seq):] = 1
        loss_mask[row, width - len(seq) + len(prompt):] = 1
    return ids, attention, loss_mask


def sft_loss(model, ids, attention, loss_mask) -> torch.Tensor:
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2).float(), ids[:, 1:], reduction="none")
    return (nll * loss_mask[:, 1:]).sum() / loss_mask[:, 1:].sum()


def warm_start(config: WarmStartConfig, store=None, progress: bool = True) -> Path:
    """Path of the warm-started checkpoint for this config, training it once if it is not cached.

    The cache is `warmstart/` under the root of `store` (a RunStore; None: the default root). A warm start shipped in
    data/runs/warmstart (a real run of this code, recorded where it ran) is used as is.
    """
    reference = reference_root() / "warmstart" / config.key()
    if (reference / "meta.json").exists() and json.loads((reference / "meta.json").read_text()).get("complete"):
        return reference / "final"
    path = (default_root() if store is None else store.root) / "warmstart" / config.key()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{config.key()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits for the first instead of training it twice
        meta = path / "meta.json"
        if meta.exists() and json.loads(meta.read_text()).get("complete"):
            return path / "final"
        shutil.rmtree(path, ignore_errors=True)  # an interrupted warm start is short: it restarts from scratch
        path.mkdir(parents=True)
        write_json(path / "config.json", asdict(config))
        write_json(meta, {"complete": False, **environment(config.device)})
        _train(config, path, progress)
    return path / "final"


def _train(config: WarmStartConfig, path: Path, progress: bool) -> None:
    set_cpu_threads()
    task = make_task(config.task, **config.task_params)
    model, tokenizer = build_model(config.preset, seed=config.seed)
    device = torch.device(config.device)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    validation = validation_problems(config.task, config.task_params, config.validation_size)
    budget = completion_budget(task, tokenizer)
    start, rows, tokens = time.time(), [], 0
    bar = progress_bar(range(config.max_steps), progress, desc=f"warm start {config.preset} on {config.task}")
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(config, step)
        problems = task.generate(config.batch_size, seed=stream_seed("warm_start", config.seed, step))
        batch = trace_batch(tokenizer, task, problems)
        loss = sft_loss(model, *(t.to(device) for t in batch))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        tokens += int(batch[1].sum())
        row = {"step": step + 1, "loss": loss.item(), "lr": optimizer.param_groups[0]["lr"], "tokens": tokens}
        done = step + 1 == config.max_steps
        if (step + 1) % config.eval_every == 0 or done:
            row["val_greedy_acc"] = accuracy(model, tokenizer, task, validation, budget)
            bar.set_postfix(loss=f"{row['loss']:.3f}", val_acc=f"{row['val_greedy_acc']:.2f}")
            done = done or (config.target_accuracy is not None and row["val_greedy_acc"] >= config.target_accuracy)
        if config.checkpoint_every and (step + 1) % config.checkpoint_every == 0:
            save(model, tokenizer, path / "checkpoints" / f"step-{step + 1:06d}")
        rows.append(row)
        if done:
            break
    if config.target_accuracy is not None and rows[-1].get("val_greedy_acc", 0) < config.target_accuracy:
        raise RuntimeError(f"warm start did not reach accuracy {config.target_accuracy} in {config.max_steps} steps "
                           f"(last validation accuracy {rows[-1].get('val_greedy_acc')}); raise max_steps or lr")
    save(model, tokenizer, path / "final")
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_json(path / "meta.json", {"complete": True, "wall_time_s": round(time.time() - start, 1), "steps": len(rows),
                                    "final_val_greedy_acc": rows[-1].get("val_greedy_acc"),
                                    **environment(config.device)})


def save(model, tokenizer, directory: Path) -> None:
    """save_pretrained into a temporary sibling, then rename: a checkpoint is whole or absent."""
    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)
