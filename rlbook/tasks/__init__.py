"""Synthetic tasks: deterministic generators, prompts, warm-start traces and rewards."""
from __future__ import annotations

from .arithmetic import ArithmeticTask
from .base import Problem, Score, Task
from .knights_knaves import KnightsKnavesTask

__all__ = ["ArithmeticTask", "KnightsKnavesTask", "Problem", "Score", "Task", "TASKS", "make_task"]

TASKS = {"arithmetic": ArithmeticTask, "knights_knaves": KnightsKnavesTask}


def make_task(name: str, **params) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    try:
        return TASKS[name](**params)
    except TypeError as error:
        raise ValueError(f"bad parameters {params} for task {name!r}: {error}") from None
