"""Arithmetic task: seeded generation, digit ranges, operators, the scratchpad trace and the M2PO-style reward."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.tasks import make_task
from rlbook.tasks.arithmetic import ArithmeticTask


def problem(a, op, b):
    return {"prompt": f"{a}{op}{b}=", "answer": str(a + b if op == "+" else a * b), "a": a, "b": b, "op": op}


def test_same_seed_same_problems_other_seed_other_problems():
    task = ArithmeticTask(ops="+*")
    first = task.generate(50, seed=3)
    assert first == ArithmeticTask(ops="+*").generate(50, seed=3)
    assert first != task.generate(50, seed=4)
    assert task.generate(20, seed=3) == first[:20]  # a prefix of the same stream
    assert task.generate(0, seed=3) == []


def test_problems_are_consistent():
    for p in ArithmeticTask(ops="+*").generate(200, seed=0):
        assert p["prompt"] == f"{p['a']}{p['op']}{p['b']}="
        assert int(p["answer"]) == (p["a"] + p["b"] if p["op"] == "+" else p["a"] * p["b"])
        assert p["answer"] == str(int(p["answer"]))


def test_default_digits_cover_one_to_three():
    problems = ArithmeticTask().generate(500, seed=1)
    lengths = {len(str(p[k])) for p in problems for k in ("a", "b")}
    assert lengths == {1, 2, 3}
    assert all(0 <= p[k] <= 999 for p in problems for k in ("a", "b"))


@pytest.mark.parametrize("digits", [2, (2, 2)])
def test_exact_digits(digits):
    problems = ArithmeticTask(digits=digits).generate(300, seed=2)
    assert all(10 <= p[k] <= 99 for p in problems for k in ("a", "b"))
    assert min(p["a"] for p in problems) < 20 and max(p["a"] for p in problems) > 90  # the range is used


@pytest.mark.parametrize("ops, seen", [("+", {"+"}), ("*", {"*"}), ("+*", {"+", "*"}), ("*+", {"+", "*"})])
def test_operators(ops, seen):
    problems = ArithmeticTask(ops=ops).generate(100, seed=5)
    assert {p["op"] for p in problems} == seen


def test_make_task_passes_parameters():
    task = make_task("arithmetic", digits=[2, 3], ops="*", scratchpad=True)
    assert task.digits == (2, 3) and task.ops == "*" and task.scratchpad is True


@pytest.mark.parametrize(
    "a, op, b, trace",
    [
        (47, "+", 385, "385+7=392;392+40=432;432"),
        (47, "*", 385, "7*385=2695;40*385=15400;18095"),
        (105, "+", 3, "3+5=8;8+100=108;108"),  # the zero tens digit gets no step
        (105, "*", 3, "5*3=15;100*3=300;315"),
        (7, "+", 8, "8+7=15;15"),
        (0, "*", 9, "0*9=0;0"),
        (30, "+", 4, "4+0=4;4+30=34;34"),  # the units step is always written, even for a 0
    ],
)
def test_scratchpad_trace_by_hand(a, op, b, trace):
    p = problem(a, op, b)
    assert ArithmeticTask(ops="+*", scratchpad=True).trace(p) == trace
    assert ArithmeticTask(ops="+*").trace(p) == p["answer"]  # without the scratchpad: just the answer


@pytest.mark.parametrize(
    "completion, reward, correct",
    [
        ("432", 1.0, True),
        (" 432 \n", 1.0, True),
        ("385+7=392;392+40=432;432", 1.0, True),
        ("385+7=392;392+40=431;432", 1.0, True),  # only the final answer counts
        ("431", 0.1, False),
        ("385+7=392;392+40=432;433", 0.1, False),
        ("-432", 0.1, False),
        ("", 0.0, False),
        ("abc", 0.0, False),
        ("385+7=392;392+40=432", 0.0, False),  # no final answer after the last ";"
        ("432x", 0.0, False),
    ],
)
def test_score(completion, reward, correct):
    score = ArithmeticTask().score(problem(47, "+", 385), completion)
    assert score.reward == pytest.approx(reward)
    assert score.correct is correct


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), ops=st.sampled_from(["+", "*", "+*"]), scratchpad=st.booleans(),
       lo=st.integers(1, 5), extra=st.integers(0, 3))
def test_trace_always_scores_correct(seed, ops, scratchpad, lo, extra):
    task = ArithmeticTask(digits=(lo, lo + extra), ops=ops, scratchpad=scratchpad)
    for p in task.generate(10, seed):
        trace = task.trace(p)
        assert task.score(p, trace).reward == 1.0 and task.score(p, trace).correct
        if scratchpad:  # every step is true arithmetic
            for step in trace.split(";")[:-1]:
                left, right = step.split("=")
                x, y = left.split(p["op"])
                assert (int(x) + int(y) if p["op"] == "+" else int(x) * int(y)) == int(right)


@pytest.mark.parametrize(
    "params, named",
    [
        ({"digits": 0}, "digits=0"),
        ({"digits": (3, 1)}, "digits=(3, 1)"),
        ({"digits": 13}, "digits=13"),
        ({"ops": "-"}, "ops='-'"),
        ({"ops": "+-"}, "ops='+-'"),
        ({"ops": ""}, "ops=''"),
    ],
)
def test_bad_parameters(params, named):
    with pytest.raises(ValueError) as error:
        ArithmeticTask(**params)
    assert named in str(error.value)


def test_bad_parameters_through_make_task():
    with pytest.raises(ValueError, match="ops='-'"):
        make_task("arithmetic", ops="-")
    with pytest.raises(ValueError, match="colour"):
        make_task("arithmetic", colour="red")
    with pytest.raises(ValueError, match="n=-1"):
        ArithmeticTask().generate(-1, seed=0)
