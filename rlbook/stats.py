"""Scores and verdicts: how a chapter turns runs into "reproduced", "not reproduced" or "within noise".

A run's score is the mean of its last few evaluations (never its peak: the max of noisy evaluations is biased
upward). A claim compares seed means: each side is a mean over seeds with its standard error, a difference has the
standard error sqrt(se_a^2 + se_b^2), and a signature is

- "reproduced" when the effect has the paper's sign and exceeds 2 standard errors (beyond any stated margin),
- "not reproduced" when it falls short of the paper's direction (and margin) by more than 2 standard errors,
- "within noise" otherwise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

REPRODUCED, NOT_REPRODUCED, WITHIN_NOISE = "reproduced", "not reproduced", "within noise"
LAST_EVALS = 3  # a run's score: the mean of its last 3 evaluations
MIN_SEEDS = 3  # a claim needs at least 3 seeds on each side; with fewer the verdict is "within noise"


def evaluations(run, metric: str = "eval_greedy_acc") -> tuple[list[int], list[float]]:
    """(updates, values) of a run's evaluations after training began (row 0, the base model, excluded)."""
    updates, values = run.series(metric)
    kept = [(u, v) for u, v in zip(updates, values) if u > 0]
    return [u for u, _ in kept], [v for _, v in kept]


def base_score(run, metric: str = "eval_greedy_acc") -> float:
    """The base model's evaluation (row 0 of every run)."""
    updates, values = run.series(metric)
    if not updates or updates[0] != 0:
        raise ValueError(f"{run.path}: no base-model row (update 0) for {metric}")
    return values[0]


def score(run, metric: str = "eval_greedy_acc", last: int = LAST_EVALS) -> float:
    """The mean of a run's last `last` evaluations."""
    values = evaluations(run, metric)[1]
    if not values:
        raise ValueError(f"{run.path}: no evaluation of {metric} after update 0")
    return sum(values[-last:]) / len(values[-last:])


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds with its standard error (0 for a single seed: report n alongside)."""
    mean: float
    se: float
    n: int

    def __sub__(self, other: "Estimate") -> "Estimate":
        return Estimate(self.mean - other.mean, math.hypot(self.se, other.se), min(self.n, other.n))

    def __str__(self) -> str:
        return f"{self.mean:.3f} ± {self.se:.3f} (n={self.n})"


def estimate(values) -> Estimate:
    """Mean and standard error (sample standard deviation / sqrt(n)) of per-seed values."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values to estimate from (no runs for this cell?)")
    n, mean = len(values), sum(values) / len(values)
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n) if n > 1 else 0.0
    return Estimate(mean, se, n)


def verdict(effect: Estimate, sign: int = 1, margin: float = 0.0) -> str:
    """The paper says `sign * effect > margin`. Reproduced when our `sign * effect - margin` exceeds 2 standard
    errors, not reproduced when it falls below -2 standard errors, within noise otherwise.

    A margin states how large an effect must be to count as the paper's (a "collapse" is more than a dip). With
    fewer than MIN_SEEDS seeds nothing is decided: the standard error itself is too uncertain.
    """
    if sign not in (1, -1):
        raise ValueError(f"sign={sign}: the paper's direction is +1 or -1")
    if effect.n < MIN_SEEDS:
        return WITHIN_NOISE
    excess = sign * effect.mean - margin
    if excess > 2 * effect.se:
        return REPRODUCED
    if excess < -2 * effect.se:
        return NOT_REPRODUCED
    return WITHIN_NOISE


def matches(effect: Estimate, bound: float) -> str:
    """The paper says two things match (a difference near 0): an equivalence test at 2 standard errors.

    Reproduced when the whole interval mean ± 2 s.e. lies inside ±bound; not reproduced when it lies wholly
    outside; within noise otherwise (a match between two imprecise estimates is not a match).
    """
    if bound <= 0:
        raise ValueError(f"bound={bound}: the largest difference that still counts as a match must be > 0")
    if effect.n < MIN_SEEDS:
        return WITHIN_NOISE
    if abs(effect.mean) + 2 * effect.se <= bound:
        return REPRODUCED
    if abs(effect.mean) - 2 * effect.se > bound:
        return NOT_REPRODUCED
    return WITHIN_NOISE


# Prosperity and collapse as the M2PO paper shows them (Figs. 1-2: without a trust region a stale run first learns as
# fast as, or faster than, the trust-region objectives at the same staleness, then falls far below its own high).
PROSPERITY_MARGIN = 0.03  # "at least as fast": not slower than the trust region by more than what counts as a match
COLLAPSE_FALL = 0.08  # "collapse": the final score at least this far below the run's own smoothed peak
WINDOW = 3  # a smoothed accuracy: the mean of 3 consecutive evaluations


def window_means(run, metric: str = "eval_greedy_acc", window: int = WINDOW, until: float | None = None) -> list[float]:
    """The mean of every `window` consecutive evaluations, in order; with `until`, only the evaluations at updates up
    to that fraction of the last evaluated update."""
    updates, values = evaluations(run, metric)
    if until is not None and updates:
        values = [v for u, v in zip(updates, values) if u <= until * updates[-1]]
    if not values:
        raise ValueError(f"{run.path}: no {metric} evaluations recorded")
    return [sum(values[i:i + window]) / len(values[i:i + window]) for i in range(max(len(values) - window + 1, 1))]


def smoothed_peak(run, metric: str = "eval_greedy_acc", window: int = WINDOW) -> float:
    """The best mean of `window` consecutive evaluations (less biased upward than the best single evaluation)."""
    return max(window_means(run, metric, window))


def early_best(run, metric: str = "eval_greedy_acc", window: int = WINDOW) -> float:
    """How fast a run learns early on: its best `window`-evaluation mean in the first half of its updates."""
    return max(window_means(run, metric, window, until=0.5))


def fall_from_peak(run, metric: str = "eval_greedy_acc") -> float:
    """How far a run ends below its own high: smoothed peak minus final score (0 for a run that ends at its best)."""
    return smoothed_peak(run, metric) - score(run, metric)


@dataclass(frozen=True)
class Judged:
    """A verdict with the estimate it rests on and, in words, what was compared."""
    verdict: str
    effect: Estimate
    observed: str


def prosperity(free, trust: dict[str, list], metric: str = "eval_greedy_acc") -> Judged:
    """No trust region (runs `free`) learns at least as fast early on as the trust region: its seed-mean early_best
    minus that of the faster trust-region objective (`trust`: name -> runs at the same staleness), reproduced when it
    exceeds -PROSPERITY_MARGIN by 2 standard errors, not reproduced when it falls short of it by 2."""
    cells = {name: estimate([early_best(r, metric) for r in runs]) for name, runs in trust.items() if runs}
    if not free or not cells:
        raise ValueError("prosperity compares no trust region with a trust region at the same staleness: "
                         f"got {len(free)} runs without and trust-region cells {sorted(cells)}")
    fastest = max(cells, key=lambda name: cells[name].mean)
    effect = estimate([early_best(r, metric) for r in free]) - cells[fastest]
    observed = (f"best {WINDOW}-evaluation mean in the first half, no trust region minus {fastest} (the faster "
                f"trust region): {effect} (at least as fast: above -{PROSPERITY_MARGIN})")
    return Judged(verdict(effect, +1, -PROSPERITY_MARGIN), effect, observed)


def collapse(free, metric: str = "eval_greedy_acc") -> Judged:
    """Runs `free` end at least COLLAPSE_FALL below their own smoothed peak (2-s.e. rule on the seed mean); the
    share of seeds that fell that far is stated."""
    falls = [fall_from_peak(r, metric) for r in free]
    effect = estimate(falls)
    fell = sum(f >= COLLAPSE_FALL for f in falls)
    observed = (f"smoothed peak minus final score: {effect} (collapse: at least {COLLAPSE_FALL}); {fell} of "
                f"{len(falls)} seeds fell that far")
    return Judged(verdict(effect, +1, COLLAPSE_FALL), effect, observed)
