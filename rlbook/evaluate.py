"""Accuracy on a fixed evaluation set, greedy and sampled; the fixed sets; a validation split disjoint from them.

The evaluation set is only ever used to report results. Anything that selects (the warm start's early stopping)
looks at the validation split instead: problems from another seed with every evaluation prompt removed.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .rollout import decode, sample
from .seeds import EVALUATION_SET, VALIDATION_SET, stream_seed
from .tasks import Problem, make_task

EVAL_SEED, VALIDATION_SEED = EVALUATION_SET, VALIDATION_SET  # fixed sets, apart from every stream (rlbook.seeds)
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


def validation_problems(task_name: str, task_params: dict, n: int) -> list[Problem]:
    """n problems for model selection, none of whose prompts is in the evaluation set."""
    held_out = {p["prompt"] for p in evaluation_problems(task_name, task_params, max_eval_size(task_name, task_params))}
    task, problems, seed = make_task(task_name, **task_params), [], VALIDATION_SEED
    while len(problems) < n:
        problems += [p for p in task.generate(2 * n, seed=seed) if p["prompt"] not in held_out]
        seed += 1
    return problems[:n]


def max_eval_size(task_name: str, task_params: dict) -> int:
    """Size of the fixed evaluation set of these task parameters (500 when none is shipped)."""
    sizes = [size for name, params, size in EVAL_SETS.values() if name == task_name and params == task_params]
    return max(sizes, default=500)


def sampled_eval_seed(run_seed: int, update: int) -> int:
    """A different sampling seed for every run seed and evaluation, so sampled accuracies are independent draws."""
    return stream_seed("evaluation_sampling", run_seed, update)


def completion_budget(task, tokenizer, n: int = 256) -> int:
    """max_new_tokens: 25% more than the longest trace (in tokens) of n problems, plus EOS."""
    traces = [task.trace(p) for p in task.generate(n, seed=EVAL_SEED + 1)]
    longest = max(len(ids) for ids in tokenizer(traces, add_special_tokens=False)["input_ids"])
    return int(1.25 * longest) + 2


@torch.no_grad()
def accuracy(model, tokenizer, task, problems: list[Problem], max_new_tokens: int, temperature: float = 0.0,
             seed: int = EVAL_SEED, samples: int = 1, batch_size: int = 256) -> float:
    """Fraction of problems solved: greedy with temperature 0, else the mean over `samples` samples per problem
    (seeded, reproducible)."""
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    was_training = model.training
    model.eval()
    correct = 0
    problems = [p for p in problems for _ in range(samples if temperature > 0 else 1)]
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        _, _, ids, mask, _ = sample(model, tokenizer, [p["prompt"] for p in chunk], max_new_tokens, temperature,
                                    generator)
        correct += sum(task.score(p, c).correct for p, c in zip(chunk, decode(tokenizer, ids, mask)))
    model.train(was_training)
    return correct / max(len(problems), 1)


def evaluation_row(model, tokenizer, task, problems: list[Problem], max_new_tokens: int, temperature: float,
                   run_seed: int, samples: int, after_update: int, batch_size: int = 0) -> dict:
    """The metrics row's evaluation after `after_update` updates: greedy accuracy, and sampled accuracy at the run's
    temperature (`samples` per problem, a fresh seed per evaluation), batch_size sequences at a time (0: accuracy's
    default; the run's rollout_batch_size, its KV cache bound)."""
    at_once = {"batch_size": batch_size} if batch_size else {}
    return {"eval_greedy_acc": accuracy(model, tokenizer, task, problems, max_new_tokens, **at_once),
            "eval_sampled_acc": accuracy(model, tokenizer, task, problems, max_new_tokens, temperature,
                                         seed=sampled_eval_seed(run_seed, after_update), samples=samples, **at_once)}

