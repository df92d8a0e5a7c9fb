"""Tests of the explanations chapters give for what their runs show, read at two standard errors over seeds.

Train again with the suspected cause removed (the only change) and read whether the quantity moves from where it was
to where the runs without that cause sit.

Chapter 3 asks whether AReaL's denominator makes its M2PO rule drift further than Algorithm 1's; chapter 4 asks
whether Lopti's second optimizer step is what costs it accuracy against GRPO.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import stats

SUPPORTED, PARTLY, NOT_SUPPORTED, UNDECIDED = "supported", "partly", "not supported", "undecided"
FEW_SEEDS = f"not read (fewer than {stats.MIN_SEEDS} seeds stored)"
NO_TEST = f"cannot be read yet (fewer than {stats.MIN_SEEDS} seeds stored on a side)"  # the conclusion, without a test


def readings(whose: str) -> tuple[str, str, str]:
    """The three readings of a difference against `whose` value: above, below, within 2 s.e."""
    return (f"above {whose} by more than two standard errors", f"below {whose} by more than two standard errors",
            f"within two standard errors of {whose}")


def reading(d: stats.Estimate, whose: str) -> str:
    """A difference read at two standard errors against `whose` value: above, below or within (fewer than
    stats.MIN_SEEDS seeds: FEW_SEEDS)."""
    if d.n < stats.MIN_SEEDS:
        return FEW_SEEDS
    above, below, within = readings(whose)
    return {stats.REPRODUCED: above, stats.NOT_REPRODUCED: below, stats.WITHIN_NOISE: within}[stats.verdict(d, +1)]


def seed_difference(runs, others, quantity) -> stats.Estimate:
    """The seed mean of `quantity` (a function of a run) over `runs` minus its seed mean over `others`."""
    return stats.estimate([quantity(run) for run in runs]) - stats.estimate([quantity(run) for run in others])


@dataclass(frozen=True)
class MechanismTest:
    moved: stats.Estimate  # the tested runs minus the original ones
    moved_reading: str  # `moved` read against the original's value
    apart: stats.Estimate  # the tested runs minus the reference ones
    apart_reading: str  # `apart` read against the reference's value
    outcome: str  # SUPPORTED, PARTLY, NOT_SUPPORTED or UNDECIDED


def mechanism_test(tested, original, reference, quantity, toward: int, whose: tuple[str, str]) -> MechanismTest | None:
    """The `original` runs differ from the `reference` runs in `quantity` (a function of a run); the `tested` runs are
    the original ones with the suspected cause removed. Where that cause accounts for the difference, the tested runs
    move from the original's value in the direction `toward` (+1 up, -1 down) to the reference's. Read at 2 s.e.:
    moved and no longer apart from the reference, SUPPORTED; moved and still apart, PARTLY; not moved and still apart,
    NOT_SUPPORTED; else UNDECIDED. `whose` names the original's and the reference's values for the readings ("AReaL's",
    "Algorithm 1's"). None where a side has fewer than stats.MIN_SEEDS runs."""
    if min(len(tested), len(original), len(reference)) < stats.MIN_SEEDS:
        return None
    moved = seed_difference(tested, original, quantity)
    apart = seed_difference(tested, reference, quantity)
    has_moved = stats.verdict(moved, toward) == stats.REPRODUCED
    still_apart = stats.verdict(apart, -toward) == stats.REPRODUCED
    outcome = ((PARTLY if still_apart else SUPPORTED) if has_moved else NOT_SUPPORTED if still_apart else UNDECIDED)
    return MechanismTest(moved, reading(moved, whose[0]), apart, reading(apart, whose[1]), outcome)


def texts(test: MechanismTest | None, number=str) -> dict[str, str]:
    """What a chapter's prose quotes of a test: the two differences (written by `number`) and their readings ('–' and
    FEW_SEEDS where there is no test)."""
    if test is None:
        return {"moved": "–", "moved_reading": FEW_SEEDS, "apart": "–", "apart_reading": FEW_SEEDS}
    return {"moved": number(test.moved), "moved_reading": test.moved_reading, "apart": number(test.apart),
            "apart_reading": test.apart_reading}
