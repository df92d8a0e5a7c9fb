"""Accuracy on a fixed evaluation set, greedy and sampled, plus the fixed sets themselves."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .rollout import decode, sample
from .tasks import Problem, make_task

EVAL_SEED = 12345  # training problems come from seeds >= 1e6, so they never share a stream with evaluation
EVAL_DIR = Path(__file__).resolve().parent.parent / "data" / "eval"
# The fixed sets in data/eval/, written by data/make_eval_sets.py: file name -> (task, params, size)
EVAL_SETS = {
    "arithmetic": ("arithmetic", {}, 500),
    "arithmetic_scratchpad": ("arithmetic", {"scratchpad": True, "ops": "+*"}, 500),
    "knights_knaves": ("knights_knaves", {}, 500),
}


def evaluation_problems(task_name: str, task_params: dict, n: int) -> list[Problem]:
    """The first n problems of the fixed set for these task parameters (from data/eval when one matches)."""
    for file, (name, params, size) in EVAL_SETS.items():
        path = EVAL_DIR / f"{file}.jsonl"
        if name == task_name and params == task_params and n <= size and path.exists():
            return [json.loads(line) for line in path.read_text().splitlines()[:n]]
    return make_task(task_name, **task_params).generate(n, seed=EVAL_SEED)


def completion_budget(task, tokenizer, n: int = 256) -> int:
    """max_new_tokens: 25% more than the longest trace (in tokens) of n problems, plus EOS."""
    traces = [task.trace(p) for p in task.generate(n, seed=EVAL_SEED + 1)]
    longest = max(len(ids) for ids in tokenizer(traces, add_special_tokens=False)["input_ids"])
    return int(1.25 * longest) + 2


@torch.no_grad()
def accuracy(model, tokenizer, task, problems: list[Problem], max_new_tokens: int, temperature: float = 0.0,
             seed: int = EVAL_SEED, batch_size: int = 256) -> float:
    """Fraction of problems solved: greedy with temperature 0, else one sample each (seeded, reproducible)."""
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    was_training = model.training
    model.eval()
    correct = 0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        _, _, ids, mask, _ = sample(model, tokenizer, [p["prompt"] for p in chunk], max_new_tokens, temperature,
                                    generator)
        correct += sum(task.score(p, c).correct for p, c in zip(chunk, decode(tokenizer, ids, mask)))
    model.train(was_training)
    return correct / max(len(problems), 1)
