"""Chapter 3's lead figure and fixed-rate verdicts (rlbook.chapters.m2_axis) on synthetic runs."""
import json

import matplotlib
import pytest

from rlbook import stats
from rlbook.chapters import m2_axis, verdicts
from rlbook.config import RunConfig
from rlbook.runs import Run
from rlbook.storage import write_json

matplotlib.use("Agg")


def run(root, name, objective, staleness, seed, m2, clip=0.0, mask=0.0, would_mask=0.0, score=0.6, n=40):
    """A stored run: `staleness` updates on base rollouts (M2 0, nothing removed), then stale batches of the given M2
    and shares; evaluations every 10 updates, flat at `score`."""
    c = RunConfig(experiment="x", name=name, preset="nano-tiny", init="scratch", objective=objective,
                  staleness=staleness, seed=seed, lr=1.25e-4)
    path = root / name
    path.mkdir(parents=True)
    write_json(path / "config.json", c.to_dict())
    rows = [{"update": 0, "eval_greedy_acc": 0.5}]
    for u in range(1, n + 1):
        stale = u > staleness
        rows.append({"update": u, "m2": m2 if stale else 0.0, "clip_frac": clip if stale else 0.0,
                     "mask_frac": mask if stale else 0.0, "removed_frac_m2po": would_mask if stale else 0.0,
                     **({"eval_greedy_acc": score} if u % 10 == 0 else {})})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(path)


def sweep(tmp_path, mask_at_8=0.0002, clip_at_8=0.015):
    runs = []
    for seed in range(3):
        j = seed * 1e-4  # seeds differ a little
        runs += [run(tmp_path, f"g0-{seed}", "grpo", 0, seed, 0.0005, clip=0.0007 + j / 10, score=0.66 + j),
                 run(tmp_path, f"g8-{seed}", "grpo", 8, seed, 0.006, clip=clip_at_8 + j, score=0.66 - j),
                 run(tmp_path, f"m8-{seed}", "m2po", 8, seed, 0.012, mask=mask_at_8 + j / 10, score=0.66),
                 run(tmp_path, f"g32-{seed}", "grpo", 32, seed, 0.05, clip=0.05 + j, would_mask=0.01, score=0.6 - j),
                 run(tmp_path, f"m32-{seed}", "m2po", 32, seed, 0.08, mask=0.02 + j, score=0.62 + j)]
    return runs


def test_fractions_average_the_stale_batches_only(tmp_path):
    r = run(tmp_path, "r", "m2po", 30, 0, 0.08, mask=0.01)  # 10 stale batches of 40 updates
    assert m2_axis.stale_share(r, "mask_frac") == pytest.approx(0.01)  # not 0.0025 (the run-wide mean)
    assert m2_axis.removed_share(r) == pytest.approx(0.01) and m2_axis.m2_over_tau(r) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="no stale batch records 'entropy'"):
        m2_axis.stale_share(r, "entropy")


def test_fixed_rate_verdicts_and_the_prediction(tmp_path):
    runs = sweep(tmp_path)
    on_policy = [r for r in runs if r.config.staleness == 0]
    rows = m2_axis.fixed_rate_signatures(runs, on_policy)
    assert [r.claim.split(":")[0] for r in rows] == ["s = 8"] * 3 + ["s = 32"] * 3
    by = {r.claim: r.verdict for r in rows}
    assert by["s = 8: GRPO clips at least 5x what M2PO masks"] == stats.REPRODUCED  # 1.5% vs 0.02%
    assert by["s = 8: M2PO masks no more than on-policy GRPO clips"] == stats.REPRODUCED  # 0.02% vs 0.07%
    assert by["s = 32: GRPO clips at least 5x what M2PO masks"] == stats.NOT_REPRODUCED  # 5% vs 2%
    assert by["s = 32: staleness costs GRPO"] == stats.REPRODUCED
    assert verdicts.settings_where(rows, "clips at least", stats.REPRODUCED) == "s = 8"
    assert verdicts.settings_where(rows, "masks no more", stats.NOT_REPRODUCED) == "s = 32"
    assert verdicts.settings_where(rows, "masks no more", stats.WITHIN_NOISE) == "no setting"  # prose: "... at no setting"
    held, measured = m2_axis.prediction(runs)
    assert held is True and "3 seeds" in measured
    assert m2_axis.prediction(sweep(tmp_path / "b", mask_at_8=0.001))[0] is False  # masks 0.1% > 0.05%
    assert m2_axis.prediction(runs, staleness=4) == (None, "no runs at s = 4 yet")


def test_the_paper_is_placed_where_our_grpo_batches_clip_as_much(tmp_path):
    runs = sweep(tmp_path)
    x, clip, n = m2_axis.pooled([r for r in runs if r.config.objective == "grpo"], "clip_frac")
    assert n.sum() == 3 * (40 + 32 + 8)  # every stale batch of the 9 GRPO runs, once
    at = m2_axis.paper_position(runs)  # 0.66% lies between the bins that clip 0.07% and 1.5%
    assert 0.0005 / 0.04 < at < 0.006 / 0.04
    assert m2_axis.place([1, 2], [0.1, 0.2], 0.5) is None
    fig = m2_axis.axis_figure(m2_axis.cells(runs), runs)
    assert "drifted" in fig.axes[0].get_title() and "tau" in fig.axes[0].get_xlabel()
    assert m2_axis.table(m2_axis.cells(runs)).count("\n") == 6  # header, rule, 5 cells


def test_batch_tokens_is_the_mean_stale_batch_and_none_without_one():
    class Run:  # a stale run's rows: updates 1-3 at staleness 1, so updates 2 and 3 are stale
        config = type("Config", (), {"staleness": 1})()
        metrics = [{"update": u, "m2": 0.01, "tokens_pos_adv": 100 * u, "tokens_neg_adv": 10, "tokens_zero_adv": 0}
                   for u in (1, 2, 3)]

    assert m2_axis.batch_tokens([Run()]) == 260.0  # (210 + 310) / 2
    assert m2_axis.batch_tokens([]) is None
