"""Scores and verdicts on synthetic runs: each rule reaches each of its outcomes."""
import json

import pytest

from rlbook import stats
from rlbook.runs import Run


def fake_run(tmp_path, name, greedy):
    """A run directory whose metrics hold row 0 (base) and then one evaluation per value of greedy[1:]."""
    path = tmp_path / name
    path.mkdir()
    rows = [{"update": 0, "eval_greedy_acc": greedy[0]}]
    rows += [{"update": 10 * i, "reward": 0.5, "eval_greedy_acc": v} for i, v in enumerate(greedy[1:], 1)]
    rows.insert(2, {"update": 15, "reward": 0.4})  # a row without an evaluation is skipped
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(path)


def test_score_is_the_mean_of_the_last_three_evaluations_not_the_peak(tmp_path):
    run = fake_run(tmp_path, "a", [0.3, 0.9, 0.4, 0.5, 0.6])
    assert stats.score(run) == pytest.approx(0.5)
    assert stats.score(run, last=1) == pytest.approx(0.6)
    assert stats.base_score(run) == 0.3
    assert stats.evaluations(run) == ([10, 20, 30, 40], [0.9, 0.4, 0.5, 0.6])


def test_score_needs_an_evaluation_after_training_began(tmp_path):
    with pytest.raises(ValueError, match="no evaluation"):
        stats.score(fake_run(tmp_path, "b", [0.3]))


def test_estimate_mean_and_standard_error():
    e = stats.estimate([1.0, 2.0, 3.0])
    assert (e.mean, e.n) == (2.0, 3) and e.se == pytest.approx(1 / 3 ** 0.5)
    assert stats.estimate([0.5]).se == 0.0
    with pytest.raises(ValueError, match="no values"):
        stats.estimate([])


def test_difference_adds_standard_errors_in_quadrature():
    d = stats.Estimate(0.5, 0.03, 3) - stats.Estimate(0.3, 0.04, 5)
    assert d.mean == pytest.approx(0.2) and d.se == pytest.approx(0.05) and d.n == 3


@pytest.mark.parametrize("mean, se, sign, expected", [
    (0.10, 0.02, 1, stats.REPRODUCED),        # the paper's sign, beyond 2 s.e.
    (0.03, 0.02, 1, stats.WITHIN_NOISE),      # the paper's sign, inside 2 s.e.
    (-0.10, 0.02, 1, stats.NOT_REPRODUCED),   # the other sign, beyond 2 s.e.
    (-0.10, 0.02, -1, stats.REPRODUCED),      # the paper predicts a decrease
    (0.10, 0.02, -1, stats.NOT_REPRODUCED),
])
def test_verdict_outcomes(mean, se, sign, expected):
    assert stats.verdict(stats.Estimate(mean, se, 3), sign) == expected


def test_verdict_margin_and_single_seed():
    assert stats.verdict(stats.Estimate(0.10, 0.01, 3), margin=0.2) == stats.NOT_REPRODUCED  # short by 10 s.e.
    assert stats.verdict(stats.Estimate(0.19, 0.01, 3), margin=0.2) == stats.WITHIN_NOISE
    assert stats.verdict(stats.Estimate(0.30, 0.01, 3), margin=0.2) == stats.REPRODUCED
    assert stats.verdict(stats.Estimate(0.50, 0.0, 1)) == stats.WITHIN_NOISE  # one seed proves nothing
    assert stats.verdict(stats.Estimate(0.50, 0.01, 2)) == stats.WITHIN_NOISE  # nor two (fewer than MIN_SEEDS)
    with pytest.raises(ValueError, match="sign"):
        stats.verdict(stats.Estimate(0.1, 0.01, 3), sign=0)


@pytest.mark.parametrize("mean, se, expected", [
    (0.005, 0.005, stats.REPRODUCED),      # interval [-0.005, 0.015] inside +-0.03
    (0.10, 0.01, stats.NOT_REPRODUCED),    # interval [0.08, 0.12] wholly outside
    (0.02, 0.02, stats.WITHIN_NOISE),      # too imprecise to tell
])
def test_matches_outcomes(mean, se, expected):
    assert stats.matches(stats.Estimate(mean, se, 3), bound=0.03) == expected


def test_matches_needs_a_positive_bound():
    with pytest.raises(ValueError, match="bound"):
        stats.matches(stats.Estimate(0.0, 0.01, 3), bound=0)


def _curves(tmp_path, label, curve, n=3, step=0.004):
    """n seeds of one curve (index 0 the base), each shifted by `step` so the seeds differ a little."""
    return [fake_run(tmp_path, f"{label}{i}", [v + step * i for v in curve]) for i in range(n)]


def test_early_best_reads_only_the_first_half_and_fall_from_peak_the_end(tmp_path):
    run = fake_run(tmp_path, "r", [0.3, 0.4, 0.5, 0.6, 0.6, 0.9, 0.9, 0.9, 0.5])  # evaluations at 10..80
    assert stats.early_best(run) == pytest.approx((0.5 + 0.6 + 0.6) / 3)  # updates <= 40 only
    assert stats.smoothed_peak(run) == pytest.approx(0.9)
    assert stats.fall_from_peak(run) == pytest.approx(0.9 - (0.9 + 0.9 + 0.5) / 3)


@pytest.mark.parametrize("free, expected", [
    ([0.3, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6], stats.REPRODUCED),  # as fast as the trust region
    ([0.3, 0.48, 0.58, 0.58, 0.58, 0.58, 0.58, 0.58, 0.58], stats.REPRODUCED),  # 0.02 slower: inside the margin
    ([0.3, 0.35, 0.4, 0.4, 0.4, 0.6, 0.6, 0.6, 0.6], stats.NOT_REPRODUCED),  # catches up only in the second half
])
def test_prosperity_compares_early_learning_with_the_faster_trust_region(tmp_path, free, expected):
    grpo = _curves(tmp_path, "g", [0.3, 0.4, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    m2po = _curves(tmp_path, "m", [0.3, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6])
    judged = stats.prosperity(_curves(tmp_path, "f", free), {"GRPO": grpo, "M2PO": m2po})
    assert judged.verdict == expected and "minus M2PO" in judged.observed
    with pytest.raises(ValueError, match="trust region"):
        stats.prosperity(_curves(tmp_path, "x", free), {"GRPO": []})


@pytest.mark.parametrize("end, expected, fell", [(0.3, stats.REPRODUCED, 3), (0.55, stats.NOT_REPRODUCED, 0),
                                                 (0.51, stats.WITHIN_NOISE, None)])
def test_collapse_is_a_fall_below_the_runs_own_peak(tmp_path, end, expected, fell):
    runs = [fake_run(tmp_path, f"c{i}", [0.3, 0.5, 0.6, 0.6, 0.6, end, end, end + 0.04 * i])
            for i in range(3)]
    judged = stats.collapse(runs)
    assert judged.verdict == expected
    if fell is not None:
        assert f"{fell} of 3 seeds fell that far" in judged.observed
