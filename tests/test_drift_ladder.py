"""The drift ladder's analysis (rlbook.chapters.drift_ladder) on synthetic runs with known answers."""
import json

import matplotlib
import pytest

from rlbook import stats
from rlbook.chapters import drift_ladder, m2po_variants
from rlbook.config import RunConfig
from rlbook.runs import Run, write_json

matplotlib.use("Agg")


def make_run(root, name, final, lag1_m2=0.0, clip=0.0, mask=0.0, removed=None, **config):
    """A stored run: base 0.4, then four updates per step (policy_lag 0-3) over 3 steps, evaluated at each step's end
    (the last three evaluations all `final`)."""
    c = RunConfig(experiment="x", name=name, preset="nano-tiny", init="scratch", updates_per_step=4,
                  prompts_per_step=16, **config)
    path = root / name
    path.mkdir()
    write_json(path / "config.json", c.to_dict())
    rows = [{"update": 0, "eval_greedy_acc": 0.4}]
    for update in range(1, 13):
        row = {"update": update, "policy_lag": c.staleness + (update - 1) % 4, "m2": lag1_m2 * (1 + (update - 1) % 4),
               "clip_frac_low": clip / 2, "clip_frac_high": clip / 2, "mask_frac": mask}
        for variant, (share, entropy) in (removed or {}).items():
            row[f"removed_frac_{variant}"], row[f"entropy_removed_{variant}"] = share, entropy
        if update % 4 == 0:
            row["eval_greedy_acc"] = final
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Run(path)


def rung(root, lr, staleness, drift, on_policy, grpo, m2po, jitter=(0.0, 0.004, -0.004), mask=0.01):
    runs = []
    for role, objective, s, final in (("o", "grpo", 0, on_policy), ("g", "grpo", staleness, grpo),
                                      ("m", "m2po", staleness, m2po), ("n", "no_clip", staleness, grpo - 0.05)):
        runs += [make_run(root, f"{role}-{lr}-{i}", final + j, lag1_m2=drift, lr=lr, staleness=s, objective=objective,
                          seed=i, clip=0.02 if objective == "grpo" else 0.0, mask=mask if objective == "m2po" else 0.0)
                 for i, j in enumerate(jitter)]
    return runs


def test_drift_is_read_off_the_updates_one_update_old(tmp_path):
    run = make_run(tmp_path, "r", 0.5, lag1_m2=0.001, objective="grpo")
    assert drift_ladder.drift(run) == pytest.approx(0.002)  # lag 1 rows carry 2 x lag1_m2 in this fixture


def test_share_and_trend_when_m2po_recovers_more_at_smaller_drift(tmp_path):
    runs = (rung(tmp_path, 1e-3, 24, 1e-2, 0.60, 0.50, 0.52)  # recovers 20%
            + rung(tmp_path, 5e-4, 48, 1e-3, 0.60, 0.50, 0.55)  # 50%
            + rung(tmp_path, 2.5e-4, 96, 1e-4, 0.60, 0.50, 0.58))  # 80%
    ladder = drift_ladder.rungs(runs)
    assert [g.lr for g in ladder] == [1e-3, 5e-4, 2.5e-4] and all(g.complete for g in ladder)
    shares = [drift_ladder.share_estimate(g).mean for g in ladder]
    assert shares == pytest.approx([0.2, 0.5, 0.8], abs=1e-9)
    trend = drift_ladder.share_trend(ladder)
    assert trend.mean == pytest.approx(-0.3, abs=1e-9) and 0 < trend.se < 0.1
    found = drift_ladder.signatures(ladder)
    assert found[-1].verdict == stats.REPRODUCED  # the share rises as the drift falls: the paper's direction
    assert [s.verdict for s in found[:3]] == [stats.REPRODUCED, stats.REPRODUCED, stats.NOT_REPRODUCED]
    rise, fall = found[3:5]  # no trust region, 0.05 below GRPO and flat: slower than the trust region, no collapse
    assert rise.claim.startswith("lr 1e-3, s = 24: b. Without a trust region") and "prosperity" in rise.claim
    assert (rise.verdict, fall.verdict) == (stats.NOT_REPRODUCED, stats.NOT_REPRODUCED)
    table = drift_ladder.rung_table(ladder)
    assert table.count("\n") == 4 and "0.80 ±" in table and "e-0" not in table  # 1.0e-2, not 1.0e-02
    clip_vs_mask = drift_ladder.token_signatures(ladder)  # the fixture: GRPO clips 2%, M2PO masks 1%, jitter-free
    assert [s.verdict for s in clip_vs_mask[:2]] == [stats.NOT_REPRODUCED, stats.REPRODUCED]  # 2x < 5x; 1% < 2%
    tokens = drift_ladder.token_table(ladder)
    assert tokens.count("\n") == 4 and "2.00 ± 0.00%" in tokens and "1.00 ± 0.00%" in tokens


@pytest.mark.parametrize("masks, reading", [
    ((0.03, 0.03, 0.01), "it fails on the 2 fastest rungs and holds on the 1 slowest, the pattern the account predicts"),
    ((0.03, 0.03, 0.03), "it holds on none of the 3 rungs: M2PO masks 3.00% of tokens at the fastest rung and 3.00% "
                         "at the slowest; on-policy GRPO clips 2.00% and 2.00%. So the mask does not shrink"),
    ((0.01, 0.03, 0.03), "it holds on 1 of the 3 rungs, not only on the slow ones")])
def test_the_mask_account_reads_which_rungs_hold(tmp_path, masks, reading):
    """M2PO masking no more than on-policy GRPO clips (2% in the fixture) should fail fast and hold slow."""
    runs = [run for lr, s, mask in zip((1e-3, 5e-4, 2.5e-4), (24, 48, 96), masks)
            for run in rung(tmp_path, lr, s, 1e-3, 0.60, 0.50, 0.55, mask=mask)]
    assert drift_ladder.mask_account(drift_ladder.rungs(runs)).startswith(reading)
    assert drift_ladder.mask_account([]).startswith("cannot be read yet")


def test_a_rung_whose_stale_runs_are_not_stored_yet_keeps_its_staleness(tmp_path):
    class Asked(list):  # a RunSet: the stored runs, and the configs asked for
        configs = []

    runs = Asked(r for r in rung(tmp_path, 1e-4, 96, 2e-4, 0.6, 0.5, 0.55) if r.config.staleness == 0)
    Asked.configs = [r.config for r in runs] + [r.config.replace(staleness=96, objective="m2po") for r in runs]
    (partial,) = drift_ladder.rungs(runs)
    assert partial.staleness == 96 and partial.grpo == [] and not partial.complete and len(partial.on_policy) == 3
    one_seed = drift_ladder.Rung(1e-4, 96, partial.on_policy, partial.on_policy[:1], [], [])
    row = drift_ladder.rung_table([one_seed]).splitlines()[-1].split(" | ")
    assert row[4] == "0.600 (1 seed)" and row[5] == "–"  # GRPO at s: one seed, no standard error; M2PO: none


def test_a_flat_share_is_no_trend_and_an_incomplete_rung_says_so(tmp_path):
    runs = (rung(tmp_path, 1e-3, 24, 1e-2, 0.60, 0.50, 0.55, jitter=(0.0, 0.03, -0.03))
            + rung(tmp_path, 5e-4, 48, 1e-3, 0.60, 0.50, 0.55, jitter=(0.0, 0.03, -0.03))
            + rung(tmp_path, 2.5e-4, 96, 1e-4, 0.60, 0.50, 0.55, jitter=(0.0, 0.03, -0.03)))
    assert drift_ladder.signatures(drift_ladder.rungs(runs))[-1].verdict == stats.WITHIN_NOISE
    partial = drift_ladder.rungs([r for r in runs if not (r.config.lr == 1e-3 and r.config.objective == "m2po")])
    assert not partial[0].complete
    assert drift_ladder.signatures(partial)[0].verdict == "no runs"
    assert "at least 3 complete rungs" in drift_ladder.signatures(partial)[-1].observed


def test_figures_and_variant_table_draw_from_the_runs(tmp_path):
    runs = (rung(tmp_path, 1e-3, 24, 1e-2, 0.60, 0.50, 0.52) + rung(tmp_path, 5e-4, 48, 1e-3, 0.60, 0.50, 0.55)
            + rung(tmp_path, 2.5e-4, 96, 1e-4, 0.60, 0.50, 0.58))
    ladder = drift_ladder.rungs(runs)
    for fig in (drift_ladder.share_figure(ladder), drift_ladder.fractions_figure(ladder)):
        ax = fig.axes[0]
        assert ax.get_xscale() == "log" and not ax.texts  # no label floats beside a point (they collided)
        ticks = [t.get_text() for t in ax.get_xticklabels()]  # each rung under its measured drift
        assert ticks[0].splitlines()[1:] == ["lr 1e-3", "s = 24"] and len(ticks) == 3
    assert len(drift_ladder.share_figure(ladder).axes[0].lines) >= 3
    assert drift_ladder.fractions_figure(ladder).axes[0].get_yscale() == "log"
    removed = {"m2po": (0.01, 1.5), "m2po_cap": (0.02, 1.2), "m2po_areal": (0.05, 0.9)}
    same = [make_run(tmp_path, f"g-shadow-{i}", 0.5, removed=removed, objective="grpo", staleness=4, seed=i)
            for i in range(3)]
    shares = m2po_variants.variant_removals(same)
    assert shares["m2po_areal"][0].mean == pytest.approx(0.05) and shares["m2po"][1].mean == pytest.approx(1.5)
    table = m2po_variants.variants_table(shares, {"m2po": ladder[0].m2po})
    assert "5.00% ± 0.00" in table and table.count("\n") == 4
