"""Chapter 1 / 2 / 3 figures (rlbook.chapters), grouping helpers, tables, explorers, log-axis ticks and the saved
files of a figure, on small synthetic runs (no training)."""
import json
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402
import pytest  # noqa: E402

from rlbook import stats  # noqa: E402
from rlbook.chapters import clip_vs_mask, grpo, run_groups, staleness, style  # noqa: E402
from rlbook.config import RunConfig  # noqa: E402
from rlbook.runs import RunStore  # noqa: E402

EDGES = [0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, None]
UPDATES = 24


def synthetic_rows(staleness, acc, clip, mask, rewards):
    """Row 0 (base model) and UPDATES update rows; eval at updates 12 and 24: `acc` = [base, @12, @24]; the reward
    of a batch: rewards(version of the policy that sampled it)."""
    rows = [{"update": 0, "eval_greedy_acc": acc[0], "eval_sampled_acc": acc[0] / 2}]
    for u in range(1, UPDATES + 1):
        lag = u - 1 if u <= staleness + 4 else staleness + (u - 1) % 4  # the trainer's FIFO, 4 updates per batch
        row = {"update": u, "policy_lag": lag, "reward": rewards(u - 1 - lag), "clip_frac": clip, "mask_frac": mask,
               "entropy": 1.0, "entropy_clipped": 2.0 if clip else None, "entropy_masked": 3.0 if mask else None,
               "entropy_kept": 0.5, "m2": 0.1 * u, "m2_kept": 0.01 * u, "tr_frac": 0.3, "grad_norm": float(u),
               "ratio_bins": {"edges": EDGES, "count": [4, 0, 0, 0, 2, 2, 0, 0, 0],
                              "entropy": [0.2, None, None, None, 1.0, 2.0, None, None, None]}}
        if u % 12 == 0:
            row.update(eval_greedy_acc=acc[u // 12], eval_sampled_acc=acc[u // 12] / 2)
        rows.append(row)
    return rows


def make_run(store, objective, staleness, seed, acc, clip=0.0, mask=0.0, tau=None, rewards=lambda v: 0.2 + v / 100):
    params = {} if tau is None else {"tau": tau}
    config = RunConfig(experiment="02_staleness", name=f"{objective}-s{staleness}-seed{seed}-tau{tau}",
                       preset="nano-tiny", objective=objective, staleness=staleness, updates_per_step=4, seed=seed,
                       objective_params=params, total_updates=UPDATES, eval_every=12)
    run = store.create(config)  # writes config.json
    rows = synthetic_rows(staleness, acc, clip, mask, rewards)
    (run.path / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run.path / "meta.json").write_text(json.dumps({"complete": True, "device": "cpu (test)", "wall_time_s": 1.0}))
    return run


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """grpo s=0, grpo s=4, no_clip s=4, m2po s=4 with two seeds each, and m2po over three taus at s=4."""
    store = RunStore(tmp_path_factory.mktemp("runs"))
    runs = []
    for seed in (0, 1):
        d = 0.02 * seed
        runs += [make_run(store, "grpo", 0, seed, [0.3, 0.4, 0.5 + d], clip=0.01),
                 make_run(store, "grpo", 4, seed, [0.3, 0.35, 0.4 + d], clip=0.05),
                 make_run(store, "no_clip", 4, seed, [0.3, 0.45, 0.0], rewards={0: 0.3, 4: 0.5, 8: 0.6, 12: 0.2, 16: 0.0}.get
                          if seed == 0 else lambda v: 0.3),  # seed 0: prosperity before collapse
                 make_run(store, "m2po", 4, seed, [0.3, 0.4, 0.55 + d], mask=0.02)]
    taus = [make_run(store, "m2po", 4, 0, [0.3, 0.3, acc], mask=0.02, tau=tau)
            for tau, acc in ((0.005, 0.2), (0.04, 0.5), (0.16, 0.1))]
    return runs, taus


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def visible_lines(ax):
    return [line for line in ax.lines if line.get_linestyle() != "None"]


def test_grouping_and_selection(sweep):
    runs, taus = sweep
    groups = run_groups.group_runs(runs)
    assert list(groups) == [("grpo", 0), ("grpo", 4), ("no_clip", 4), ("m2po", 4)]
    assert all(len(seeds) == 2 for seeds in groups.values())
    assert list(run_groups.group_runs(taus, key=run_groups.tau_of)) == [0.005, 0.04, 0.16]
    assert len(run_groups.select(runs, "grpo", "max")) == 2
    assert run_groups.select(runs, staleness="max")[0].config.staleness == 4
    assert run_groups.tau_of(runs[0]) == 0.04 and run_groups.run_label(taus[0]) == "m2po s=4 tau=0.005 seed 0"
    assert clip_vs_mask.removal_key("m2po") == "mask_frac" and clip_vs_mask.removal_key("grpo") == "clip_frac"


def test_series_helpers(sweep):
    runs, _ = sweep
    grpo0 = run_groups.select(runs, "grpo", 0)
    updates, mean, lo, hi = run_groups.aggregate(grpo0, "eval_greedy_acc")
    assert updates == [0, 12, 24] and mean[-1] == pytest.approx(0.51) and (lo[-1], hi[-1]) == (0.5, 0.52)
    assert run_groups.smooth([1, None, 3, 5], 2) == [1, 1, 3, 4]
    assert run_groups.mean_of(grpo0[0], "clip_frac") == pytest.approx(0.01)
    versions, rewards = staleness.batch_rewards(run_groups.select(runs, "grpo", 4)[0])
    assert versions == [0, 4, 8, 12, 16] and rewards == pytest.approx([0.2, 0.24, 0.28, 0.32, 0.36])
    assert staleness.batch_rewards(grpo0[0])[0] == [0, 4, 8, 12, 16, 20]  # on-policy: every batch a new policy


def test_grad_clip_share_counts_updates_above_the_runs_max_grad_norm(sweep):
    runs, _ = sweep
    assert runs[0].config.max_grad_norm == 1.0  # the synthetic rows' gradient norm is the update: 1, 2, ..., 24
    assert staleness.grad_clip_share(runs) == pytest.approx(23 / 24)
    assert staleness.grad_clip_share([]) is None


def test_token_statistics(sweep):
    runs, _ = sweep
    assert clip_vs_mask.removed_entropy(run_groups.select(runs, "grpo", 0)[0]) == pytest.approx((1.0, 2.0, 0.5))
    assert clip_vs_mask.removed_entropy(run_groups.select(runs, "m2po", 4)[0]) == pytest.approx((1.0, 3.0, 0.5))
    names, counts, entropy, edges = clip_vs_mask.pooled_ratio_bins(run_groups.select(runs, "grpo", 0), 1, 4)
    assert names[0] == "0-0.02" and names[-1] == ">1" and edges == EDGES
    assert counts.tolist() == [32, 0, 0, 0, 16, 16, 0, 0, 0]  # 2 runs x 4 updates
    assert entropy[0] == pytest.approx(0.2) and entropy[5] == pytest.approx(2.0) and math.isnan(entropy[1])
    with pytest.raises(ValueError):
        clip_vs_mask.pooled_ratio_bins(runs[0], 100)


def test_accuracy_figures(sweep):
    runs, _ = sweep
    fig = staleness.accuracy_curves(runs)
    assert [ax.get_title() for ax in fig.axes] == ["GRPO", "no clip", "M2PO"]
    assert [len(ax.lines) for ax in fig.axes] == [2, 1, 1]  # one line per staleness
    assert all(len(ax.collections) == len(ax.lines) for ax in fig.axes)  # two seeds: a min-max band each
    fig = staleness.final_vs_staleness(runs)
    assert len(fig.axes[0].containers) == 3  # error bars per objective
    scores = [stats.estimate([stats.score(r) for r in run_groups.select(runs, "grpo", s)]).mean for s in (0, 4)]
    assert fig.axes[0].containers[0].lines[0].get_ydata().tolist() == pytest.approx(scores)
    table = staleness.score_table(runs).splitlines()
    assert table[0] == "| objective | s = 0 | s = 4 |" and table[2].startswith(f"| grpo | {scores[0]:.3f} ± ")
    assert table[3].startswith("| no_clip | - | ")  # no run of this cell
    fig = staleness.prosperity_before_collapse(run_groups.select(runs, "no_clip", "max"))
    assert [len(visible_lines(ax)) for ax in fig.axes] == [3, 3]  # two seeds (thin) and their mean per panel
    assert [len(ax.lines) for ax in fig.axes] == [4, 4]  # + the mean's best point, starred


def test_collapse_anatomy_draws_each_run_per_block_of_updates(sweep):
    runs, _ = sweep
    fig = staleness.collapse_anatomy(run_groups.select(runs, "no_clip", "max"), block=10)
    accuracy, grad_norm, m2 = fig.axes
    assert [len(ax.lines) for ax in fig.axes] == [2, 2, 2]  # one line per run (seed) in each panel
    assert list(grad_norm.lines[0].get_ydata()) == [10.0, 20.0, 24.0]  # the largest per block of 10 of 24 updates
    assert list(m2.lines[0].get_xdata()) == [10, 20, 24]
    assert m2.lines[0].get_ydata()[0] == pytest.approx(0.55)  # the mean of 0.1 ... 1.0
    assert grad_norm.get_yscale() == m2.get_yscale() == "log"
    labels = lambda ax: [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    finer = staleness.collapse_anatomy(run_groups.select(runs, "no_clip", "max"), block=2)  # 2 to 24: a decade inside
    for figure in (fig, finer):
        figure.canvas.draw()
        for ax in figure.axes[1:]:  # a few labelled ticks, never crowded, whether or not the axis spans a decade
            assert 2 <= len(labels(ax)) <= style.MAX_LOG_LABELS, labels(ax)
    assert list(accuracy.lines[1].get_ydata()) == [0.3, 0.45, 0.0]


def test_final_vs_m2_places_each_setting_at_its_measured_drift(sweep):
    runs, _ = sweep
    fig = staleness.final_vs_m2(runs)
    ax = fig.axes[0]
    assert len(ax.containers) == 3 and ax.get_xscale() == "log"  # one errorbar series per objective
    drift = [stats.estimate([run_groups.mean_of(r, "m2") for r in run_groups.select(runs, "grpo", s)]).mean
             for s in (0, 4)]
    scores = [stats.estimate([stats.score(r) for r in run_groups.select(runs, "grpo", s)]).mean for s in (0, 4)]
    line = ax.containers[0].lines[0]
    assert line.get_xdata().tolist() == pytest.approx(drift) and line.get_ydata().tolist() == pytest.approx(scores)
    shapes = {l.get_label(): l.get_marker() for l in ax.lines if l.get_label().startswith("s = ")}
    assert list(shapes) == ["s = 0", "s = 4"] and len(set(shapes.values())) == 2  # one shape per staleness
    grpo_stale = [l for l in ax.lines if l.get_marker() == shapes["s = 4"] and list(l.get_xdata())
                  and l.get_color() == line.get_color()]
    assert [l.get_xdata()[0] for l in grpo_stale] == pytest.approx([drift[1]])  # GRPO's s = 4 point, its shape
    assert any(l.get_label().startswith("M2PO's tau") and l.get_xdata()[0] == 0.04 for l in ax.lines)


def test_token_figures(sweep):
    runs, taus = sweep
    chosen = run_groups.select(runs, "grpo") + run_groups.select(runs, "m2po")
    fig = clip_vs_mask.removed_fraction(chosen)
    assert len(fig.axes[0].lines) == 3 and "masked" in fig.axes[0].lines[2].get_label()
    fig = clip_vs_mask.entropy_by_deviation(chosen)
    assert [len(ax.lines) for ax in fig.axes] == [4, 4]  # 3 settings (seeds pooled) + the clip line
    fig = clip_vs_mask.entropy_removed_vs_kept(chosen)
    assert len(fig.axes[0].patches) == 3 * 3  # three bars for each of the 3 settings (seeds averaged)
    fig = clip_vs_mask.m2_before_after(run_groups.select(runs, "m2po") + run_groups.select(runs, "grpo", 4))
    assert len(fig.axes[0].lines) == 4  # m2po: all + kept, grpo: all, the tau line
    fig = clip_vs_mask.run_detail(chosen[0], 2, 6)
    assert len(fig.axes) == 3 and len(fig.axes[2].patches) == 1  # the shaded window
    fig = clip_vs_mask.tau_sweep_figure(taus, references=run_groups.select(runs, "grpo", 0))
    assert fig.axes[0].containers[0].lines[0].get_xdata().tolist() == [0.005, 0.04, 0.16]
    by_tau = [[r for r in taus if r.config.objective_params["tau"] == t] for t in (0.005, 0.04, 0.16)]
    scores = [stats.estimate([stats.score(r) for r in cell]).mean for cell in by_tau]  # last-3 means over seeds
    assert fig.axes[0].containers[0].lines[0].get_ydata().tolist() == pytest.approx(scores)
    assert sorted(fig.axes[0].get_legend_handles_labels()[1]) == ["grpo s=0", "m2po"]  # the sweep, the reference



def test_the_tau_explorer_draws_each_reference_setting_in_its_own_colour(sweep):
    """GRPO on-policy and stale beside M2PO's tau sweep: one colour and one dash per setting, in the figure and in the
    explorer (both GRPO lines once shared the objective's blue)."""
    runs, taus = sweep
    references = run_groups.select(runs, "grpo")  # s = 0 and s = 4
    traces = clip_vs_mask.tau_explorer(taus, references=references).view(tau="0.04", metric="eval_greedy_acc")["data"]
    grpo = [t for t in traces if t["name"].startswith("grpo")]
    assert [t["name"] for t in grpo] == ["grpo s = 0", "grpo s = 4"]
    assert len({t["line"]["color"] for t in grpo}) == 2 and len({t["line"]["dash"] for t in grpo}) == 2
    lines = clip_vs_mask.tau_sweep_figure(taus, references=references).axes[0].get_lines()
    drawn = [line for line in lines if line.get_label().startswith("grpo")]
    assert len({matplotlib.colors.to_hex(line.get_color()) for line in drawn}) == 2

def explorers(sweep):
    runs, taus = sweep
    return [staleness.staleness_explorer(runs), clip_vs_mask.token_explorer(runs),
            clip_vs_mask.tau_explorer(taus, references=run_groups.select(runs, "grpo", 0)),
            grpo.run_explorer(run_groups.select(runs, "grpo", 0))]


def test_an_explorer_is_one_definition_shown_as_a_widget_too(sweep):
    """The widget has the page's controls over the page's view: moving a control redraws the view of that choice."""
    pytest.importorskip("ipywidgets")
    for explorer in explorers(sweep):
        box = explorer.widget()
        controls = box.children[1].children
        assert [c.description for c in controls] == [c.label for c in explorer.controls]
        seen = []
        explorer.view = lambda view=explorer.view, **choice: seen.append(choice) or view(**choice)
        controls[-1].value = controls[-1].options[-1][1] if isinstance(controls[-1].options[-1], tuple) else \
            controls[-1].options[-1]
        assert seen and seen[-1][explorer.controls[-1].name] == explorer.controls[-1].options[-1]


def test_a_headless_run_builds_no_widget(sweep, monkeypatch):
    """rlbook.book executes notebooks with RLBOOK_HEADLESS: an explorer is a line of HTML there, no ipywidget (a cell
    displaying widgets can stall a headless client until its time limit)."""
    import ipywidgets
    from IPython.display import HTML

    explorer = explorers(sweep)[0]
    monkeypatch.setenv("RLBOOK_HEADLESS", "1")
    note = explorer.widget()
    assert isinstance(note, HTML) and "JupyterLab" in note.data
    monkeypatch.delenv("RLBOOK_HEADLESS")
    assert isinstance(explorer.widget(), ipywidgets.Widget)


def test_in_page_explorers_hold_a_view_per_choice(sweep):
    from rlbook.chapters.explorer import Explorer

    for explorer in explorers(sweep):
        assert isinstance(explorer, Explorer) and explorer.views
        choices = [len(c.options) for c in explorer.controls]
        assert len(explorer.views) == math.prod(choices)  # every combination of the controls has its figure
        figures = [json.dumps(v) for v in explorer.views.values()]
        assert len(set(figures)) == len(figures), "two choices show the same figure"
        page = explorer._repr_html_()
        assert page.count('data-control="') == len(explorer.controls)
        assert "NaN" not in page


def test_figures_read_at_the_body_text_size_on_a_1024_px_page(sweep):
    """Laid out for the page (style.fit_for_page, which save_figure calls), a figure is one column wide with at most
    two panels a row, and its smallest text, shrunk with the figure into the column of a 1,024 px window, is at least
    the body text's size."""
    from rlbook.chapters import style

    runs, taus = sweep
    figures = {"accuracy_curves": staleness.accuracy_curves(runs),  # three panels side by side before
               "prosperity": staleness.prosperity_before_collapse(run_groups.select(runs, "no_clip", "max")),
               "run_detail": clip_vs_mask.run_detail(runs[0], 2, 6),  # three panels in a row before
               "tau_sweep": clip_vs_mask.tau_sweep_figure(taus, references=run_groups.select(runs, "grpo", 0))}
    for name, fig in figures.items():
        style.fit_for_page(fig)
        assert fig.get_figwidth() == pytest.approx(style.PAGE_INCHES), name
        rows = {}
        for ax in fig.axes:
            rows.setdefault(round(ax.get_position().y0, 2), set()).add(round(ax.get_position().x0, 2))
        assert max(len(x) for x in rows.values()) <= style.MAX_PANELS_PER_ROW, name
        assert style.screen_font_px(fig) >= style.BODY_PX, name
    assert len({round(ax.get_position().x0, 2) for ax in figures["run_detail"].axes}) == 1  # three panels stacked


def test_the_page_sizes_the_figures_are_laid_out_for_are_the_books():
    """style.BODY_PX is the body text's size the book's stylesheet sets."""
    import re
    from pathlib import Path

    from rlbook.chapters import style

    css = (Path(__file__).resolve().parent.parent / "book" / "_static" / "rlbook.css").read_text()
    assert re.search(r"html\s*\{\s*font-size:\s*(\d+)px", css)[1] == str(style.BODY_PX)


def test_an_explorers_long_title_is_broken_into_lines_that_fit_the_column():
    from rlbook.chapters.explorer import TITLE_CHARACTERS, wrap_title

    long = {"data": [], "layout": {"title": {"text": "Greedy accuracy on the held-out problems: " + "seeds 0-4; " * 8},
                                   "height": 400}}
    lines = wrap_title(long)["layout"]["title"]["text"].split("<br>")
    assert len(lines) > 1 and all(len(line) <= TITLE_CHARACTERS for line in lines)
    assert wrap_title(long)["layout"]["height"] == 400 and "<br>" not in long["layout"]["title"]["text"]
    short = {"data": [], "layout": {"title": {"text": "Reward"}}}
    assert wrap_title(short) == short


def test_chapter_1s_explorer_shows_the_seed_asked_for(sweep):
    runs = run_groups.select(sweep[0], "grpo", 0)
    view = grpo.run_explorer(runs).view("eval_greedy_acc", 1)
    chosen = view["data"][-1]
    assert chosen["name"] == "seed 1" and chosen["y"] == runs[1].series("eval_greedy_acc")[1]
    assert [trace["name"] for trace in view["data"][:-1]] == ["seed 0"]


@pytest.mark.parametrize("low, high", [(0.5, 2.2), (0.54, 0.64), (1e-3, 0.3), (1e-5, 0.1), (0.02, 40)])
def test_a_log_axis_labels_a_few_plain_ticks(low, high):
    """No overlapping labels on a log axis: at most style.MAX_LOG_LABELS, at least two, as plain numbers (no
    1.2 x 10^0, no 1e-05), and no labelled minor ticks."""
    fig, ax = plt.subplots()
    ax.plot([0, 1], [low, high])
    ax.set_yscale("log")
    style.plain_log_ticks(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_visible() and t.get_text()]
    assert 2 <= len(labels) <= style.MAX_LOG_LABELS, labels
    assert not any("e-" in label or "^{0}" in label for label in labels), labels
    assert isinstance(ax.yaxis.get_minor_formatter(), NullFormatter)


def test_a_saved_figure_has_a_page_layout_and_a_wider_slide_layout(tmp_path, monkeypatch):
    """save_figure writes the page's PNG and SVG (panels stacked for the column) and, first, <name>.slide.png in the
    layout the figure was drawn in (three panels side by side), which the decks use."""
    from PIL import Image

    monkeypatch.setattr(style, "FIGURE_DIR", tmp_path)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax in axes:
        ax.plot([0, 1], [0, 1])
    style.save_figure(fig, "09", "three_panels", "seeds 0-4; made by this code")
    files = {p.name for p in (tmp_path / "09").iterdir()}
    assert files == {"three_panels.png", "three_panels.svg", "three_panels.slide.png"}
    with Image.open(tmp_path / "09" / "three_panels.png") as page, \
            Image.open(tmp_path / "09" / "three_panels.slide.png") as slide:
        assert slide.width / slide.height > 2 * page.width / page.height
