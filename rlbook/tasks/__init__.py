"""Synthetic tasks: deterministic generators, prompts, warm-start traces and rewards."""
from __future__ import annotations

import inspect

from .arithmetic import ArithmeticTask
from .base import Problem, Score, Task
from .knights_knaves import KnightsKnavesTask

__all__ = ["ArithmeticTask", "KnightsKnavesTask", "Problem", "Score", "Task", "TASKS", "check_task_params",
           "make_task"]

TASKS = {"arithmetic": ArithmeticTask, "knights_knaves": KnightsKnavesTask}


def make_task(name: str, **params) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {', '.join(TASKS)}")
    try:
        return TASKS[name](**params)
    except TypeError as error:
        raise ValueError(f"bad parameters {params} for task {name!r}: {error}") from None


def check_task_params(name: str, params: dict) -> None:
    """The task accepts params and makes and traces problems with them (any failure is the parameters' fault)."""
    try:
        made = make_task(name, **params)
        made.trace(made.generate(2, seed=0)[1])
    except Exception as error:  # the task's own message, whatever its type, named as a task_params error
        accepted = ", ".join(inspect.signature(TASKS[name]).parameters)
        raise ValueError(f"task_params={params!r} is not valid for task {name!r}: {error} (its parameters: "
                         f"{accepted})") from None
