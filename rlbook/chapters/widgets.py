"""JupyterLab explorers (ipywidgets) of chapters 2-7 over stored runs.

JupyterLab explorers (ipywidgets) of chapters 2-7: they replay stored runs at once, and chapter 5's merges a
new setting when asked.

Each builder returns an ipywidgets box whose figure (from the chapter's module) redraws when a control changes.
Widget state is lost when a notebook runs headless, so every notebook cell that shows a widget also draws the
static figure of the widget's default selection.
"""
from __future__ import annotations

import functools
import os

import ipywidgets as w
import matplotlib.pyplot as plt
from IPython.display import HTML, display

from . import clip_vs_mask, lopti_figures, router_replay, run_groups, semi_online
from .staleness import accuracy_curves
from .pma_figures import merge_figure

METRICS = ("eval_greedy_acc", "eval_sampled_acc", "reward", "clip_frac", "mask_frac", "entropy", "m2", "kl_k3")


def interactive(builder):
    """An explorer builds its widgets only where someone can move them: in a headless run (RLBOOK_HEADLESS, set by
    rlbook.book.execute) it returns a line saying where the explorer lives; the cell's static figure stands beside."""
    @functools.wraps(builder)
    def explorer(*args, **kwargs):
        if os.environ.get("RLBOOK_HEADLESS"):
            return HTML(f"<i>{builder.__name__}: an interactive explorer, in the notebook opened in JupyterLab</i>")
        return builder(*args, **kwargs)
    return explorer


def _redraw(out: w.Output, draw) -> None:
    with out:
        out.clear_output(wait=True)
        fig = draw()
        display(fig)
        plt.close(fig)


def _build(controls, draw, title: str):
    """A box of controls above an Output that redraws `draw(**values)` whenever a control changes."""
    out = w.Output()
    values = lambda: {name: control.value for name, control in controls.items()}
    for control in controls.values():
        control.observe(lambda _: _redraw(out, lambda: draw(**values())), names="value")
    _redraw(out, lambda: draw(**values()))
    return w.VBox([w.HTML(f"<b>{title}</b>"), w.HBox(list(controls.values())), out])


@interactive
def staleness_explorer(runs, metric: str = "eval_greedy_acc"):
    """Pick staleness values, objectives and a metric: redraws `staleness.accuracy_curves` of the chosen runs."""
    stalenesses = sorted({r.config.staleness for r in runs})
    objectives = list(run_groups.group_runs(runs, key=lambda r: r.config.objective))
    controls = {
        "staleness": w.SelectMultiple(options=stalenesses, value=tuple(stalenesses), description="staleness s",
                                      rows=min(len(stalenesses), 6)),
        "objective": w.SelectMultiple(options=objectives, value=tuple(objectives), description="objective",
                                      rows=min(len(objectives), 6)),
        "metric": w.Dropdown(options=METRICS, value=metric, description="metric"),
        "window": w.IntSlider(value=1, min=1, max=25, description="smooth"),
    }

    def draw(staleness, objective, metric, window):
        chosen = [r for r in runs if r.config.staleness in staleness and r.config.objective in objective]
        return accuracy_curves(chosen, metric, window)

    return _build(controls, draw, "Staleness explorer (stored runs, replayed)")


@interactive
def run_explorer(runs, window: int = 10):
    """Pick a run and an update window: redraws `clip_vs_mask.run_detail` (entropy per |r - 1| bin, share of tokens per
    bin, clipped or masked share over updates)."""
    labels = {run_groups.run_label(r): r for r in runs}
    last = max(len(r.metrics) - 1 for r in runs)
    controls = {
        "label": w.Dropdown(options=list(labels), description="run"),
        "updates": w.IntRangeSlider(value=(1, last), min=1, max=last, description="updates"),
    }

    def draw(label, updates):
        return clip_vs_mask.run_detail(labels[label], updates[0], updates[1], window)

    return _build(controls, draw, "Run explorer: which tokens move, and which are removed")


@interactive
def tau_explorer(runs, references=(), metric: str = "eval_greedy_acc"):
    """Pick the tau values to compare: redraws `clip_vs_mask.tau_sweep_figure` (final accuracy, masked share)."""
    taus = sorted({run_groups.tau_of(r) for r in runs})
    controls = {"taus": w.SelectMultiple(options=taus, value=tuple(taus), description="tau", rows=min(len(taus), 6)),
                "metric": w.Dropdown(options=METRICS[:2], value=metric, description="metric")}

    def draw(taus, metric):
        return clip_vs_mask.tau_sweep_figure([r for r in runs if run_groups.tau_of(r) in taus], metric, references)

    return _build(controls, draw, "M2PO threshold tau")


@interactive
def merge_explorer(traj, checkpoints: dict):
    """Chapter 5: controls (method, N, EMA alpha, last merged step) over `merge_figure`."""
    def view(method, n, alpha, end):
        if sum(s <= end for s in traj.stable) < n:
            return print(f"fewer than {n} stable checkpoints end at step {end}: pick a smaller N or a later step")
        merge_figure(traj, checkpoints, method, n, alpha, end)
        plt.show()
    c = traj.config
    return w.interactive(
        view, method=w.Dropdown(options=list(c.methods), value="sma", description="method"),
        n=w.SelectionSlider(options=sorted({*c.ns, c.focus_n}), value=c.focus_n, description="N"),
        alpha=w.SelectionSlider(options=sorted({0.1, 0.2, 0.3, 0.5, c.alpha}), value=c.alpha,
                                      description="EMA α"),
        end=w.SelectionSlider(options=traj.stable, value=traj.stable[-1], description="end step"))


@interactive
def variant_explorer(runs, metric: str = "eval_greedy_acc"):
    """Widget: AR's alpha and Lopti's eta among the stored runs, and a metric; redraws `explorer_figure`."""
    alphas, etas = sorted({r.config.ar_alpha for r in runs}), sorted({r.config.lopti_eta for r in runs})
    controls = [w.ToggleButtons(options=alphas, value=max(alphas), description="AR alpha"),
                w.ToggleButtons(options=etas, value=max(etas), description="Lopti eta"),
                w.Dropdown(options=["eval_greedy_acc", "eval_sampled_acc", "reward", "entropy", "low_prob_frac"],
                           value=metric, description="metric")]
    out = w.Output()

    def redraw(_=None):
        with out:
            out.clear_output(wait=True)
            fig = lopti_figures.explorer_figure(runs, *(c.value for c in controls))
            display(fig)
            plt.close(fig)

    for control in controls:
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(controls[:2]), controls[2], out])


@interactive
def router_explorer(runs, metric: str = "kl_k3"):
    """Chapter 6: pick variants and a metric; redraws `router_replay.training_curves` of that metric."""
    variants = list(run_groups.group_runs(runs, key=router_replay.variant))
    metrics = ("kl_k3", "f2", "routing_mismatch", "clip_frac", "eval_greedy_acc", "grad_norm", "reward")
    controls = {
        "variants": w.SelectMultiple(options=variants, value=tuple(variants), description="variant",
                                     rows=min(len(variants), 6)),
        "metric": w.Dropdown(options=metrics, value=metric, description="metric"),
        "window": w.IntSlider(value=10, min=1, max=50, description="smooth"),
    }

    def draw(variants, metric, window):
        return router_replay.training_curves([r for r in runs if router_replay.variant(r) in variants], (metric,),
                                             window)

    return _build(controls, draw, "Router-replay explorer (stored runs, replayed)")


@interactive
def sync_explorer(runs, metric: str = "eval_greedy_acc"):
    """Chapter 7: pick sync intervals and a metric; redraws `semi_online.accuracy_curves` of the chosen runs."""
    syncs = sorted({r.config.sync_every for r in runs}, key=semi_online.sync_order)
    metrics = ("eval_greedy_acc", "eval_sampled_acc", "reward", "loss", "kl_k3", "zero_std_frac", "policy_lag")
    controls = {
        "syncs": w.SelectMultiple(options=[(semi_online.sync_label(k), k) for k in syncs], value=tuple(syncs),
                                  description="generator", rows=min(len(syncs), 6)),
        "metric": w.Dropdown(options=metrics, value=metric, description="metric"),
        "window": w.IntSlider(value=10, min=1, max=50, description="smooth"),
    }

    def draw(syncs, metric, window):
        return semi_online.accuracy_curves([r for r in runs if r.config.sync_every in syncs], metric, window)

    return _build(controls, draw, "Sync-interval explorer (stored runs, replayed)")
