"""The reference profile: a notebook's runs looked up in the stored reference runs under any training version,
labelled with their seeds and the code that made them, and never trained; and the profiles' names and defaults."""
import pytest

import rlbook.obtain
from rlbook import profiles
from rlbook.config import RunConfig
from rlbook.obtain import obtain, plan
from rlbook.runs import RunStore, lookup, write_json
from rlbook.runset import RunSet, provenance, seed_list
from rlbook.versions import TRAINING_VERSION

TINY = dict(experiment="t", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4, total_updates=4,
            eval_every=2, eval_size=8, max_new_tokens=6)


def stored(root, config: RunConfig, older: bool = False, complete: bool = True, wall: float = 8.0):
    """A finished run of config in a store: this code's, or one made by the previous training version (another
    hash in its directory name, as every run made before a version bump has)."""
    run = RunStore(root).create(config)
    if older:
        path = run.path.with_name(f"{config.name}-0123456789")
        run.path.rename(path)
        run = type(run)(path)
    write_json(run.path / "meta.json", {"complete": complete, "training_version": TRAINING_VERSION - older,
                                        "wall_time_s": wall, "updates": config.total_updates, "device": "cpu (x86)"})
    (run.path / "metrics.jsonl").write_text("")
    return run


def configs(*seeds):
    return [RunConfig(**TINY, seed=s, name=f"tiny-seed{s}") for s in seeds]


def test_lookup_finds_this_codes_run_first_then_an_older_one(tmp_path):
    a, b, c = configs(0, 1, 2)
    stored(tmp_path, a)
    stored(tmp_path, b, older=True)
    stored(tmp_path, a.replace(name="tiny-seed0-old"), older=True)  # same settings, older code: not chosen
    found = lookup([a, b, c], tmp_path)
    assert found[0].current and found[0].training_version == TRAINING_VERSION
    assert not found[1].current and found[1].training_version == TRAINING_VERSION - 1
    assert found[2] is None


def test_lookup_ignores_unfinished_runs(tmp_path):
    (a,) = configs(0)
    stored(tmp_path, a, complete=False)
    assert lookup([a], tmp_path) == [None]


def test_obtain_in_the_reference_profile_never_trains(tmp_path, monkeypatch):
    a, b, c = configs(0, 1, 2)
    stored(tmp_path, a)
    stored(tmp_path, b, older=True)
    monkeypatch.setattr(rlbook.obtain, "reference_root", lambda: tmp_path)
    monkeypatch.setattr("rlbook.runs.reference_root", lambda: tmp_path)
    monkeypatch.setattr(rlbook.obtain, "run_or_load", lambda *a, **k: pytest.fail("the reference profile trained"))
    runs = obtain([a, b, c], trains=False)
    assert isinstance(runs, RunSet) and len(runs) == 2 and runs.missing == [c]
    label = runs.label()
    assert "seeds 0, 1" in label and "1 of 2 runs made by older code" in label and "retraining pending" in label
    assert "1 setting with no stored run" in label


def test_provenance_says_when_every_run_is_this_codes():
    class Run:
        def __init__(self, seed, current=True):
            self.config, self.current = RunConfig(**TINY, seed=seed), current
            self.training_version = TRAINING_VERSION if current else TRAINING_VERSION - 1

    assert provenance([Run(s) for s in range(5)]) == (f"seeds 0-4; all 5 runs made by this code (training version "
                                                      f"{TRAINING_VERSION}), on a CPU")
    assert "all runs made by older code" in provenance([Run(0, False), Run(1, False)])
    assert seed_list([4, 0, 2]) == "0, 2, 4"


def test_plan_counts_stored_runs_and_times_the_rest(tmp_path, monkeypatch):
    a, b = configs(0, 1)
    stored(tmp_path / "refs", a, wall=8.0)
    monkeypatch.setattr(rlbook.obtain, "reference_root", lambda: tmp_path / "refs")
    text = plan([a, b], RunStore(tmp_path / "mine"))
    assert text.startswith("2 runs of 4 updates: 1 stored by this code (replayed), 1 to train")
    assert "about 0 minutes" in text  # 4 updates at 2 s each, measured on the stored run


def test_profiles():
    assert profiles.resolve_profile("auto") == "cpu"  # the calibrated settings, on any machine
    assert profiles.book_profile("reference") == ("cpu", False)
    assert profiles.book_profile("smoke") == ("smoke", True)
    assert "UNCALIBRATED" in profiles.describe("standard")
    with pytest.raises(ValueError, match="reference trains nothing"):
        profiles.resolve_profile("reference")
    with pytest.raises(ValueError, match="choose one of"):
        profiles.book_profile("gpu")


def test_lookup_finds_the_stored_runs_of_every_reference_sweep():
    """The configs of the staleness, Lopti, semi-online and router-replay sweeps (engine 'auto', resolved when hashed)
    find their stored runs: at least as many found as not (a sweep may list runs not trained yet)."""
    from collections import Counter

    from rlbook.experiments import sweep
    from rlbook.runs import lookup

    for name in ("staleness", "lopti", "semi_online", "router_replay"):
        found = Counter(run is not None for run in lookup(sweep(name, "cpu")))
        assert found[True] >= found[False], (name, found)
