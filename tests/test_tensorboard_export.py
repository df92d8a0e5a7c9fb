"""`rlbook runs --export tensorboard DIR`: stored runs (reference runs included) as TensorBoard event files, with the
tags a TRL run logs where TRL has the quantity."""
import sys

import pytest

from rlbook import cli, runs
from rlbook.experiments import grpo_from_scratch
from rlbook.runs import RunStore
from rlbook.tensorboard_export import write_runs

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
    [folder] = write_runs([stored_run(tmp_path / "runs")], tmp_path / "tb")
    logged = scalars(folder)
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
    assert cli.main(["runs", "--runs-dir", str(tmp_path / "runs"), "--export", "tensorboard", str(tmp_path / "tb")]) == 0
    folders = capsys.readouterr().out.split()
    assert len(folders) == 2 and sum(f.endswith("-reference") for f in folders) == 1
    assert all(scalars(f)["train/reward"] for f in folders)
    assert cli.main(["runs", "--export", "csv", str(tmp_path / "x")]) == 2
    assert "choose one of: tensorboard" in capsys.readouterr().err


def test_missing_tensorboard_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ValueError, match=r'pip install -e "\.\[tensorboard\]"'):
        write_runs([stored_run(tmp_path / "runs")], tmp_path / "tb")
