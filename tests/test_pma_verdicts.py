"""Chapter 5's verdict (rlbook.chapters.merging_verdicts) on synthetic reference trajectories: each of the three
outcomes of the two-standard-error rule, for every claim."""
from pathlib import Path

import pytest

from rlbook import stats
from rlbook.chapters import merging_verdicts
from rlbook.chapters.pma import PMAConfig, Reference

SETTINGS = dict(preset="nano-tiny", max_steps=12, warmup_steps=2, decay_steps=4, checkpoint_every=2, ns=(2, 3),
                focus_n=2)
END = 8  # the last stable checkpoint of SETTINGS


def reference(seed, last, merged, annealed_equal, **settings):
    """A stored trajectory: (loss, acc) of its last stable checkpoint, its SMA merge of N = 2 and its twin."""
    value = lambda loss_acc: dict(zip(("loss", "acc"), loss_acc))
    checkpoints = {str(END): value(last), "annealed_equal": value(annealed_equal), "annealed": value((0.01, 1.0))}
    merges = {"sma-N2-end8": {**value(merged), "method": "sma", "n": 2, "end": END, "alpha": 0.2}}
    config = PMAConfig(**{**SETTINGS, **settings, "seed": seed})
    return Reference(Path(f"seed{seed}"), config, END, "synthetic", checkpoints, merges, {})


def verdicts(references):
    return [s.verdict for s in merging_verdicts.merging_signatures(references)]


def test_a_merge_that_beats_the_checkpoint_and_nears_the_annealed_model_is_reproduced():
    refs = [reference(seed, (0.5 + e, 0.80), (0.10 + e, 0.95 - e), (0.09 + e, 0.95))
            for seed, e in enumerate((0.0, 0.01, -0.01))]
    assert verdicts(refs) == [stats.REPRODUCED] * 4


def test_a_merge_worse_than_the_checkpoint_is_not_reproduced():
    refs = [reference(seed, (0.5, 0.80), (0.8 + e, 0.50 + e), (0.1, 0.95)) for seed, e in enumerate((0.0, 0.01, -0.01))]
    assert verdicts(refs) == [stats.NOT_REPRODUCED] * 4


def test_differences_that_straddle_the_bound_are_within_noise():
    # per seed: the merge's loss drop (-e) averages 0, and the drop minus 0.9 x the twin's gap averages 0; the
    # accuracy differences average -0.03, exactly the non-inferiority bound
    noise = [(-0.05, 0.05, -0.13), (0.05, 0.0, 0.07), (0.0, -0.05, -0.03)]
    refs = [reference(seed, (0.5, 0.8), (0.5 + e, 0.8 + d), (0.5 + twin, 0.8))
            for seed, (e, twin, d) in enumerate(noise)]
    assert verdicts(refs) == [stats.WITHIN_NOISE] * 4


def test_fewer_than_three_seeds_decide_nothing():
    refs = [reference(seed, (0.5, 0.8), (0.1 + e, 0.95), (0.09, 0.95)) for seed, e in enumerate((0.0, 0.01))]
    assert verdicts(refs) == [stats.WITHIN_NOISE] * 4


def test_no_references_and_bad_input():
    assert verdicts([]) == ["no runs"] * 4
    same = ((0.5, 0.8), (0.1, 0.9), (0.1, 0.9))
    mixed = [reference(0, *same), reference(1, *same, lr=1e-3)]
    with pytest.raises(ValueError, match="differ in more than their seed"):
        merging_verdicts.merging_signatures(mixed)
    with pytest.raises(ValueError, match="no stored merge 'wma-N2-end8'; stored: sma-N2-end8"):
        merging_verdicts.merging_signatures(mixed[:1], method="wma")
    with pytest.raises(ValueError, match="no reference trajectories"):
        merging_verdicts.summary_table([])


def test_observed_text_and_summary_table():
    refs = [reference(seed, (0.5, 0.8), (0.1 + e, 0.95), (0.05, 0.95)) for seed, e in enumerate((0.0, 0.01, -0.01))]
    rows = merging_verdicts.merging_signatures(refs)
    assert [(r.claim, r.paper) for r in rows] == list(merging_verdicts.CLAIMS)
    assert "step 8" in rows[0].observed and "SMA merge of the last 2" in rows[0].observed
    assert "closes 88.9% (mean over 3 seeds)" in rows[2].observed  # (0.5 - 0.1) / (0.5 - 0.05)
    table = merging_verdicts.summary_table(refs).splitlines()
    assert len(table) == 2 + 4 and "| merge sma-N2-end8 | 0.1 ± 0.0058 (n=3) | 0.950 ± 0.000 (n=3) |" in table
