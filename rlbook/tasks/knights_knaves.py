"""Knights and Knaves logic puzzles (as in Logic-RL, arXiv 2505.12929).

On an island, knights always tell the truth and knaves always lie. Each of n people (2 to 7) says one
statement about who is what; the model must say who is a knight and who is a knave. Only puzzles with
exactly one consistent assignment are kept (found by brute force over all 2^n assignments).

A statement is a tree of depth <= 2, stored as nested JSON lists over person indices:
leaves ["knight", i] and ["knave", i]; operators ["not", t], ["and", a, b], ["or", a, b],
["->", a, b] (implies) and ["<->", a, b] (iff). Example: ["and", ["knight", 1], ["not", ["knave", 0]]].

Two prompt styles:

- "natural": English, like Logic-RL ("Zoey says: 'Oliver is a knight and Emma is a knave.'").
- "compact", for character-level models. Names are distinct capital letters (never T or F) and
  statements use this notation:

      B      B is a knight            B&C   and          (..)  groups a compound operand
      ~B     B is a knave (not B)     B|C   or
      ~x     not x                    B>C   implies
                                      B=C   iff

  "~" binds tightest and an operand that is itself an and/or/>/= is put in parentheses, so
  ~(B&C)|D is unambiguous. A prompt lists "name:statement" pairs and ends with "?":
  "A:~B&C B:A>C C:B=A ?" means A says "B is a knave and C is a knight", and so on.

Completions are <think>...</think><answer>...</answer>. The answer names every person's role:
"(1) Zoey is a knight\\n(2) Oliver is a knave" (natural) or "A:T B:F" (compact, T = knight).
With `scratchpad=True` (compact style) the think block checks the possible worlds one by one, all knights first,
until the consistent one: each world is written as its roles and one bit per person, 1 when what that person
says is true exactly when they are a knight. "A:B|~B B:~A ?" thinks "TT:10 TF:11" and answers "A:T B:F".
A small model cannot solve a puzzle in the forward pass of one answer token, but it can learn each bit; the bits
are the decisions RL can sharpen.
Reward (Logic-RL): format +1 if the structure is right, else -1; answer +2 if every role is right,
-1.5 if parsed but wrong, -2 if some person has no role or several. The total lies in -3..3.
"""
from __future__ import annotations

import random
import re

from rlbook.tasks.base import Problem, Score

MIN_PEOPLE, MAX_PEOPLE = 2, 7
STYLES = ("natural", "compact")
ROLES = ("knight", "knave")
BINARY = ("and", "or", "->", "<->")
LEAF_PROBABILITY = 1 / 3  # chance that a node with depth budget left is still a leaf

NATURAL_NAMES = (
    "Zoey", "Oliver", "Emma", "Liam", "Ava", "Noah", "Mia", "Ethan", "Sofia", "Lucas", "Chloe",
    "Mason", "Grace", "Logan", "Lily", "Jacob", "Harper", "Aiden", "Ella", "James", "Aria",
    "Henry", "Nora", "Owen", "Ruby", "Leo", "Hazel", "Jack", "Stella", "Samuel", "Violet",
    "David", "Aurora", "Isaac", "Alice", "Daniel", "Maya", "Caleb", "Luna", "Gabriel",
)
COMPACT_NAMES = "ABCDEGHIJKLMNOPQRSUVWXYZ"  # no T or F, which are the compact roles

# How each node is written, per style; "not knight"/"not knave" are a "not" over a leaf.
TEMPLATES = {
    "natural": {
        "knight": "{} is a knight", "knave": "{} is a knave",
        "not knight": "{} is not a knight", "not knave": "{} is not a knave",
        "not": "it is not the case that {}", "and": "{} and {}", "or": "{} or {}",
        "->": "if {} then {}", "<->": "{} if and only if {}",
    },
    "compact": {
        "knight": "{}", "knave": "~{}", "not knight": "~{}", "not knave": "~~{}",
        "not": "~{}", "and": "{}&{}", "or": "{}|{}", "->": "{}>{}", "<->": "{}={}",
    },
}
ANSWER_PATTERNS = {  # one role for the person named {}; group 1 is the role
    "natural": r"(?i)\b{}\s+is\s+an?\s+(knight|knave)\b",
    "compact": r"{}\s*:\s*([TF])",
}
FORMAT = re.compile(r"\s*<think>.*</think>\s*<answer>.*</answer>\s*", re.DOTALL)
TAGS = ("<think>", "</think>", "<answer>", "</answer>")
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def _truth(tree: list, knights: list[int], everything: int) -> int:
    """The worlds (bits of an int) in which `tree` holds; knights[i] = the worlds where i is a knight."""
    op, *args = tree
    if op == "knight":
        return knights[args[0]]
    if op == "knave":
        return everything ^ knights[args[0]]
    values = [_truth(arg, knights, everything) for arg in args]
    if op == "not":
        return everything ^ values[0]
    a, b = values
    return {"and": a & b, "or": a | b, "->": (everything ^ a) | b, "<->": everything ^ a ^ b}[op]


def solve(puzzle: Problem) -> list[list[bool]]:
    """Every assignment (a list of bools, True = knight, in name order) consistent with the statements.

    World w (0 .. 2^n - 1) makes person i a knight iff bit i of w is set; all worlds are checked at once
    by evaluating each statement to the set of worlds where it is true, stored as the bits of an int.
    """
    n = len(puzzle["statements"])
    worlds = range(2**n)
    everything = (1 << 2**n) - 1
    knights = [sum(1 << w for w in worlds if w >> i & 1) for i in range(n)]
    consistent = everything
    for i, statement in enumerate(puzzle["statements"]):
        consistent &= everything ^ knights[i] ^ _truth(statement, knights, everything)
    return [[bool(w >> i & 1) for i in range(n)] for w in worlds if consistent >> w & 1]


def _random_tree(rng: random.Random, n: int, depth: int) -> list:
    if depth == 0 or rng.random() < LEAF_PROBABILITY:
        return [rng.choice(ROLES), rng.randrange(n)]
    op = rng.choice(("not",) + BINARY)
    return [op] + [_random_tree(rng, n, depth - 1) for _ in range(1 if op == "not" else 2)]


def _render(tree: list, names: list[str], style: str) -> str:
    """A statement in the style's notation; operands that are binary operations get parentheses."""
    templates = TEMPLATES[style]
    op, *args = tree
    if op in ROLES:
        return templates[op].format(names[args[0]])
    if op == "not" and args[0][0] in ROLES:
        return templates["not " + args[0][0]].format(names[args[0][1]])
    parts = [_render(arg, names, style) for arg in args]
    parts = [f"({part})" if arg[0] in BINARY else part for arg, part in zip(args, parts)]
    return templates[op].format(*parts)


def _prompt(statements: list, names: list[str], style: str) -> str:
    said = [_render(statement, names, style) for statement in statements]
    if style == "compact":
        return " ".join(f"{name}:{text}" for name, text in zip(names, said)) + " ?"
    quotes = " ".join(f"{name} says: '{text[0].upper() + text[1:]}.'" for name, text in zip(names, said))
    return (
        "A very special island is inhabited only by knights and knaves. Knights always tell the truth, "
        f"and knaves always lie. You meet {len(names)} inhabitants: {', '.join(names[:-1])} and {names[-1]}. "
        f"{quotes} Who is a knight and who is a knave?"
    )


def _answer(names: list[str], roles: list[bool], style: str) -> str:
    if style == "compact":
        return " ".join(f"{name}:{'T' if knight else 'F'}" for name, knight in zip(names, roles))
    lines = (f"({i}) {name} is a {ROLES[not knight]}" for i, (name, knight) in enumerate(zip(names, roles), 1))
    return "\n".join(lines)


def world_checks(puzzle: Problem) -> str:
    """The scratchpad: worlds in order (T before F, first person slowest) up to the consistent one, each as its roles
    and one bit per person: 1 when that person's statement is true exactly when they are a knight."""
    n, checked = puzzle["num_people"], []
    for w in range(2**n):
        roles = [not w >> (n - 1 - i) & 1 for i in range(n)]
        bits = [_truth(said, [int(r) for r in roles], 1) == int(r) for said, r in zip(puzzle["statements"], roles)]
        checked.append("".join("TF"[not r] for r in roles) + ":" + "".join(str(int(b)) for b in bits))
        if all(bits):
            break
    return " ".join(checked)


def _puzzle(rng: random.Random, n: int, style: str) -> Problem:
    """Draw statements until exactly one assignment is consistent."""
    while True:
        statements = [_random_tree(rng, n, 2) for _ in range(n)]
        solutions = solve({"statements": statements})
        if len(solutions) == 1:
            break
    names = rng.sample(NATURAL_NAMES if style == "natural" else COMPACT_NAMES, n)
    return {
        "prompt": _prompt(statements, names, style),
        "answer": _answer(names, solutions[0], style),
        "names": names,
        "statements": statements,
        "solution": solutions[0],
        "num_people": n,
        "style": style,
    }


def _parse_roles(answer: str, names: list[str], style: str) -> list[bool] | None:
    """Each person's role (True = knight), or None unless every person got exactly one role."""
    roles = []
    for name in names:
        found = {role.lower() for role in re.findall(ANSWER_PATTERNS[style].format(re.escape(name)), answer)}
        if len(found) != 1:
            return None
        roles.append(found.pop() in ("knight", "t"))
    return roles


def _well_formed(completion: str) -> bool:
    """Exactly one <think>...</think>, then exactly one <answer>...</answer>, then only whitespace."""
    return all(completion.count(tag) == 1 for tag in TAGS) and FORMAT.fullmatch(completion) is not None


def _score(puzzle: Problem, completion: str) -> Score:
    well_formed = _well_formed(completion)
    answers = ANSWER.findall(completion)
    roles = _parse_roles(answers[-1], puzzle["names"], puzzle["style"]) if answers else None
    right = roles == puzzle["solution"]
    answer_reward = 2.0 if right else -2.0 if roles is None else -1.5
    return Score(reward=(1.0 if well_formed else -1.0) + answer_reward, correct=right and well_formed)


def reward(puzzle: Problem, completion: str) -> float:
    """The Logic-RL reward: format (+1 / -1) plus answer (+2 right, -1.5 wrong, -2 unparsable)."""
    return _score(puzzle, completion).reward


def generate(n: int, num_people: int, seed: int, *, style: str = "compact") -> list[Problem]:
    """n puzzles of num_people people each, the same for the same seed."""
    return KnightsKnavesTask(num_people, style).generate(n, seed)


def _check_people(count: int) -> None:
    if not MIN_PEOPLE <= count <= MAX_PEOPLE:
        raise ValueError(f"num_people must be in {MIN_PEOPLE}..{MAX_PEOPLE}, got {count}")


class KnightsKnavesTask:
    """Knights and Knaves puzzles; num_people is an int or an inclusive (lo, hi) range drawn per problem."""

    name = "knights_knaves"

    def __init__(self, num_people: int | tuple[int, int] = (2, 4), style: str = "compact", scratchpad: bool = False):
        lo, hi = (num_people, num_people) if isinstance(num_people, int) else num_people
        _check_people(lo)
        _check_people(hi)
        if lo > hi:
            raise ValueError(f"num_people range must have lo <= hi, got {num_people}")
        if style not in STYLES:
            raise ValueError(f"style must be one of {', '.join(STYLES)}, got {style!r}")
        if scratchpad and style != "compact":
            raise ValueError("scratchpad=True is for the compact style (the natural style's think block always "
                             "checks each statement)")
        self.people = (lo, hi)
        self.style = style
        self.scratchpad = scratchpad

    def generate(self, n: int, seed: int) -> list[Problem]:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        rng = random.Random(seed)
        return [_puzzle(rng, rng.randint(*self.people), self.style) for _ in range(n)]

    def trace(self, problem: Problem) -> str:
        if problem["style"] == "compact":
            think = world_checks(problem) if self.scratchpad else ""
            return f"<think>{think}</think><answer>{problem['answer']}</answer>"
        names, solution = problem["names"], problem["solution"]
        checks = [
            f"{name} is a {ROLES[not knight]}, and '{_render(said, names, 'natural')}' is {str(knight).lower()}."
            for name, knight, said in zip(names, solution, problem["statements"])
        ]
        think = "\n".join(checks + ["Every statement fits, and no other assignment does."])
        return f"<think>\n{think}\n</think>\n<answer>\n{problem['answer']}\n</answer>"

    def score(self, problem: Problem, completion: str) -> Score:
        return _score(problem, completion)
