"""`rlbook runs --export tensorboard DIR`: stored runs (reference runs included) as TensorBoard event files, with the
tags a TRL run logs where TRL has the quantity; exporting again writes only the runs that changed, and an unreadable
run or a folder this export did not write is left as it was."""
import sys

import pytest

from rlbook import cli, runs
from rlbook.experiments import grpo_from_scratch
from rlbook.runs import RunStore
from rlbook.tensorboard_export import STAMP, write_runs

pytest.importorskip("tensorboard")

ROWS = [{"update": 0, "eval_greedy_acc": 0.25},
        {"update": 1, "reward": 0.5, "zero_std_frac": 0.125, "response_len": 4.0, "m2": 0.01, "clip_frac_low": 0.0,
         "ratio_bins": {"edges": [0.0, None]}, "entropy_clipped": None},
        {"update": 2, "reward": 0.75, "zero_std_frac": 0.25, "response_len": 3.5, "m2": 0.02, "eval_greedy_acc": 0.5}]


def stored_run(root, seed=0):
    run = RunStore(root).create(grpo_from_scratch("smoke", seed))
    for row in ROWS:
        run.append(row)
    return run


def scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_metrics_under_trls_tags_and_rlbooks_own(tmp_path):
    [written] = write_runs([stored_run(tmp_path / "runs")], tmp_path / "tb")
    assert written.status == "written"
    logged = scalars(written.folder)
    assert logged["train/reward"] == [(1, 0.5), (2, 0.75)]  # TRL's names for TRL's quantities
    assert logged["train/frac_reward_zero_std"] == [(1, 0.125), (2, 0.25)]
    assert logged["train/completions/mean_length"] == [(1, 4.0), (2, 3.5)]
    assert logged["train/clip_ratio/low_mean"] == [(1, 0.0)]
    assert logged["eval/greedy_acc"] == [(0, 0.25), (2, 0.5)]  # transformers' eval/ prefix
    assert [v for _, v in logged["train/m2"]] == pytest.approx([0.01, 0.02])  # rlbook's own quantity, its own name
    assert not any("ratio_bins" in tag or "entropy_clipped" in tag for tag in logged)


def test_cli_writes_stored_and_reference_runs(tmp_path, monkeypatch, capsys):
    stored_run(tmp_path / "runs", seed=0)
    stored_run(tmp_path / "reference", seed=1)
    monkeypatch.setattr(runs, "reference_root", lambda: tmp_path / "reference")
    monkeypatch.setattr("rlbook.tensorboard_export.reference_root", lambda: tmp_path / "reference")
    exporting = ["runs", "--runs-dir", str(tmp_path / "runs"), "--export", "tensorboard", str(tmp_path / "tb")]
    assert cli.main(exporting) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["written", "written"]
    folders = [line.split()[1] for line in lines]
    assert sum(f.endswith("-reference") for f in folders) == 1
    assert all(scalars(f)["train/reward"] for f in folders)
    assert cli.main(["runs", "--export", "csv", str(tmp_path / "x")]) == 2
    assert "choose one of: tensorboard" in capsys.readouterr().err


def test_missing_tensorboard_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ValueError, match=r'pip install -e "\.\[tensorboard\]"'):
        write_runs([stored_run(tmp_path / "runs")], tmp_path / "tb")


def test_exporting_again_writes_only_what_changed(tmp_path):
    run, other = stored_run(tmp_path / "runs", seed=0), stored_run(tmp_path / "runs", seed=1)
    first = write_runs([run, other], tmp_path / "tb")
    assert [w.status for w in write_runs([run, other], tmp_path / "tb")] == ["unchanged", "unchanged"]
    run.append({"update": 3, "reward": 1.0})
    assert [w.status for w in write_runs([run, other], tmp_path / "tb")] == ["rewritten", "unchanged"]
    assert scalars(first[0].folder)["train/reward"] == [(1, 0.5), (2, 0.75), (3, 1.0)]  # each point once
    assert len(list(first[0].folder.glob("events.out.tfevents.*"))) == 1


def test_an_unreadable_run_or_a_foreign_folder_is_left_alone(tmp_path, capsys, monkeypatch):
    run = stored_run(tmp_path / "runs")
    with open(run.path / "metrics.jsonl", "a") as journal:
        journal.write("{not json\n")
    [failed] = write_runs([run], tmp_path / "tb")
    assert failed.status == "failed" and "metrics.jsonl" in failed.reason
    assert not any((tmp_path / "tb").rglob("events.out.tfevents.*"))  # no partial event file
    foreign = tmp_path / "tb2" / run.path.parent.name / run.path.name
    foreign.mkdir(parents=True)
    (foreign / "mine.txt").write_text("the reader's")
    monkeypatch.setattr(runs, "reference_root", lambda: tmp_path / "none")  # no reference runs
    monkeypatch.setattr("rlbook.tensorboard_export.reference_root", lambda: tmp_path / "none")
    [refused] = write_runs([stored_run(tmp_path / "runs2")], tmp_path / "tb2")
    assert refused.status == "failed" and f"no {STAMP}" in refused.reason
    assert [p.name for p in foreign.iterdir()] == ["mine.txt"]
    exporting = ["runs", "--runs-dir", str(tmp_path / "runs"), "--export", "tensorboard", str(tmp_path / "tb")]
    assert cli.main(exporting) == 2
    assert "1 of 1 runs were not exported" in capsys.readouterr().err
