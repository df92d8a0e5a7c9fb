"""Issue 38's probes of the run store, as a hostile user or a crash would make them; each failed on f6e21c1.

A pickle payload in a shared run's state.pt never runs (the refusal is one plain line); a complete run whose last row
is torn, or whose rows end elsewhere than meta.json's `updates`, is refused; a run whose meta.json names another
training version is not this code's; temporary files of killed writes are removed when the run resumes; files and
folders take the umask's modes; one corrupt run does not stop `rlbook runs` from listing the others. Also: a kill and
resume gives the journal's exact rows, and a checkpoint's CPU random stream is never put into a generator of another
device.
"""
import builtins
import json
import os
import stat

import pytest
import torch

from rlbook import checkpoint
from rlbook.chapters.lopti import load_trained_policy
from rlbook.cli import main
from rlbook.config import RunConfig
from rlbook.obtain import run_or_load
from rlbook.runs import JOURNAL, CorruptRunError, Run, RunStore, lookup
from rlbook.trainer import TIMING_KEYS
from rlbook.versions import TRAINING_VERSION

TINY = dict(experiment="t", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4, total_updates=4,
            eval_every=2, eval_size=8, checkpoint_every=1, max_new_tokens=6)

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**changes) -> RunConfig:
    return RunConfig(**{**TINY, **changes})


def train(config: RunConfig, root) -> Run:
    return run_or_load(config, RunStore(root), progress=False, references=False)


class Payload:
    """Unpickling this runs code: it writes `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return builtins.exec, (f"open({self.marker!r}, 'w').write('ran')",)


def journal_run(store: RunStore, config: RunConfig, updates: int, **meta) -> Run:
    run = store.create(config)
    for update in range(updates + 1):
        run.append({"update": update, "eval_greedy_acc": 0.1 * update})
    run.update_meta(complete=True, updates=updates, training_version=TRAINING_VERSION, **meta)
    return run


def test_a_pickle_payload_in_a_shared_checkpoint_never_runs(tmp_path):
    marker, config = tmp_path / "ran", tiny()
    run = RunStore(tmp_path / "runs").create(config)
    run.append({"update": 0})
    run.update_meta(complete=False, updates=0)
    torch.save({"update": 0, "model": Payload(marker), "optimizer": {}, "queue": [], "generator": None},
               run.path / "state.pt")
    with pytest.raises(CorruptRunError, match="state.pt") as resumed:
        train(config, tmp_path / "runs")  # resume reads the checkpoint
    with pytest.raises(CorruptRunError, match="state.pt") as read:
        load_trained_policy(run)  # chapter 4 reads a finished run's weights
    assert not marker.exists()
    for error in (resumed.value, read.value):  # one plain line: torch's terminal styling (bold) taken out
        assert "\x1b" not in str(error) and "\n" not in str(error), repr(str(error))


def test_a_complete_run_with_a_torn_last_row_is_refused(tmp_path):
    run = journal_run(RunStore(tmp_path), tiny(), updates=3)
    journal = run.path / JOURNAL
    journal.write_bytes(journal.read_bytes()[:-9])  # the last row lost its end and its newline
    with pytest.raises(CorruptRunError, match="line 4: a torn row"):
        run.metrics


def test_a_complete_run_whose_rows_end_before_its_updates_is_refused(tmp_path):
    run = journal_run(RunStore(tmp_path), tiny(), updates=3)
    run.update_meta(updates=5)
    with pytest.raises(CorruptRunError, match="end at update 3, meta.json says the run made 5"):
        run.metrics
    with pytest.raises(CorruptRunError, match="meta.json says the run made 5"):
        run.columns(["eval_greedy_acc"])


def test_a_run_whose_meta_names_another_training_version_is_not_this_codes(tmp_path, monkeypatch):
    store, config = RunStore(tmp_path), tiny()
    run = journal_run(store, config, updates=config.total_updates)
    run.update_meta(training_version=TRAINING_VERSION - 1)
    assert not run.current and run.training_version == TRAINING_VERSION - 1
    (found,) = lookup([config], tmp_path)
    assert found.path == run.path and not found.current  # shown as older code's, never as this code's result
    with pytest.raises(CorruptRunError, match=f"says training version {TRAINING_VERSION - 1}"):
        train(config, tmp_path)  # not replayed as this code's
    monkeypatch.setattr("rlbook.obtain.reference_root", lambda: tmp_path)  # a shipped reference run: not replayed
    local = run_or_load(config, RunStore(tmp_path / "local"), progress=False)
    assert local.path != run.path and local.current


def test_temporary_files_of_killed_writes_are_removed_on_resume(tmp_path):
    config = tiny()
    run = RunStore(tmp_path).create(config)
    run.update_meta(complete=False)
    leftovers = [run.path / ".meta.json.k1ll3d", run.path / ".metrics.jsonl.x9z", run.path / ".state.safetensors.q"]
    for path in leftovers:
        path.write_text("half")
    train(config, tmp_path)
    assert not any(path.exists() for path in leftovers)
    assert sorted(os.listdir(run.path)) == ["config.json", "meta.json", "metrics.parquet", "state.safetensors"]


def test_files_and_folders_take_the_umask_modes(tmp_path):
    old = os.umask(0o027)
    try:
        run = train(tiny(), tmp_path)
    finally:
        os.umask(old)
    mode = lambda path: stat.S_IMODE(path.stat().st_mode)  # noqa: E731
    assert mode(run.path) == 0o750
    assert {p.name: mode(p) for p in run.path.iterdir()} == dict.fromkeys(os.listdir(run.path), 0o640)


def test_one_corrupt_run_does_not_stop_the_listing(tmp_path, capsys):
    store = RunStore(tmp_path)
    broken = journal_run(store, tiny(name="a-broken"), updates=2)
    (broken.path / "meta.json").write_text('{"complete": tru')
    fine = journal_run(store, tiny(name="b-fine"), updates=2)
    assert main(["runs", "--runs-dir", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert fine.path.name in out and broken.path.name not in out
    assert str(broken.path / "meta.json") in err and len(err.splitlines()) == 1


def test_kill_and_resume_gives_the_journal_rows_exactly(tmp_path, monkeypatch):
    """Unsealed (the table would round statistics to float32), so equality here is of every digit written."""
    monkeypatch.setattr(Run, "seal", lambda self: False)
    config = tiny(total_updates=6, updates_per_step=1, checkpoint_every=2)
    untimed = lambda rows: [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in rows]  # noqa: E731
    reference = untimed(train(config, tmp_path / "ref").metrics)
    original, calls = Run.append, [0]

    def killed_at_update_5(self, row):
        calls[0] += 1
        if calls[0] == 6:
            raise KeyboardInterrupt
        original(self, row)

    with monkeypatch.context() as m:
        m.setattr(Run, "append", killed_at_update_5)
        with pytest.raises(KeyboardInterrupt):
            train(config, tmp_path / "store")
    run = RunStore(tmp_path / "store").find(config)
    assert [r["update"] for r in run.metrics] == [0, 1, 2, 3, 4] and run.read_state()["update"] == 4
    resumed = train(config, tmp_path / "store")
    assert resumed.meta["resumed_at"] == 4 and untimed(resumed.metrics) == reference
    assert (resumed.path / JOURNAL).exists()


def test_a_cpu_random_stream_is_never_put_into_another_devices_generator(tmp_path):
    config = tiny()
    run = train(config, tmp_path)
    state = run.read_state()
    assert state["generator_device"] == "cpu"
    run.write_state({**state, "generator_device": "cuda"})  # as a run made on a GPU would say
    run.update_meta(complete=False)
    with pytest.raises(CorruptRunError, match="random stream is a cuda generator's and this run samples on cpu"):
        train(config, tmp_path)


def test_a_checkpoint_saved_on_an_accelerator_opens_on_the_cpu(tmp_path):
    """The outline records each tensor's device: accelerator tensors go to the device asked (the CPU by default)."""
    from safetensors.torch import save_file

    tree = {"dict": {"w": {"tensor": "0", "device": "cuda"}, "gen": {"tensor": "1", "device": "cpu"}}}
    save_file({"0": torch.ones(2), "1": torch.zeros(3, dtype=torch.uint8)}, tmp_path / checkpoint.STATE,
              metadata={"format": checkpoint.FORMAT, "outline": json.dumps(tree)})
    state = checkpoint.load(tmp_path)
    assert state["w"].device.type == "cpu" and torch.equal(state["w"], torch.ones(2))
    assert checkpoint.load(tmp_path, device="meta")["w"].device.type == "meta"
    assert checkpoint.load(tmp_path, device="meta")["gen"].device.type == "cpu"  # a CPU-saved tensor stays there
