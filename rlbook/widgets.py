"""Interactive views of stored runs for chapters 2 and 3: they replay RunStore runs at once (no training).

Each builder returns an ipywidgets box whose figure (from `rlbook.figures`) redraws when a control changes.
Widget state is lost when a notebook runs headless, so every notebook cell that shows a widget also draws the
static figure of the widget's default selection.
"""
from __future__ import annotations

import ipywidgets as w
import matplotlib.pyplot as plt
from IPython.display import display

from . import figures, pma
from .merging import merge_weights

METRICS = ("eval_greedy_acc", "eval_sampled_acc", "reward", "clip_frac", "mask_frac", "entropy", "m2", "kl_k3")


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


def staleness_explorer(runs, metric: str = "eval_greedy_acc"):
    """Pick staleness values, objectives and a metric: redraws `figures.accuracy_curves` of the chosen runs."""
    stalenesses = sorted({r.config.staleness for r in runs})
    objectives = list(figures.group_runs(runs, key=lambda r: r.config.objective))
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
        return figures.accuracy_curves(chosen, metric, window)

    return _build(controls, draw, "Staleness explorer (stored runs, replayed)")


def run_explorer(runs, window: int = 10):
    """Pick a run and an update window: redraws `figures.run_detail` (entropy per |r - 1| bin, share of tokens per
    bin, clipped or masked share over updates)."""
    labels = {figures.run_label(r): r for r in runs}
    last = max(len(r.metrics) - 1 for r in runs)
    controls = {
        "label": w.Dropdown(options=list(labels), description="run"),
        "updates": w.IntRangeSlider(value=(1, last), min=1, max=last, description="updates"),
    }

    def draw(label, updates):
        return figures.run_detail(labels[label], updates[0], updates[1], window)

    return _build(controls, draw, "Run explorer: which tokens move, and which are removed")


def tau_explorer(runs, references=(), metric: str = "eval_greedy_acc"):
    """Pick the tau values to compare: redraws `figures.tau_sweep_figure` (final accuracy, masked share)."""
    taus = sorted({figures.tau_of(r) for r in runs})
    controls = {"taus": w.SelectMultiple(options=taus, value=tuple(taus), description="tau", rows=min(len(taus), 6)),
                "metric": w.Dropdown(options=METRICS[:2], value=metric, description="metric")}

    def draw(taus, metric):
        return figures.tau_sweep_figure([r for r in runs if figures.tau_of(r) in taus], metric, references)

    return _build(controls, draw, "M2PO threshold tau")


def merge_figure(traj, checkpoints: dict, method: str = "sma", n: int | None = None,
               alpha: float | None = None, end: int | None = None):
    """Chapter 5, the merge explorer's figure: the weights w_i of a merge, and its held-out loss against the trajectory's
    (a stored merge replays at once; a new one is merged, evaluated and stored)."""
    n, alpha, end = n or traj.config.focus_n, alpha or traj.config.alpha, end or traj.stable[-1]
    merge = next(iter(pma.run_merges(traj, [(method, n, end)], alpha, progress=False).values()))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.3), gridspec_kw={"width_ratios": [1, 2]})
    left.bar([str(s) for s in traj.stable if s <= end][-n:], merge_weights(method, n, alpha), color="C2")
    left.set(title=f"{method.upper()} weights $w_i$" + (f" (α={alpha})" if method == "ema" else ""),
             xlabel="checkpoint step")
    left.tick_params(axis="x", labelrotation=90)
    right.plot(traj.stable, [checkpoints[str(s)]["loss"] for s in traj.stable], "o-", ms=3, color="grey")
    points = [(end, merge, "D", "C2", "merge"), (end, checkpoints[str(end)], "s", "k", f"step {end}"),
              (traj.stable[-1], checkpoints["annealed_equal"], "P", "C4", "annealed, equal tokens"),
              (traj.config.max_steps, checkpoints["annealed"], "*", "C3", "annealed, final")]
    for x, r, marker, color, label in points:
        right.plot([x], [r["loss"]], marker, ms=9, color=color,
                   label=f"{label}: loss {r['loss']:.3f}, acc {r['acc']:.2f}")
    right.set(title="held-out loss", xlabel="step", yscale="log")
    right.legend(fontsize=8)
    right.grid(alpha=0.3)
    fig.tight_layout()
    return fig


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
