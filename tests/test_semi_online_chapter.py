"""Chapter 7's helpers (rlbook.chapters.semi_online) on synthetic runs: ordering, the score table by hand, the
figures and the explorer; and the chapter's sweep."""
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from rlbook.chapters import semi_online as ch7  # noqa: E402
from rlbook.chapters import verdicts  # noqa: E402
from rlbook.config import RunConfig  # noqa: E402
from rlbook.experiments import semi_online_run, sweep  # noqa: E402
from rlbook.runs import RunStore  # noqa: E402


def synthetic(store, objective, sync, seed, acc, sample_s=0.1, update_s=0.3):
    config = RunConfig(experiment="07_semi_online", name=f"{objective}-{sync}-{seed}", preset="nano-tiny",
                       objective=objective, sync_every=sync, seed=seed, total_updates=4, eval_every=2)
    run = store.create(config)
    lag = lambda u: 0 if sync == 1 else (u - 1) if sync == 0 else (u - 1) % sync
    rows = [{"update": 0, "eval_greedy_acc": acc[0], "eval_sampled_acc": acc[0] / 2}]
    rows += [{"update": u, "policy_lag": lag(u), "sample_s": sample_s, "update_s": update_s, "reward": 0.3,
              "loss": 0.5, **({"eval_greedy_acc": acc[u // 2], "eval_sampled_acc": acc[u // 2] / 2}
                              if u % 2 == 0 else {})} for u in range(1, 5)]
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run.path / "meta.json").write_text(json.dumps({"complete": True, "device": "cpu (test)"}))
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("runs"))
    out = [synthetic(store, "dpo", 0, s, [0.3, 0.3, 0.3]) for s in (0, 1)]
    out += [synthetic(store, "grpo", k, s, [0.3, 0.4, 0.5 + s / 10], sample_s=0.2) for k in (4, 1) for s in (0, 1)]
    return out


def test_settings_are_ordered_grpo_first_then_online_to_offline(runs):
    assert list(ch7.grouped(runs)) == [("grpo", 1), ("grpo", 4), ("dpo", 0)]
    assert [ch7.sync_label(k) for k in (1, 4, 0)] == ["online", "sync every 4", "offline"]


def test_score_table_by_hand(runs):
    table = ch7.score_table(runs).splitlines()
    # grpo online: scores (0.4 + 0.5) / 2 = 0.45 and (0.4 + 0.6) / 2 = 0.5 -> 0.475 ± 0.025, gain +0.175; sampled
    # half of it; lags 0; generation 0.2 s and update 0.3 s per update
    assert table[2] == ("| grpo | online | 2 | 0.475 ± 0.025 | +0.175 ± 0.025 | 0.237 ± 0.012 | 0.0 | 0.200 | "
                        "0.300 |")
    assert table[3].startswith("| grpo | sync every 4 | 2 |") and "| 1.5 |" in table[3]  # lags 0, 1, 2, 3
    assert table[4].startswith("| dpo | offline | 2 | 0.300 ± 0.000 | +0.000 ± 0.000 |")


def test_figures_draw_one_line_per_setting(runs):
    fig = ch7.accuracy_curves(runs)
    assert [ax.get_title() for ax in fig.axes] == ["GRPO: greedy accuracy on the held-out problems",
                                                   "DPO: greedy accuracy on the held-out problems"]
    assert len(fig.axes[0].lines) == 2 and len(fig.axes[1].lines) == 1
    plt.close(fig)
    fig = ch7.lag_figure(runs)
    lags = {line.get_label(): list(line.get_ydata()) for line in fig.axes[0].lines}
    assert lags == {"online": [0, 0, 0, 0], "sync every 4": [0, 1, 2, 3], "offline": [0, 1, 2, 3]}
    assert "first" not in fig.axes[0].get_title()  # the whole run is drawn
    plt.close(fig)
    fig = ch7.lag_figure(runs, updates=2)
    assert fig.axes[0].get_title().endswith("(the first 2 of 4 updates)") and len(fig.axes[0].lines[0].get_xdata()) == 2
    plt.close(fig)
    fig = ch7.score_and_cost_figure(runs)
    left, right = fig.axes
    assert [t.get_text() for t in left.get_xticklabels()] == ["online", "sync every\n4", "offline"]
    assert len(right.patches) == 6  # per setting: a generating and an updating bar
    plt.close(fig)


def test_explorer_lists_objectives_and_sources(runs):
    html = ch7.explorer({"mine": runs, "empty": []})._repr_html_()
    assert "mine" in html and "empty" not in html and "grpo" in html and "dpo" in html
    labelled = ch7.explorer({"mine (seeds 0-1; made by this code)": runs})
    title = next(iter(labelled.views.values()))["layout"]["title"]["text"]
    assert title.endswith(", mine")  # the set's name; its seeds and code stay in the menu


def test_sweep_covers_objectives_sync_intervals_and_seeds():
    configs = sweep("semi_online", "cpu")
    assert {(c.objective, c.sync_every, c.seed) for c in configs} == {
        (o, k, s) for o in ("grpo", "dpo") for k in (1, 10, 100, 0) for s in (0, 1, 2, 3, 4)}
    assert len({c.hash() for c in configs}) == len(configs) == 40
    assert all(c.experiment == "07_semi_online" and c.total_updates == 400 for c in configs)
    with pytest.raises(ValueError, match="grpo, dpo"):
        semi_online_run("cpu", "m2po")


def test_verdicts_read_the_cells(runs):
    signatures = verdicts.semi_online_signatures(runs)
    assert [s.claim for s in signatures] == ["dpo: online beats offline (never synced)",
                                             "grpo: semi-online (sync every 4) matches online",
                                             "grpo: online beats offline (never synced)"]


def test_the_explorer_is_also_a_widget_over_the_same_view(runs):
    explorer = ch7.explorer({"mine": runs})
    source, objective, metric = explorer.widget().children[1].children
    assert [value for _, value in objective.options] == ["grpo", "dpo"]
    objective.value, metric.value = "dpo", "loss"
    assert metric.value == "loss"
    fig = ch7.accuracy_curves([r for r in runs if r.config.sync_every == 0], "loss", 1)
    assert [ax.get_title() for ax in fig.axes] == ["DPO: training loss"]
    plt.close(fig)


def test_sync_scale_reads_the_drift_before_each_sync(tmp_path):
    """Each update's M2 grows with its generator's lag (0.04 per update of lag): synced every 4 updates, the batches
    just before a sync (lag 3) sit at 4 tau; offline, the last tenth of the run (update 4, lag 3) too."""
    store = RunStore(tmp_path)
    made = [synthetic(store, "grpo", k, s, [0.3, 0.4, 0.5]) for k in (1, 4, 0) for s in (0, 1, 2)]
    for run in made:
        rows = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
        rows = [{**r, **({"m2": 0.04 * (r["policy_lag"] + 1)} if r["update"] else {})} for r in rows]
        (run.path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = RunStore(tmp_path).runs("07_semi_online")
    semi = [r for r in runs if r.config.sync_every == 4]
    assert ch7.drift_before_sync(semi[0]) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="no lagging batches"):
        ch7.drift_before_sync(next(r for r in runs if r.config.sync_every == 1))
    table = ch7.sync_scale_table(runs)
    row = "| grpo | sync every 4 | 100.0% (4 of 4) | 1000 | 4.000 ± 0.000 (n=3) | 0.000 ± 0.000 (n=3) |"
    assert row in table  # 4 of 4 updates: the whole of a 1,000-step run
    assert "| grpo | offline | whole run | ∞ (offline) |" in table
    assert "online |" not in table.replace("minus online |", "")  # no row for online itself


def test_the_matched_sweep_syncs_at_the_papers_share_of_the_run():
    """issue 40: the paper's s = 100 as a share of its run (proxy: 1,000 steps, 10%) is 40 of our 400 updates; DPO's
    five seeds first, then GRPO's, each the stored sync-100 cell with only the interval (and its name) changed."""
    configs = sweep("semi_online_matched", "cpu")
    assert [(c.objective, c.seed) for c in configs] == [(o, s) for o in ("dpo", "grpo") for s in range(5)]
    assert {c.sync_every for c in configs} == {40} and {c.total_updates for c in configs} == {400}
    stored = {(c.objective, c.seed): c.to_dict() for c in sweep("semi_online", "cpu") if c.sync_every == 100}
    for c in configs:
        a, b = c.to_dict(), stored[c.objective, c.seed]
        assert {k for k in a if a[k] != b[k]} == {"sync_every", "name"}
    assert {c.sync_every for c in sweep("semi_online_matched", "smoke")} == {2}  # 10% of the smoke profile's 20
