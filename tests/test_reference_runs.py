"""bench/reference_runs.py: what a finished reference run ships in data/runs (its checkpoint cut to what the book reads)."""
import json
import sys
from pathlib import Path


from rlbook.chapters.lopti import run_accuracy_by_people
from rlbook.checkpoint import location
from rlbook.config import RunConfig
from rlbook.obtain import run_or_load
from rlbook.runs import RunStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import reference_runs  # noqa: E402

TINY = dict(preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4, total_updates=2, eval_every=2,
            eval_size=8, checkpoint_every=1, max_new_tokens=6)


def trained(tmp_path, experiment, **changes):
    return run_or_load(RunConfig(experiment=experiment, **{**TINY, **changes}), RunStore(tmp_path), progress=False,
                       references=False)


def test_a_run_no_chapter_reads_the_weights_of_ships_no_checkpoint(tmp_path):
    run = trained(tmp_path, "02_drift_ladder")
    assert location(run.path) is not None
    reference_runs.ship(run)
    assert location(run.path) is None and run.complete and len(run.metrics) == 3


def test_a_run_chapter_4_evaluates_by_size_caches_its_accuracy_by_size_then_drops_its_checkpoint(tmp_path):
    run = trained(tmp_path, reference_runs.EVALUATED_AT_SHIP[0], task="knights_knaves",
                  task_params={"num_people": [2, 3]})
    assert location(run.path) is not None
    reference_runs.ship(run)
    assert location(run.path) is None and run.complete
    cached = json.loads((run.path / "accuracy_by_people.json").read_text())  # evaluated once, for the book to read
    assert cached["source"] == "state.pt" and set(cached["by_people"]) <= {"2", "3"}
    assert cached["updates"] == run.meta["updates"]
    assert run_accuracy_by_people(run, compute=False)["by_people"] == {int(n): a for n, a in cached["by_people"].items()}


def test_an_unfinished_run_keeps_its_checkpoint_to_resume_from(tmp_path):
    run = trained(tmp_path, "02_drift_ladder")
    meta = run.meta
    (run.path / "meta.json").write_text(json.dumps({**meta, "complete": False}))
    reference_runs.ship(run)
    assert run.read_state()["optimizer"]


def test_train_and_ship_ships_what_it_trains_and_leaves_a_stored_run_as_committed(tmp_path):
    store = RunStore(tmp_path)
    config = RunConfig(experiment="02_drift_ladder", **TINY)
    run = reference_runs.train_and_ship(config, store)
    assert run.complete and location(run.path) is None
    committed = run_or_load(RunConfig(experiment="02_drift_ladder", seed=1, **TINY), store, progress=False,
                            references=False)
    assert location(committed.path) is not None
    assert reference_runs.train_and_ship(committed.config, store).path == committed.path
    assert location(committed.path) is not None  # stored finished before: untouched


def test_a_shipped_run_keeps_the_columns_its_chapter_reads(tmp_path):
    run = trained(tmp_path, "02_collapse_long")
    rows = run.metrics
    reference_runs.ship(run)
    kept = {"update", *reference_runs.SHIPPED_COLUMNS["02_collapse_long"]}
    assert [row["update"] for row in run.metrics] == [row["update"] for row in rows]
    assert all(set(after) == set(before) & kept for after, before in zip(run.metrics, rows))
    assert any(set(before) - kept for before in rows)  # something was cut
    other = trained(tmp_path, "an_experiment_no_chapter_lists")
    rows = other.metrics
    reference_runs.ship(other)  # an experiment without a list keeps every column
    assert [set(row) for row in other.metrics] == [set(row) for row in rows]


def test_every_shipped_column_list_names_columns_a_run_records(tmp_path):
    run = trained(tmp_path, "02_staleness", objective="m2po")
    recorded = {key for row in run.metrics for key in row}
    named = {c for columns in reference_runs.SHIPPED_COLUMNS.values() for c in columns}
    optional = {"f2", "routing_mismatch", "sample_s", "update_s", "eval_sampled_acc", "entropy_masked"}  # MoE,
    # semi-online, a second evaluation and a mask's entropy: columns of other kinds of run
    assert named - recorded - optional == set()  # a misspelt column would silently keep nothing
