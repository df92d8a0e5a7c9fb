"""Mechanism tests (rlbook.chapters.mechanism) on seed values with known answers: each run is its own quantity."""
import pytest

from rlbook import stats
from rlbook.chapters import mechanism

ORIGINAL, REFERENCE = [0.50, 0.51, 0.52], [0.60, 0.61, 0.62]  # the reference runs score 0.10 higher (s.e. 0.006)
WHOSE = ("Lopti's", "GRPO's")


def same(run):
    return run


@pytest.mark.parametrize("tested, outcome", [
    ([0.60, 0.61, 0.62], mechanism.SUPPORTED),  # moved all the way: the cause accounts for the difference
    ([0.55, 0.56, 0.57], mechanism.PARTLY),  # moved, but still below the reference
    ([0.50, 0.51, 0.52], mechanism.NOT_SUPPORTED),  # did not move, still below
    ([0.30, 0.60, 0.90], mechanism.UNDECIDED)])  # too noisy to say either
def test_the_outcome_reads_both_differences_at_two_standard_errors(tested, outcome):
    got = mechanism.mechanism_test(tested, ORIGINAL, REFERENCE, same, +1, WHOSE)
    assert got.outcome == outcome
    assert got.moved.mean == pytest.approx(sum(tested) / 3 - 0.51)
    assert got.apart.mean == pytest.approx(sum(tested) / 3 - 0.61)
    assert got.moved_reading == mechanism.reading(got.moved, "Lopti's")
    assert got.apart_reading == mechanism.reading(got.apart, "GRPO's")


def test_a_downward_mechanism_reads_the_same_way_mirrored():
    mirrored = lambda runs: [-x for x in runs]  # noqa: E731
    got = mechanism.mechanism_test(mirrored([0.55, 0.56, 0.57]), mirrored(ORIGINAL), mirrored(REFERENCE), same, -1,
                                   WHOSE)
    assert got.outcome == mechanism.PARTLY


def test_moving_the_wrong_way_is_not_support():
    assert mechanism.mechanism_test([0.40, 0.41, 0.42], ORIGINAL, REFERENCE, same, +1, WHOSE).outcome == \
        mechanism.NOT_SUPPORTED


def test_too_few_seeds_on_any_side_give_no_test():
    assert mechanism.mechanism_test(REFERENCE[:2], ORIGINAL, REFERENCE, same, +1, WHOSE) is None
    assert mechanism.mechanism_test(REFERENCE, ORIGINAL, [], same, +1, WHOSE) is None


def test_a_reading_names_whose_value_and_needs_three_seeds():
    above = stats.Estimate(0.1, 0.01, 3)
    assert mechanism.reading(above, "GRPO's") == "above GRPO's by more than two standard errors"
    below = stats.Estimate(-0.1, 0.01, 3)
    assert mechanism.reading(below, "GRPO's") == "below GRPO's by more than two standard errors"
    assert mechanism.reading(stats.Estimate(0.01, 0.01, 3), "GRPO's") == "within two standard errors of GRPO's"
    assert mechanism.reading(stats.Estimate(0.1, 0.01, 2), "GRPO's") == mechanism.FEW_SEEDS


def test_a_seed_difference_is_the_difference_of_seed_means_with_their_errors_combined():
    d = mechanism.seed_difference(REFERENCE, ORIGINAL, lambda run: 2 * run)
    assert d.mean == pytest.approx(0.20)
    a, b = stats.estimate([2 * x for x in REFERENCE]), stats.estimate([2 * x for x in ORIGINAL])
    assert d.se == pytest.approx((a.se ** 2 + b.se ** 2) ** 0.5)
