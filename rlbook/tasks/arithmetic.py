"""Arithmetic: a op b = ? for numbers of a chosen number of digits, with an optional short scratchpad.

Prompt `"47+385="`, completion `"432"` (or with the scratchpad `"385+7=392;392+40=432;432"`: one line per
digit of the first operand, then the answer after the last `;`). Reward as in M2PO's setup (arXiv 2510.01161):
1.0 correct, 0.1 when an answer can be extracted but is wrong, 0.0 otherwise.
"""
from __future__ import annotations

import random
import re

from .base import Problem, Score

OPERATIONS = {"+": lambda a, b: a + b, "*": lambda a, b: a * b}
ANSWER = re.compile(r"(?:^|;)\s*(-?\d+)\s*$")


class ArithmeticTask:
    name = "arithmetic"

    def __init__(self, digits: tuple[int, int] | int = (1, 3), ops: str = "+", scratchpad: bool = False):
        lo, hi = (digits, digits) if isinstance(digits, int) else tuple(digits)
        if not 1 <= lo <= hi <= 12:
            raise ValueError(f"digits={digits!r}: need 1 <= lo <= hi <= 12, e.g. 3 or (1, 3)")
        unknown = set(ops) - set(OPERATIONS)
        if not ops or unknown:
            raise ValueError(f"ops={ops!r}: use a string of operators from {sorted(OPERATIONS)}")
        self.digits, self.ops, self.scratchpad = (lo, hi), ops, scratchpad

    def _number(self, rng: random.Random) -> int:
        d = rng.randint(*self.digits)
        return rng.randint(0 if d == 1 else 10 ** (d - 1), 10**d - 1)

    def generate(self, n: int, seed: int) -> list[Problem]:
        if n < 0:
            raise ValueError(f"n={n}: the number of problems must be >= 0")
        rng = random.Random(seed)
        problems = []
        for _ in range(n):
            a, b, op = self._number(rng), self._number(rng), rng.choice(self.ops)
            problems.append({"prompt": f"{a}{op}{b}=", "answer": str(OPERATIONS[op](a, b)), "a": a, "b": b, "op": op})
        return problems

    def trace(self, problem: Problem) -> str:
        """The answer, or with the scratchpad one step per digit of a, then `;answer`.

        47+385 -> "385+7=392;392+40=432;432"     47*385 -> "7*385=2695;40*385=15400;18095"
        """
        if not self.scratchpad:
            return problem["answer"]
        a, b, op = problem["a"], problem["b"], problem["op"]
        parts = [int(d) * 10**p for p, d in enumerate(reversed(str(a))) if d != "0" or p == 0]
        steps, total = [], b
        for part in parts:
            if op == "+":
                steps.append(f"{total}+{part}={total + part}")
                total += part
            else:
                steps.append(f"{part}*{b}={part * b}")
        return ";".join(steps + [problem["answer"]])

    def score(self, problem: Problem, completion: str) -> Score:
        match = ANSWER.search(completion.strip())
        if match is None:
            return Score(0.0, False)
        correct = match.group(1) == problem["answer"]
        return Score(1.0 if correct else 0.1, correct)
