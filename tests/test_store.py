"""The sealed run store: a finished run's rows in one Parquet table give back the journal's rows (rlbook.columnar),
columns read alone, a mixed store (some runs sealed, some not) reads the same, and checkpoints never unpickle."""
import json
import math

import pytest

from rlbook import columnar
from rlbook.config import RunConfig
from rlbook.runs import JOURNAL, SEALED, CorruptRunError, RunStore

TINY = dict(experiment="t", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4, total_updates=4,
            eval_every=2, eval_size=8, checkpoint_every=1, max_new_tokens=6)


def tiny(**changes) -> RunConfig:
    return RunConfig(**{**TINY, **changes})


def rows_of_every_kind() -> list[dict]:
    """Row 0 (evaluation only), training rows with nulls, nested bins, a key absent from some rows and null in
    others, short decimals, long statistics, a value of mixed kinds (stored as JSON text) and the evaluation rows."""
    rows = [{"update": 0, "eval_greedy_acc": 0.46, "eval_sampled_acc": 0.3265}]
    for update in range(1, 7):
        row = {"update": update, "step": update, "lr": 0.0005, "reward": 0.3515624701976776,
               "entropy": 0.5752858224132835 / update, "m2": 3.2676706868805814e-13 * update,
               "entropy_clipped": None if update % 2 else 0.1 * update, "flag": update % 3 == 0, "name": f"r{update}",
               "mixed": 1 if update % 2 else 1.5, "nested_mixed": {"a": update} if update % 2 else {"b": [update]},
               "ratio_bins": {"edges": [0.0, 0.02, None], "count": [update, 0],
                              "entropy": [0.5752858224132835, None]},
               "wall_time_s": 2.6646485328674316 * update}
        if update % 3 == 0:
            row.update(eval_greedy_acc=0.5 + update / 1000, eval_sampled_acc=0.47)
        rows.append(row)
    return rows


def stored_run(store: RunStore, rows: list[dict], complete: bool = True, **changes):
    run = store.create(tiny(**changes))
    for row in rows:
        run.append(row)
    run.update_meta(complete=complete, updates=rows[-1]["update"])
    return run


def test_a_sealed_run_gives_back_the_journal_rows(tmp_path):
    rows = rows_of_every_kind()
    run = stored_run(RunStore(tmp_path), rows)
    assert run.metrics == rows
    assert run.seal() and not (run.path / JOURNAL).exists() and (run.path / SEALED).exists()
    back = run.metrics
    assert len(back) == len(rows) and all(map(columnar.equal_at_precision, rows, back))
    assert [list(row) for row in back] == [list(row) for row in rows]  # the same keys in the same order
    assert "entropy_clipped" not in back[0] and back[1]["entropy_clipped"] is None  # absent stays absent
    for stored, read in zip(rows[1:], back[1:]):  # short decimals, ints, text, flags, mixed kinds: exact
        assert {k: read[k] for k in ("lr", "step", "name", "flag", "mixed", "nested_mixed", "reward")} == \
            {k: stored[k] for k in ("lr", "step", "name", "flag", "mixed", "nested_mixed", "reward")}
        assert type(read["mixed"]) is type(stored["mixed"]) and read["ratio_bins"]["edges"] == [0.0, 0.02, None]
        assert read["entropy"] == columnar.float32(stored["entropy"]) != stored["entropy"]  # a statistic: float32
    assert [r.get("eval_greedy_acc") for r in back] == [r.get("eval_greedy_acc") for r in rows]
    assert not run.seal()  # sealed once


def test_columns_read_alone_match_the_rows(tmp_path):
    store = RunStore(tmp_path)
    journal, sealed = stored_run(store, rows_of_every_kind()), stored_run(store, rows_of_every_kind(), seed=1)
    sealed.seal()
    keys = ["update", "eval_greedy_acc", "ratio_bins", "entropy_clipped", "nested_mixed", "never_recorded"]
    for run in (journal, sealed):
        rows = run.metrics
        assert run.columns(keys) == {key: [row.get(key) for row in rows] for key in keys}


def test_a_mixed_store_lists_and_finds_sealed_and_journal_runs_alike(tmp_path):
    store = RunStore(tmp_path)
    runs = [stored_run(store, rows_of_every_kind(), seed=seed) for seed in range(3)]
    runs[1].seal()
    assert [run.path for run in store.runs("t")] == sorted(run.path for run in runs)
    assert store.find(tiny(seed=1)).metrics == runs[1].metrics and store.find(tiny(seed=2)).metrics == runs[2].metrics
    assert len(store.as_shown("t")) == 3


def test_only_a_complete_run_is_sealed_and_a_killed_seal_is_redone(tmp_path):
    store = RunStore(tmp_path)
    training = stored_run(store, rows_of_every_kind(), complete=False)
    with pytest.raises(ValueError, match="not complete"):
        training.seal()
    run = stored_run(store, rows_of_every_kind(), seed=1)
    (run.path / SEALED).write_bytes(b"half a table")  # killed after writing the table, before removing the journal
    assert run.seal() and not (run.path / JOURNAL).exists()
    assert all(map(columnar.equal_at_precision, rows_of_every_kind(), run.metrics))


def test_a_damaged_table_is_named(tmp_path):
    run = stored_run(RunStore(tmp_path), rows_of_every_kind())
    run.seal()
    table = run.path / SEALED
    table.write_bytes(table.read_bytes()[: table.stat().st_size // 2])
    with pytest.raises(CorruptRunError, match=str(table)):
        run.metrics
    with pytest.raises(CorruptRunError, match=str(table)):
        run.columns(["update"])


def test_float_precision_is_chosen_per_column():
    import pyarrow as pa

    assert columnar.float_type([0.5, 0.3515624701976776]) == pa.float32()  # float32 gives them back
    assert columnar.float_type([0.46, 0.3265, 0.0005]) == pa.float64()  # short decimals float32 would change
    assert columnar.float_type([0.5752858224132835, 0.46]) == pa.float32()  # statistics: 7 digits
    assert columnar.float_type([1e300, 0.1234567891234]) == pa.float64()  # beyond float32's range
    assert columnar.equal_at_precision(math.nan, columnar.float32(math.nan))
    assert not columnar.equal_at_precision({"a": 1}, {"a": 1.0}) and not columnar.equal_at_precision([1], [1, 2])
    assert json.loads(json.dumps(columnar.decode(columnar.encode([{"update": 0, "x": math.inf}]), "t")))[0]["x"] == \
        math.inf


def test_a_table_cut_to_some_columns_keeps_every_row_and_their_values_exactly(tmp_path):
    run = stored_run(RunStore(tmp_path), rows_of_every_kind())
    run.seal()
    before, size = run.metrics, (run.path / SEALED).stat().st_size
    keep = ("eval_greedy_acc", "ratio_bins", "mixed")
    saved = run.keep_columns(keep)
    after = run.metrics
    assert saved == size - (run.path / SEALED).stat().st_size > 0
    assert [row["update"] for row in after] == [row["update"] for row in before]
    assert all(set(a) == {k for k in b if k in {"update", *keep}} for a, b in zip(after, before))
    assert all(columnar.identical(a[k], b[k]) for a, b in zip(after, before) for k in a)  # bit for bit, NaN too
    assert run.keep_columns(keep) == 0  # nothing left to cut


def test_cutting_a_table_refuses_a_journal_and_restores_a_table_that_reads_back_wrong(tmp_path, monkeypatch):
    run = stored_run(RunStore(tmp_path), rows_of_every_kind())
    with pytest.raises(ValueError, match="not sealed"):
        run.keep_columns(["reward"])
    run.seal()
    table = (run.path / SEALED).read_bytes()
    original = columnar.encode
    monkeypatch.setattr(columnar, "encode", lambda rows: original([{**row, "reward": 0.5} for row in rows]))
    with pytest.raises(CorruptRunError, match="restored"):
        run.keep_columns(["reward"])
    assert (run.path / SEALED).read_bytes() == table
