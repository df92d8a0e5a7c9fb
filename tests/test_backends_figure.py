"""Chapter 1's two-trainer figure and the TRL run's config (rlbook.chapters.backends)."""
import matplotlib
import pytest

matplotlib.use("Agg")

from rlbook.config import RunConfig
from rlbook.chapters.backends import TRL_EXPERIMENT, backends_figure, mean_band, score_table, trl_config
from rlbook.experiments import grpo_from_scratch
from rlbook.runs import RunStore
from rlbook.trl_backend import ENGINE_OPTIONS


def stored(root, config, accuracies):
    run = RunStore(root).create(config)
    for update, acc in enumerate(accuracies):
        run.append({"update": update, "eval_greedy_acc": acc, **({"reward": acc / 2} if update else {})})
    return run


def test_trl_config_is_chapter_1s_learning_setting_with_rlbooks_engine_options_off():
    ours, theirs = grpo_from_scratch("cpu", 2), trl_config("cpu", 2)
    assert theirs.experiment == TRL_EXPERIMENT and theirs.seed == 2
    assert {k: v for k, v in theirs.to_dict().items() if k in ENGINE_OPTIONS} == \
        {k: v for k, v in RunConfig().to_dict().items() if k in ENGINE_OPTIONS}
    same = {k: v for k, v in ours.to_dict().items() if k not in (*ENGINE_OPTIONS, "experiment", "name")}
    assert same == {k: v for k, v in theirs.to_dict().items() if k in same}


def test_figure_draws_each_trainer_as_a_mean_with_its_standard_error(tmp_path):
    rlbook_runs = [stored(tmp_path / "a", grpo_from_scratch("smoke", s), [0.2, 0.4, 0.6]) for s in (0, 1)]
    trl_runs = [stored(tmp_path / "b", trl_config("smoke", s), [0.2, 0.3 + 0.1 * s, 0.5]) for s in (0, 1)]
    updates, mean, se = mean_band(trl_runs, "eval_greedy_acc")
    assert list(updates) == [0, 1, 2] and mean[1] == 0.35 and abs(se[1] - 0.05) < 1e-12 and se[0] == 0
    _, smoothed, _ = mean_band(trl_runs, "eval_greedy_acc", window=2)
    assert list(smoothed) == pytest.approx([0.2, 0.275, 0.425])  # each run's last two values averaged, then the seeds
    fig = backends_figure(rlbook_runs, trl_runs)
    accuracy, reward = fig.axes
    assert [len(ax.lines) for ax in (accuracy, reward)] == [2, 2] and len(accuracy.collections) == 2
    assert list(reward.lines[1].get_xdata()) == [1, 2]  # the base row has no reward
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["rlbook's trainer (2 seeds, mean +- s.e.)", "TRL's GRPOTrainer (2 seeds, mean +- s.e.)"]
    assert accuracy.get_xlabel() == "model updates" and accuracy.get_title() and accuracy.get_ylabel()


def test_score_table_gives_each_trainer_its_seeds_score_and_gain(tmp_path):
    rlbook_runs = [stored(tmp_path / "a", grpo_from_scratch("smoke", s), [0.2, 0.5, 0.5, 0.5]) for s in (0, 1)]
    trl_runs = [stored(tmp_path / "b", trl_config("smoke", s), [0.2, 0.3, 0.3, 0.3 + 0.3 * s]) for s in (0, 1)]
    lines = score_table(rlbook_runs, trl_runs).splitlines()
    assert lines[0] == "| trainer | seeds | score (greedy) | gain over the base |"
    assert lines[2] == "| rlbook's trainer | 0, 1 | 0.500 ± 0.000 | +0.300 ± 0.000 |"
    assert lines[3] == "| TRL's GRPOTrainer | 0, 1 | 0.350 ± 0.050 | +0.150 ± 0.050 |"  # last-3 means 0.3, 0.4
