"""RunStore: atomic writes, torn JSONL lines, lookup by config hash, metadata, isolation of runs, reference runs."""
import json
import os

import pytest
import torch

import rlbook.obtain
import rlbook.storage
import rlbook.trainer
from rlbook.config import RunConfig
from rlbook.obtain import run_or_load
from rlbook.runs import CorruptRunError, Run, RunStore
from rlbook.storage import read_rows, write_atomic, write_json

TINY = dict(experiment="t", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4, total_updates=4,
            eval_every=2, eval_size=8, checkpoint_every=1, max_new_tokens=6)


def tiny(**changes) -> RunConfig:
    return RunConfig(**{**TINY, **changes})


pytestmark = pytest.mark.usefixtures("one_thread")


def snapshot(root):
    """{relative path: bytes} of every file under root."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def fake_run(store: RunStore, config: RunConfig, rows: int, complete: bool) -> Run:
    run = store.create(config)
    for update in range(1, rows + 1):
        run.append({"update": update, "reward": update / 10})
    run.update_meta(complete=complete, updates=rows)
    return run


# ---- atomic writes ----

def test_write_atomic_writes_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "sub" / "meta.json"
    write_atomic(path, "first\n")
    write_atomic(path, "second\n")
    assert path.read_text() == "second\n"
    assert os.listdir(path.parent) == ["meta.json"]
    write_json(path, {"b": 1, "a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2], "b": 1}
    assert path.read_text().endswith("\n") and os.listdir(path.parent) == ["meta.json"]


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_write_atomic_failure_keeps_the_old_file(tmp_path, monkeypatch, failing):
    path = tmp_path / "meta.json"
    write_atomic(path, '{"complete": true}\n')

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(rlbook.storage.os, failing, fail)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, '{"complete": false, "a very long new value": "' + "x" * 10000 + '"}\n')
    monkeypatch.undo()
    assert path.read_text() == '{"complete": true}\n'


def test_write_atomic_failure_removes_its_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "meta.json"
    write_atomic(path, "old\n")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(rlbook.storage.os, "replace", fail)
    with pytest.raises(OSError):
        write_atomic(path, "new\n")
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["meta.json"]


# ---- JSONL rows ----

def test_read_rows_ignores_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert read_rows(path) == []
    path.write_text('{"update": 1}\n{"update": 2, "loss": 0.5}\n{"update": 3, "lo')
    assert read_rows(path) == [{"update": 1}, {"update": 2, "loss": 0.5}]
    path.write_text('{"update": 1}\n{"update": 2}')  # a complete last line without its newline still counts
    assert read_rows(path) == [{"update": 1}, {"update": 2}]


def test_a_copy_names_the_commit_its_sender_gave(tmp_path, monkeypatch):
    monkeypatch.delenv("RLBOOK_GIT_COMMIT", raising=False)
    checkout = rlbook.storage.git_commit()
    monkeypatch.setenv("RLBOOK_GIT_COMMIT", "abc1234")
    assert rlbook.storage.git_commit() == "abc1234" != checkout  # over a stale .git in the copy
    monkeypatch.delenv("RLBOOK_GIT_COMMIT")
    monkeypatch.setattr(rlbook.storage, "REPO_ROOT", tmp_path)  # no git checkout here
    assert rlbook.storage.git_commit() == "unknown"


def test_append_truncate_and_series(tmp_path):
    run = RunStore(tmp_path).create(tiny())
    rows = [{"update": 0, "eval_greedy_acc": 0.25}, {"update": 1, "loss": 0.5},
            {"update": 2, "loss": 0.25, "eval_greedy_acc": 0.5}, {"update": 3, "loss": 0.125, "eval_greedy_acc": None},
            {"update": 4, "loss": 0.0, "eval_greedy_acc": 1.0}]
    for row in rows:
        run.append(row)
    assert run.metrics == rows
    assert (run.path / "metrics.jsonl").read_text().count("\n") == 5
    assert run.series("loss") == ([1, 2, 3, 4], [0.5, 0.25, 0.125, 0.0])
    assert run.series("eval_greedy_acc") == ([0, 2, 4], [0.25, 0.5, 1.0])  # missing and None are skipped
    assert run.series("nothing") == ([], [])
    run.truncate(2)
    assert run.metrics == rows[:3]
    run.truncate(0)
    assert run.metrics == rows[:1]
    run.truncate(-1)
    assert run.metrics == []


def test_metrics_read_from_memory_follow_every_change_to_the_file(tmp_path):
    run = fake_run(RunStore(tmp_path), tiny(), rows=3, complete=False)  # a run in training: its journal grows
    first = run.metrics
    first.clear()  # a caller's list is its own: the next read is whole
    assert [r["update"] for r in run.metrics] == [1, 2, 3]
    path = run.path / "metrics.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"reward": 0.1', b'"reward": 0.9'))  # same size, rewritten at once
    assert run.metrics[0]["reward"] == 0.9
    run.append({"update": 4, "reward": 0.4})
    assert [r["update"] for r in Run(run.path).metrics] == [1, 2, 3, 4]
    path.write_bytes(path.read_bytes().replace(b'"update": 2', b'"update": 1'))
    with pytest.raises(CorruptRunError, match="line 2"):
        run.metrics


def test_a_run_config_read_from_memory_is_a_copy_and_follows_the_file(tmp_path):
    run = RunStore(tmp_path).create(tiny(task_params={"digits": 2}))
    config = run.config
    config.task_params["digits"] = 9  # a caller's config is its own
    config.seed = 7
    assert run.config.task_params == {"digits": 2} and run.config.seed == 0
    write_json(run.path / "config.json", {**tiny(seed=3).to_dict(), "name": run.config.name})
    assert Run(run.path).config.seed == 3
    (run.path / "config.json").write_text('{"preset": "nano-tiny"')
    with pytest.raises(CorruptRunError, match="config.json"):
        run.config


# ---- the store ----

def test_find_by_config_hash_regardless_of_name(tmp_path):
    store = RunStore(tmp_path)
    config = tiny(name="first-name")
    assert store.find(config) is None
    run = store.create(config)
    assert run.path == tmp_path / "t" / f"first-name-{config.hash()}"
    assert store.find(config.replace(name="renamed")).path == run.path
    assert store.find(config.replace(seed=1)) is None
    assert store.find(config.replace(experiment="other")) is None
    assert run.config == config
    with pytest.raises(FileExistsError):
        store.create(config)
    # create writes only the config: train() writes meta.json (environment, complete) when it starts
    assert os.listdir(run.path) == ["config.json"] and run.meta == {} and not run.complete


def test_runs_lists_every_run(tmp_path):
    store = RunStore(tmp_path)
    a = store.create(tiny(experiment="e1", name="a"))
    b = store.create(tiny(experiment="e1", name="b", seed=1))
    c = store.create(tiny(experiment="e2", name="c"))
    (tmp_path / "e2" / "not-a-run").mkdir()
    assert [r.path for r in store.runs()] == [a.path, b.path, c.path]
    assert [r.path for r in store.runs("e1")] == [a.path, b.path]
    assert [r.path for r in store.runs("e3")] == []


def test_default_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBOOK_RUNS", str(tmp_path / "elsewhere"))
    assert RunStore().root == tmp_path / "elsewhere"
    assert RunStore(tmp_path).root == tmp_path


def test_update_meta_merges(tmp_path):
    run = RunStore(tmp_path).create(tiny())
    run.update_meta(complete=False, device="cpu")
    before = run.meta
    assert before == {"complete": False, "device": "cpu"}
    run.update_meta(updates=3, wall_time_s=1.5)
    assert run.meta == {**before, "updates": 3, "wall_time_s": 1.5}
    assert Run(tmp_path / "missing").meta == {} and not Run(tmp_path / "missing").complete


# ---- real runs ----

def test_meta_of_a_finished_run(tmp_path):
    config = tiny()
    run = run_or_load(config, RunStore(tmp_path), progress=False, references=False)
    meta = run.meta
    assert meta["complete"] is True and meta["updates"] == 4
    assert meta["torch"] == torch.__version__
    assert isinstance(meta["device"], str) and meta["device"]
    assert isinstance(meta["git_commit"], str) and meta["git_commit"]
    assert isinstance(meta["wall_time_s"], (int, float)) and 0 <= meta["wall_time_s"] < 600
    assert meta["resumed_at"] is None
    assert {"python", "transformers", "cpu_count", "host"} <= meta.keys()
    assert sorted(os.listdir(run.path)) == ["config.json", "meta.json", "metrics.parquet", "state.safetensors"]  # sealed
    assert json.loads((run.path / "config.json").read_text()) == config.to_dict()


def test_failed_run_leaves_other_runs_untouched(tmp_path, monkeypatch):
    store = RunStore(tmp_path)
    done = run_or_load(tiny(), store, progress=False, references=False)
    fake_run(store, tiny(seed=5), rows=2, complete=False)  # an interrupted run waiting to be resumed
    before = snapshot(tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(rlbook.trainer, "train_update", broken)
    failing = tiny(seed=2, experiment="t")
    with pytest.raises(RuntimeError, match="boom"):
        run_or_load(failing, store, progress=False, references=False)
    after = snapshot(tmp_path)
    new = {path: data for path, data in after.items() if path not in before}
    assert {path: after[path] for path in before} == before
    assert new and all(path.startswith(f"t/run-{failing.hash()}/") for path in new)
    failed = store.find(failing)
    assert not failed.complete and [r["update"] for r in failed.metrics] == [0]  # only the base model's row
    assert store.find(tiny()).path == done.path and done.complete


# ---- reference runs shipped with the book ----

def test_reference_run_is_replayed(tmp_path, monkeypatch):
    reference_root, local_root = tmp_path / "reference", tmp_path / "local"
    monkeypatch.setattr(rlbook.obtain, "reference_root", lambda: reference_root)
    config = tiny()
    reference = fake_run(RunStore(reference_root), config.replace(name="shipped"), rows=4, complete=True)

    def no_training(*args, **kwargs):
        raise AssertionError("a reference run must replay, not train")

    monkeypatch.setattr(rlbook.trainer, "train", no_training)
    replay = run_or_load(config, RunStore(local_root), progress=False)
    assert replay.path == reference.path and replay.metrics == reference.metrics and replay.complete
    assert not local_root.exists() or snapshot(local_root) == {}
    # references=False ignores them; an incomplete reference is not replayed either
    with pytest.raises(AssertionError, match="must replay"):
        run_or_load(config, RunStore(local_root), progress=False, references=False)
    other = tiny(seed=3)
    fake_run(RunStore(reference_root), other, rows=2, complete=False)
    with pytest.raises(AssertionError, match="must replay"):
        run_or_load(other, RunStore(tmp_path / "local2"), progress=False)


def test_local_finished_run_takes_precedence_over_reference(tmp_path, monkeypatch):
    reference_root = tmp_path / "reference"
    monkeypatch.setattr(rlbook.obtain, "reference_root", lambda: reference_root)
    config = tiny()
    fake_run(RunStore(reference_root), config, rows=4, complete=True)
    local = fake_run(RunStore(tmp_path / "local"), config, rows=3, complete=True)
    monkeypatch.setattr(rlbook.trainer, "train", lambda *a, **k: pytest.fail("must not train"))
    assert run_or_load(config, RunStore(tmp_path / "local"), progress=False).path == local.path


@pytest.mark.parametrize("where", ["after-create", "environment"])
def test_run_interrupted_during_create_still_records_its_environment(tmp_path, monkeypatch, where):
    """Interrupted after the run directory exists but before its meta.json: the resumed run records its environment."""
    config = tiny(total_updates=2)
    with monkeypatch.context() as m:
        def interrupted(*args):
            raise KeyboardInterrupt

        if where == "environment":  # train() looks the environment up to write it into meta.json
            m.setattr(rlbook.trainer, "environment", interrupted)
        else:
            create = RunStore.create

            def create_then_interrupt(self, config):
                create(self, config)
                raise KeyboardInterrupt

            m.setattr(RunStore, "create", create_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            run_or_load(config, RunStore(tmp_path), progress=False, references=False)
    found = RunStore(tmp_path).find(config)
    assert found is not None and "device" not in found.meta and not found.complete
    run = run_or_load(config, RunStore(tmp_path), progress=False, references=False)
    assert run.path == found.path
    assert run.complete and [r["update"] for r in run.metrics] == [0, 1, 2]
    assert {"device", "git_commit", "torch"} <= run.meta.keys()


def test_a_result_set_computes_each_result_once_and_is_listed_when_its_record_is_written(tmp_path):
    store, calls = RunStore(tmp_path), []
    results = store.result_set("merges", "trajectory-v1")
    compute = lambda x: calls.append(x) or {"double": 2 * x}
    assert results.cached("grid.json", {"a": {"x": 1}, "b": {"x": 2}}, compute, progress=False) == {
        "a": {"double": 2}, "b": {"double": 4}}
    assert results.cached("grid.json", {"a": {"x": 1}}, compute, progress=False) == {"a": {"double": 2}}
    assert results.cached_one("one.json", {"x": 3}, compute) == {"double": 6} and calls == [1, 2, 3]
    assert store.result_sets("merges") == [] and store.runs() == []  # no record yet; never read as a run
    with pytest.raises(CorruptRunError, match="no result.json"):
        results.record
    copy = results.copy_to(RunStore(tmp_path / "refs").result_set("merges", "seed0"), {"made_by": "this test"})
    assert RunStore(tmp_path / "refs").result_sets("merges") == [copy] and copy.record == {"made_by": "this test"}
    assert sorted(p.name for p in copy.path.iterdir()) == ["grid.json", "one.json", "result.json"]
