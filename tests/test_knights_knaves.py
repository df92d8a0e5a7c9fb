"""Knights and Knaves: the solver, the generator's guarantees, the prompts and the Logic-RL reward."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.tasks.knights_knaves import KnightsKnavesTask, _answer, _prompt, generate, reward, solve


def depth(tree):
    return 0 if tree[0] in ("knight", "knave") else 1 + max(depth(arg) for arg in tree[1:])


@pytest.mark.parametrize(
    "statements, solutions",
    [
        ([["knave", 1], ["knight", 0]], []),  # A: "B is a knave", B: "A is a knight": a contradiction
        ([["knight", 0], ["knight", 1]], [[False, False], [True, False], [False, True], [True, True]]),
        ([["knave", 1], ["knave", 0]], [[True, False], [False, True]]),  # two solutions
        ([["or", ["knight", 1], ["knave", 1]], ["knave", 0]], [[True, False]]),
        ([["and", ["knave", 0], ["knight", 1]], ["knight", 0]], [[False, False]]),  # A: "I'm a knave, B a knight"
        ([["->", ["knight", 0], ["knave", 1]], ["<->", ["knight", 0], ["not", ["knave", 1]]]], [[True, False]]),
    ],
)
def test_solve_hand_built(statements, solutions):
    assert solve({"statements": statements}) == solutions


@pytest.mark.parametrize("people", range(2, 8))
def test_generated_puzzles_have_one_shallow_solution(people):
    for puzzle in generate(30, people, seed=people):
        assert solve(puzzle) == [puzzle["solution"]]
        assert puzzle["num_people"] == len(puzzle["names"]) == len(puzzle["statements"]) == people
        assert all(depth(statement) <= 2 for statement in puzzle["statements"])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32), style=st.sampled_from(["natural", "compact"]))
def test_any_seed_gives_unique_puzzles(seed, style):
    for puzzle in KnightsKnavesTask((2, 7), style).generate(5, seed):
        assert solve(puzzle) == [puzzle["solution"]]
        assert len(set(puzzle["names"])) == len(puzzle["names"])


def test_same_seed_same_puzzles_and_names_vary():
    task = KnightsKnavesTask((2, 7), "natural")
    assert task.generate(20, seed=1) == task.generate(20, seed=1)
    assert task.generate(20, seed=1) != task.generate(20, seed=2)
    puzzles = task.generate(50, seed=3)
    assert len({tuple(p["names"]) for p in puzzles}) > 40
    assert {p["num_people"] for p in puzzles} == set(range(2, 8))


def test_compact_prompt_and_answer():
    puzzles = generate(200, 3, seed=0)
    assert sum(len(p["prompt"]) for p in puzzles) / len(puzzles) < 40
    for puzzle in puzzles:
        assert puzzle["prompt"].endswith(" ?")
        assert [part.split(":")[0] for part in puzzle["prompt"].split()[:-1]] == puzzle["names"]
        assert all(len(name) == 1 and name.isupper() and name not in "TF" for name in puzzle["names"])
    puzzle = {
        "names": ["A", "B", "C"],
        "statements": [
            ["and", ["knave", 1], ["knight", 2]],
            ["->", ["knight", 0], ["knight", 2]],
            ["not", ["or", ["knave", 0], ["knight", 1]]],
        ],
        "solution": [False, True, False],
    }
    assert _prompt(puzzle["statements"], puzzle["names"], "compact") == "A:~B&C B:A>C C:~(~A|B) ?"
    assert _answer(puzzle["names"], puzzle["solution"], "compact") == "A:F B:T C:F"


def test_natural_prompt_and_answer():
    puzzle = generate(1, 3, seed=0, style="natural")[0]
    assert puzzle["prompt"].startswith("A very special island is inhabited only by knights and knaves.")
    assert puzzle["prompt"].endswith("Who is a knight and who is a knave?")
    for i, name in enumerate(puzzle["names"]):
        assert f"{name} says: '" in puzzle["prompt"]
        assert f"({i + 1}) {name} is a {'knight' if puzzle['solution'][i] else 'knave'}" in puzzle["answer"]


@pytest.mark.parametrize("style", ["natural", "compact"])
def test_reward_scheme(style):
    task = KnightsKnavesTask(4, style)
    for puzzle in task.generate(10, seed=5):
        right = puzzle["answer"]
        flipped = right.replace("knight", "KNAVE").replace("knave", "knight").replace("KNAVE", "knave")
        flipped = flipped.replace(":T", ":X").replace(":F", ":T").replace(":X", ":F")
        cases = {
            task.trace(puzzle): (3.0, True),
            f"<think>hmm</think><answer>{flipped}</answer>": (-0.5, False),
            "<think>hmm</think><answer>no idea</answer>": (-1.0, False),
            f"<think>hmm</think><answer>{right}</answer> extra": (1.0, False),
            f"<answer>{right}</answer>": (1.0, False),
            f"<think></think><think></think><answer>{right}</answer>": (1.0, False),
            "": (-3.0, False),
        }
        for completion, (expected, correct) in cases.items():
            assert reward(puzzle, completion) == expected, completion
            assert task.score(puzzle, completion).reward == expected
            assert task.score(puzzle, completion).correct is correct


def test_answer_parsing_is_robust():
    puzzle = generate(1, 3, seed=0)[0]
    a, b, c = puzzle["names"]
    x, y, z = ("T" if knight else "F" for knight in puzzle["solution"])
    assert reward(puzzle, f"  <think>\nok\n</think>\n<answer> {c} : {z}\n{a}:{x}  {b}:{y} </answer>\n") == 3.0
    assert reward(puzzle, f"<think></think><answer>{a}:{x} {b}:{y}</answer>") == -1.0  # C has no role
    both = "F" if x == "T" else "T"
    assert reward(puzzle, f"<think></think><answer>{a}:{x} {a}:{both} {b}:{y} {c}:{z}</answer>") == -1.0

    natural = generate(1, 2, seed=0, style="natural")[0]
    first, second = natural["names"]
    roles = ["knight" if knight else "knave" for knight in natural["solution"]]
    answer = f"{second.lower()} is a {roles[1].upper()}, and {first} is a {roles[0]}."
    assert reward(natural, f"<think>x</think><answer>{answer}</answer>") == 3.0


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: KnightsKnavesTask(1), "num_people must be in 2..7, got 1"),
        (lambda: KnightsKnavesTask((2, 8)), "num_people must be in 2..7, got 8"),
        (lambda: KnightsKnavesTask((5, 3)), "lo <= hi"),
        (lambda: generate(3, 9, seed=0), "num_people must be in 2..7, got 9"),
        (lambda: KnightsKnavesTask(3, "fancy"), "natural, compact"),
        (lambda: KnightsKnavesTask(3).generate(-1, seed=0), "n must be >= 0, got -1"),
    ],
)
def test_bad_input(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        make()


def test_scratchpad_checks_worlds_until_the_solution():
    # A: "B is a knight or B is a knave" (always true), B: "A is a knave"
    puzzle = {"prompt": "A:B|~B B:~A ?", "answer": "A:T B:F", "names": ["A", "B"], "num_people": 2,
              "statements": [["or", ["knight", 1], ["knave", 1]], ["knave", 0]], "solution": [True, False],
              "style": "compact"}
    # TT: A's statement is true and A a knight (1); B's "A is a knave" is false but B a knight (0). TF: both fit.
    assert KnightsKnavesTask(2, scratchpad=True).trace(puzzle) == "<think>TT:10 TF:11</think><answer>A:T B:F</answer>"
    assert KnightsKnavesTask(2).trace(puzzle) == "<think></think><answer>A:T B:F</answer>"


@pytest.mark.parametrize("people", [2, 3, 4])
def test_scratchpad_ends_at_the_only_consistent_world(people):
    task = KnightsKnavesTask(people, scratchpad=True)
    for puzzle in task.generate(40, seed=people):
        worlds = [w.split(":") for w in task.trace(puzzle).split("<think>")[1].split("</think>")[0].split()]
        assert [bits == "1" * people for _, bits in worlds] == [False] * (len(worlds) - 1) + [True]
        assert [r == "T" for r in worlds[-1][0]] == puzzle["solution"]
        assert task.score(puzzle, task.trace(puzzle)).correct


def test_scratchpad_is_for_the_compact_style():
    with pytest.raises(ValueError, match="compact"):
        KnightsKnavesTask(3, "natural", scratchpad=True)
