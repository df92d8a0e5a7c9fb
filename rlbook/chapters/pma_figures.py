"""Chapter 5's figures, drawn from stored trajectory results.

Chapter 5 figures (PMA, arXiv 2505.12082): the three methods' weights, the WSD trajectory, the merge grid and curve,
the loss surface, PMA-init, spike recovery, the merge explorer's view of one merge and its in-page replay."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ..merging import merge_weights
from .pma import merge_name, run_merges
from .style import legend_below, plain_log_ticks

ANNEALED = {"annealed": ("*", "C3", "annealed, final"), "annealed_equal": ("P", "C4", "annealed, equal tokens")}
KEYS = {"loss": ("Held-out loss", "loss (nats per token, log scale)"),
        "acc": ("Greedy accuracy", "accuracy (fraction correct)")}


def weights_figure(n: int = 10, alpha: float = 0.2):
    """The weight w_i of each of the last n checkpoints (oldest first) in an SMA, a WMA and an EMA merge."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    width = 0.27
    for i, method in enumerate(("sma", "wma", "ema")):
        label = method.upper() + (f" (α = {alpha})" if method == "ema" else "")
        ax.bar(np.arange(1, n + 1) + (i - 1) * width, merge_weights(method, n, alpha), width, label=label)
    ax.set(xticks=range(1, n + 1), xlabel=f"checkpoint i (1 = oldest, {n} = newest)", ylabel="weight $w_i$",
           title=f"The weight of each of {n} checkpoints in the merge")
    return legend_below(fig, ax, ncols=3)


def _decay(ax, traj):
    ax.axvspan(traj.config.max_steps - traj.config.decay_steps, traj.config.max_steps, color="grey", alpha=0.15,
               label="decay phase")


def _annealed(ax, traj, checkpoints, key):
    stable_end = traj.config.max_steps - traj.config.decay_steps
    for name, x in (("annealed", traj.config.max_steps), ("annealed_equal", stable_end)):
        marker, color, label = ANNEALED[name]
        ax.plot([x], [checkpoints[name][key]], marker, ms=14, color=color, label=label, zorder=5)


def trajectory_figure(traj, checkpoints: dict):
    """Learning rate, loss and accuracy along the warmup-stable-decay run, the annealed models starred."""
    steps = sorted(traj.checkpoints)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    axes[0].plot([r["step"] for r in traj.rows], [r["lr"] for r in traj.rows])
    axes[0].set(title="Learning rate: warmup, stable, decay", xlabel="training step", ylabel="learning rate")
    axes[1].plot([r["step"] for r in traj.rows], [r["loss"] for r in traj.rows], lw=0.8, alpha=0.5,
                 label="training batch")
    axes[1].plot(steps, [checkpoints[str(s)]["loss"] for s in steps], "o-", ms=4, label="checkpoint, held-out")
    axes[2].plot(steps, [checkpoints[str(s)]["acc"] for s in steps], "o-", ms=4, color="C1",
                 label="checkpoint, greedy accuracy")
    for ax, key in zip(axes[1:], ("loss", "acc")):
        _annealed(ax, traj, checkpoints, key)
        ax.set(title=KEYS[key][0], xlabel="training step", ylabel=KEYS[key][1],
               yscale="log" if key == "loss" else "linear")
    plain_log_ticks(axes[1])
    for ax in axes:
        _decay(ax, traj)
    legend_below(fig, axes, ncols=4)
    return fig


def merge_grid_figure(traj, checkpoints: dict, grid: dict):
    """Held-out loss and accuracy of every merge (method x N) ending at the last stable checkpoint, against that
    checkpoint and the annealed models (horizontal lines)."""
    c, end = traj.config, traj.stable[-1]
    ns = sorted({r["n"] for r in grid.values()})
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
    width = 0.8 / len(c.methods)
    for ax, key in zip(axes, ("loss", "acc")):
        for i, method in enumerate(c.methods):
            values = [grid[merge_name(method, n, end, c.alpha)][key] for n in ns]
            ax.bar(np.arange(len(ns)) + (i - (len(c.methods) - 1) / 2) * width, values, width,
                   label=method.upper() + (f" (α = {c.alpha})" if method == "ema" else ""))
        ax.axhline(checkpoints[str(end)][key], ls="--", color="k", label=f"last checkpoint (step {end})")
        for name, ls in (("annealed_equal", "-."), ("annealed", ":")):
            ax.axhline(checkpoints[name][key], ls=ls, color=ANNEALED[name][1], label=ANNEALED[name][2])
        ax.set(xticks=range(len(ns)), xticklabels=[f"N = {n}" for n in ns], xlabel="checkpoints merged",
               title=f"{KEYS[key][0]} of merges ending at step {end}", ylabel=KEYS[key][1],
               yscale="log" if key == "loss" else "linear")
        ax.grid(alpha=0.3, axis="y")
        if key == "loss":
            plain_log_ticks(ax)
    legend_below(fig, axes[0], ncols=3)
    return fig


def merge_curve_figure(traj, checkpoints: dict, curve: dict):
    """SMA and WMA merges of the last focus_n checkpoints along the stable phase, against the checkpoints."""
    c = traj.config
    ends = traj.stable[c.focus_n - 1:]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
    for ax, key in zip(axes, ("loss", "acc")):
        ax.plot(traj.stable, [checkpoints[str(s)][key] for s in traj.stable], "o-", ms=4, color="grey",
                label="checkpoint")
        for method in ("sma", "wma"):
            ax.plot(ends, [curve[merge_name(method, c.focus_n, e, c.alpha)][key] for e in ends], "o-", ms=4,
                    label=f"{method.upper()} merge of the last {c.focus_n}")
        _annealed(ax, traj, checkpoints, key)
        _decay(ax, traj)
        ax.set(title=KEYS[key][0], xlabel="training step (the last checkpoint merged)", ylabel=KEYS[key][1],
               yscale="log" if key == "loss" else "linear")
    plain_log_ticks(axes[0])
    legend_below(fig, axes[0], ncols=3)
    return fig


def loss_surface_figure(surface: dict):
    """Held-out loss on the plane of the checkpoints' first two principal components, the merge at the centre."""
    axis, loss = np.array(surface["axis"]), np.array(surface["loss"])
    fig, ax = plt.subplots(figsize=(8, 6.4))
    contour = ax.contourf(axis, axis, np.log10(loss), levels=20, cmap="viridis")
    fig.colorbar(contour, ax=ax, label="log10 held-out loss")
    xy = np.array(surface["checkpoints"])
    ax.plot(xy[:, 0], xy[:, 1], "w.-", lw=1)
    for (x, y), s in zip(xy, surface["steps"]):
        ax.annotate(str(s), (x, y), color="w", fontsize=10, xytext=(4, 4), textcoords="offset points")
    ax.plot(0, 0, "D", color="C1", ms=11, label=f"SMA merge (N = {len(xy)})")
    for name in ("annealed_equal", "annealed"):
        marker, color, label = ANNEALED[name]
        ax.plot(*surface[name], marker, color=color, ms=14,
                label=f"{label} ({surface[f'{name}_off_plane']:.2f} off the plane)")
    ax.set(xlabel="principal component 1 (weight-space units)", ylabel="principal component 2 (weight-space units)",
           title="Held-out loss around the checkpoints (white, by step)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=1, frameon=False)
    fig.tight_layout()
    return fig


def pma_init_figure(traj, inits: list):
    """Continued training from the merge and from the last checkpoint: loss and gradient norm per step."""
    c = traj.config
    labels = {"merged": f"from the SMA merge (N = {c.focus_n})", "last": f"from the step-{traj.stable[-1]} checkpoint"}
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.4))
    for ax, key, heading, unit in zip(axes, ("loss", "grad_norm"), ("Training loss", "Gradient norm before clipping"),
                                      ("loss (nats per token, log scale)", "gradient norm (L2)")):
        for color, start in (("C0", "merged"), ("C1", "last")):
            series = np.array([[r[key] for r in init[start]] for init in inits])
            steps = np.arange(1, series.shape[1] + 1)
            ax.plot(steps, series.T, color=color, lw=0.6, alpha=0.35)
            ax.plot(steps, series.mean(0), color=color, lw=2.5, label=labels[start] + " (mean; thin: each stream)")
        ax.set(title=heading, xlabel="continued training step", ylabel=unit,
               yscale="log" if key == "loss" else "linear")
    plain_log_ticks(axes[0])
    legend_below(fig, axes[0], ncols=2)
    return fig


def spike_figure(traj, checkpoints: dict, spikes: list):
    """The learning-rate ramp and the loss spikes it causes; resuming from the merge of the checkpoints before the
    spike vs from the last of them."""
    c = traj.config
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.6))
    twin = axes[0].twinx()
    for i, spike in enumerate(spikes):
        ramp = spike["spike_rows"]
        axes[0].plot([r["step"] for r in ramp], [r["loss"] for r in ramp], color=f"C{i + 2}", lw=1.2,
                     label=f"stream {i}: " + (f"spike at step {spike['spike_step']}" if spike["spike_step"]
                                              else "no spike"))
        if spike["spike_step"]:
            axes[0].axvline(spike["spike_step"], color=f"C{i + 2}", ls="--", lw=1)
    twin.semilogy([r["step"] for r in ramp], [r["lr"] for r in ramp], ":", color="grey")
    twin.set_ylabel("learning rate (dotted, log scale)")
    axes[0].set(title="A rising learning rate makes the loss spike (dashed)", xlabel="steps after the branch point",
                ylabel="training loss (log scale)", yscale="log")
    start = spikes[0]["start"]
    reference = [s for s in traj.stable if start < s <= start + c.spike_steps + c.resume_steps]
    axes[1].plot([s - start for s in reference], [checkpoints[str(s)]["loss"] for s in reference], "o", ms=5,
                 color="grey", label="original trajectory (held-out)")
    for spike in (s for s in spikes if "merged" in s):
        for color, name in (("C0", "merged"), ("C1", "last")):
            loss = np.convolve([r["loss"] for r in spike[name]], np.ones(5) / 5, mode="valid")
            axes[1].plot(spike["pre_spike_steps"][-1] + 5 + np.arange(len(loss)), loss, color=color, lw=1.2,
                         label=f"resumed from the {'merge' if name == 'merged' else 'last pre-spike checkpoint'}"
                         if spike is spikes[0] else None)
    axes[1].set(title="Resuming at the trajectory's learning rate", xlabel="steps after the branch point",
                ylabel="training loss, 5-step mean (log scale)", yscale="log")
    for ax in (axes[0], twin, axes[1]):
        plain_log_ticks(ax)
    return legend_below(fig, axes, ncols=2)  # one legend under the panels, clear of the data


def merge_figure(traj, checkpoints: dict, method: str = "sma", n: int | None = None,
                 alpha: float | None = None, end: int | None = None):
    """The merge explorer's figure: the weights w_i of a merge, and its held-out loss against the trajectory's
    (a stored merge replays at once; a new one is merged, evaluated and stored)."""
    n, alpha, end = n or traj.config.focus_n, alpha or traj.config.alpha, end or traj.stable[-1]
    merge = next(iter(run_merges(traj, [(method, n, end)], alpha, progress=False).values()))
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 4.4), gridspec_kw={"width_ratios": [1, 2]})
    left.bar([str(s) for s in traj.stable if s <= end][-n:], merge_weights(method, n, alpha), color="C2")
    left.set(title=f"{method.upper()} weights" + (f" (α = {alpha})" if method == "ema" else ""),
             xlabel="checkpoint step", ylabel="weight $w_i$ in the merge")
    left.tick_params(axis="x", labelrotation=90)
    right.plot(traj.stable, [checkpoints[str(s)]["loss"] for s in traj.stable], "o-", ms=4, color="grey",
               label="checkpoints")
    points = [(end, merge, "D", "C2", "the merge"), (end, checkpoints[str(end)], "s", "k", f"step {end}"),
              (traj.stable[-1], checkpoints["annealed_equal"], "P", "C4", "annealed, equal tokens"),
              (traj.config.max_steps, checkpoints["annealed"], "*", "C3", "annealed, final")]
    for x, r, marker, color, label in points:
        right.plot([x], [r["loss"]], marker, ms=11, color=color,
                   label=f"{label}: loss {r['loss']:.3f}, accuracy {r['acc']:.2f}")
    right.set(title="Held-out loss of the merge", xlabel="training step", ylabel="loss (log scale)", yscale="log")
    plain_log_ticks(right)
    legend_below(fig, right, ncols=2)
    return fig


def log_ticks(values, count: int = 5) -> dict:
    """Plotly tick values and labels for a log axis over `values`: `count` evenly spaced in log, written in full
    (a log axis spanning less than a decade otherwise labels its ticks by their first digit alone)."""
    lo, hi = min(values), max(values)
    ticks = sorted({float(f"{lo * (hi / lo) ** (i / (count - 1)):.2g}") for i in range(count)})
    return {"tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks]}


def merge_explorer(traj, checkpoints: dict, grid: dict):
    """Explorer of the merge grid: pick the method and N; the merge's weights and its held-out loss against the
    checkpoints and the annealed models. The page holds the stored grid; the JupyterLab widget also offers any N,
    EMA alpha and end step, and merges, evaluates and stores a new setting when it is chosen (`run_merges`)."""
    from .explorer import Control, Explorer, line

    c, last = traj.config, traj.stable[-1]
    ns = sorted({r["n"] for r in grid.values()})
    fixed = [line(traj.stable, [checkpoints[str(s)]["loss"] for s in traj.stable], "checkpoints", "grey",
                  markers=True, xaxis="x2", yaxis="y2")]
    for name, x in (("annealed_equal", last), ("annealed", c.max_steps)):
        r = checkpoints[name]
        symbol, color = ("star", "#d62728") if name == "annealed" else ("cross", "#9467bd")
        fixed.append({"type": "scatter", "mode": "markers", "x": [x], "y": [r["loss"]], "xaxis": "x2", "yaxis": "y2",
                      "name": f"{ANNEALED[name][2]}: loss {r['loss']:.3f}",
                      "marker": {"size": 15, "symbol": symbol, "color": color}})

    loss_ticks = log_ticks([r["loss"] for r in [*checkpoints.values(), *grid.values()] if "loss" in r])

    def view(method, n, alpha, end):
        n, steps = int(n), [s for s in traj.stable if s <= end]
        merge = grid.get(merge_name(method, n, end, alpha))
        if merge is None and (n in ns and alpha == c.alpha and end == last or len(steps) < n):
            return None  # the page's choices are the stored grid; a widget's new choice is merged below
        merge = merge or next(iter(run_merges(traj, [(method, n, end)], alpha, progress=False).values()))
        bars = {"type": "bar", "x": [str(s) for s in steps[-n:]], "y": merge_weights(method, n, alpha),
                "name": "weights w_i", "marker": {"color": "#2ca02c"}, "showlegend": False}
        point = {"type": "scatter", "mode": "markers", "x": [end], "y": [merge["loss"]], "xaxis": "x2", "yaxis": "y2",
                 "name": f"the merge: loss {merge['loss']:.3f}, accuracy {merge['acc']:.2f}",
                 "marker": {"size": 14, "symbol": "diamond", "color": "#2ca02c"}}
        return {"data": [bars, *fixed, point], "layout": {
            "title": {"text": f"{method.upper()} merge of the last {n} checkpoints (ending at step {end})"},
            "xaxis": {"domain": [0, 0.28], "title": {"text": "checkpoint step"}, "type": "category"},
            "yaxis": {"title": {"text": "weight in the merge"}},
            "xaxis2": {"domain": [0.47, 1], "anchor": "y2", "title": {"text": "training step"}},
            "yaxis2": {"anchor": "x2", "type": "log", "title": {"text": "held-out loss (log scale)"}, **loss_ticks}}}

    controls = [Control("method", "method", list(c.methods), value="sma"),
                Control("n", "N checkpoints", ns, kind="slider", value=c.focus_n if c.focus_n in ns else None,
                        more=sorted({*c.ns, c.focus_n})),
                Control("alpha", "EMA α", [c.alpha], kind="slider", more=sorted({0.1, 0.2, 0.3, 0.5, c.alpha})),
                Control("end", "end step", [last], kind="slider", more=traj.stable)]
    return Explorer("Merge explorer (stored merges)",
                    "Pick the averaging method and how many checkpoints it merges. Left: each checkpoint's weight; "
                    "right: the merge's held-out loss (green diamond) against the checkpoints and the annealed models. "
                    "Look at how close the merge gets to the annealed model's loss without any extra training.",
                    controls, view, {"height": 560, "legend": {"orientation": "h", "y": -0.32}})


def reference_figure(references, method: str = "sma"):
    """The reference trajectories (`pma.load_references`), one line per seed: held-out loss and greedy accuracy of
    the last stable checkpoint, its `method` merge of the last focus_n checkpoints and the annealed models; right,
    the share of the loss gap between the last checkpoint and the twin annealed at equal tokens that each merge of
    the grid closes (bars: mean over seeds ± standard error; dots: seeds)."""
    c, end = references[0].config, references[0].end
    merge = merge_name(method, c.focus_n, end, c.alpha)
    stops = {str(end): f"step {end}\n(last stable)", merge: f"{method.upper()} merge\nN = {c.focus_n}",
             "annealed_equal": "annealed,\nequal tokens", "annealed": "annealed,\nfinal"}
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    for ax, key in zip(axes, ("loss", "acc")):
        for i, r in enumerate(references):
            results = {**r.checkpoints, **r.merges}
            ax.plot(range(len(stops)), [results[k][key] for k in stops], "o-", color=f"C{i}",
                    label=f"seed {r.config.seed}")
        ax.set(xticks=range(len(stops)), xticklabels=list(stops.values()), title=f"{KEYS[key][0]}, per seed",
               ylabel=KEYS[key][1], yscale="log" if key == "loss" else "linear")
    plain_log_ticks(axes[0])
    ns = sorted({r["n"] for r in references[0].merges.values() if r["end"] == end})
    width = 0.8 / len(c.methods)
    for i, m in enumerate(c.methods):
        shares = np.array([[(r.checkpoints[str(end)]["loss"] - r.merges[merge_name(m, n, end, c.alpha)]["loss"])
                            / (r.checkpoints[str(end)]["loss"] - r.checkpoints["annealed_equal"]["loss"])
                            for n in ns] for r in references])
        x = np.arange(len(ns)) + (i - (len(c.methods) - 1) / 2) * width
        se = shares.std(0, ddof=1) / np.sqrt(len(shares)) if len(shares) > 1 else None
        axes[2].bar(x, shares.mean(0), width, yerr=se, capsize=3, color=f"C{i}", alpha=0.6,
                    label=m.upper() + (f" (α = {c.alpha})" if m == "ema" else ""))
        axes[2].plot(np.repeat(x[None], len(shares), 0).ravel(), shares.ravel(), "k.", ms=3)
    axes[2].axhline(1, color=ANNEALED["annealed_equal"][1], ls="-.", label="= the annealed twin")
    axes[2].set(xticks=range(len(ns)), xticklabels=[f"N = {n}" for n in ns], xlabel="checkpoints merged",
                ylabel="share of the loss gap closed", title=f"Loss gap from step {end} to annealing: share closed")
    legend_below(fig, axes, ncols=5)
    return fig
