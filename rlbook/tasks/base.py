"""What every task provides: problems from a seed, a prompt, a target trace for warm-start, and a reward."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

Problem = dict[str, Any]  # JSON-serialisable; every problem has at least "prompt" and "answer"


@dataclass(frozen=True)
class Score:
    reward: float
    correct: bool


class Task(Protocol):
    name: str

    def generate(self, n: int, seed: int) -> list[Problem]:
        """n problems, the same list for the same seed."""

    def trace(self, problem: Problem) -> str:
        """The completion a perfect model would write (supervised warm-start target), without EOS."""

    def score(self, problem: Problem, completion: str) -> Score:
        """Reward and correctness of one completion (the text after the prompt, EOS stripped)."""
