"""Chapter 4's figures and tables (Lopti / Advantage Reweighting, arXiv 2505.12929).

The per-token analysis as tables, the learning curves, accuracy by puzzle size, the explorer, and the one verdict
table of every setting.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict

import matplotlib.pyplot as plt

from ..experiments import LOPTI_VARIANTS
from ..runset import RunSet
from . import tables, verdicts
from .lopti import variant_of
from .style import axis_label, legend_below, title


def _by_variant(runs) -> dict:
    groups = defaultdict(list)
    for run in runs:
        groups[variant_of(run.config)].append(run)
    order = list(LOPTI_VARIANTS)
    return dict(sorted(groups.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def _mean_series(runs, key: str, window: int = 1):
    """(updates, mean over runs, smoothed over `window` points) of a metric at the updates every run recorded."""
    series = [dict(zip(*run.series(key))) for run in runs]
    updates = sorted(set.intersection(*(set(s) for s in series)))
    mean = [sum(s[u] for s in series) / len(series) for u in updates]
    return updates, [sum(mean[max(0, i + 1 - window):i + 1]) / min(window, i + 1) for i in range(len(mean))]


def people_figure(runs, results: list[dict], base: dict | None = None):
    """Greedy accuracy per number of people: a bar per variant (mean of seeds), seeds as dots, the start dashed."""
    groups = defaultdict(list)
    for run, result in zip(runs, results):
        groups[variant_of(run.config)].append(result["by_people"] or {"all": result["overall"]})
    sizes = sorted({n for rows in groups.values() for row in rows for n in row}, key=str)
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / max(len(groups), 1)
    for i, (variant, rows) in enumerate(groups.items()):
        labelled = False
        for j, n in enumerate(sizes):
            values, x = [row[n] for row in rows if n in row], j + (i - (len(groups) - 1) / 2) * width
            if not values:  # while runs are retrained, a variant's runs may all lack this size (or "all")
                continue
            ax.bar(x, sum(values) / len(values), width, color=f"C{i}", alpha=0.75,
                   label=None if labelled else variant)
            ax.plot([x] * len(values), values, "k.", ms=4)
            labelled = True
    for j, n in enumerate(n for n in sizes if base and n in base):
        ax.hlines(base[n], j - 0.45, j + 0.45, colors="grey", linestyles="--", label="start" if j == 0 else None)
    names = [f"{n} people" if n != "all" else "all sizes\n(runs not evaluated by size)" for n in sizes]
    ax.set(xticks=range(len(sizes)), xticklabels=names, xlabel="puzzle size",
           ylabel="greedy accuracy (fraction correct)",
           title="Knights and Knaves: accuracy by puzzle size (dots: seeds)")
    return legend_below(fig, ax, ncols=3)


def curves_figure(runs, metrics=("eval_greedy_acc", "reward"), window: int = 5):
    """Learning curves, a line per variant (mean over its seeds; training metrics smoothed over `window` updates),
    under the setting's name."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(max(6.5 * len(metrics), 8), 4.6), squeeze=False)
    if runs:
        fig.suptitle(setting_name(runs[0].config), fontweight="bold")
    for ax, metric in zip(axes[0], metrics):
        for variant, group in _by_variant(runs).items():
            x, y = _mean_series(group, metric, 1 if metric.startswith("eval") else window)
            color = f"C{list(LOPTI_VARIANTS).index(variant)}" if variant in LOPTI_VARIANTS else "black"
            ax.plot(x, y, color=color, marker="o" if metric.startswith("eval") else None, ms=3,
                    label=f"{variant} ({len(group)} seed{'s' * (len(group) > 1)})")
        ax.set(title=title(metric), xlabel="model updates",
               ylabel=axis_label(metric) + ("" if metric.startswith("eval") else f"\n({window}-update mean)"))
    return legend_below(fig, axes, ncols=3)


def analysis_figure(result: dict):
    """(a) share of the tokens vs of the gradient from low-p tokens; (b) how one step moves the high-p tokens."""
    g, steps = result["gradient"], result["update"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(15, 5.2))
    names = ["tokens", "gradient\nat the logits", "gradient\nat the weights"]
    low = [g["token_share_low"], g["logit_grad_share_low"], g["param_grad_share_low"]]
    a.bar(names, low, color="tab:red", label="low-probability tokens (p_old < 0.5)")
    a.bar(names, [1 - v for v in low], bottom=low, color="tab:blue", label="high-probability tokens (p_old ≥ 0.5)")
    a.set(ylabel="share (fraction of the total)", ylim=(0, 1),
          title="(a) Low-probability tokens: few tokens, much gradient")
    a.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncols=1, frameon=False)
    x = range(len(steps))
    b.bar([i - 0.2 for i in x], [v["same_as_low_only_high"] for v in steps.values()], 0.4,
          label="moves as under the low-p-only step")
    b.bar([i + 0.2 for i in x], [v["wrong_high"] for v in steps.values()], 0.4, label="moves against its advantage")
    b.set(xticks=list(x), xticklabels=[f"step from\n{k}" for k in steps], ylabel="share of high-p tokens", ylim=(0, 1),
          title="(b) How one gradient step moves the high-p tokens")
    b.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncols=1, frameon=False)
    fig.tight_layout()
    return fig


def analysis_tables(result: dict, model: str) -> str:
    """The per-token analysis (`lopti.per_token_analysis`) as two markdown tables under a line naming the model and
    the batch: (a) what low- and high-probability tokens carry of the gradient, (b) how one step moves them."""
    g, pct = result["gradient"], lambda v: f"{v:.0%}"
    low, high = f"low-p (p_old < {result['eta']})", "high-p"
    shares = tables.table(("(a) on one rollout batch", low, high), [
        ("share of the response tokens", f"{g['token_share_low']:.1%}", f"{1 - g['token_share_low']:.1%}"),
        ("mean gradient norm at the logits", f"{g['mean_norm_low']:.3f}", f"{g['mean_norm_high']:.3f}"),
        ("share of the gradient at the logits", pct(g["logit_grad_share_low"]), pct(1 - g["logit_grad_share_low"])),
        ("share of the gradient at the weights", pct(g["param_grad_share_low"]), pct(1 - g["param_grad_share_low"])),
        ("gradient norm at the weights", f"{g['param_grad_norm_low']:.4f}", f"{g['param_grad_norm_high']:.4f}")])
    steps = tables.table(("(b) one step from", "high-p tokens moving as under low-p only", "high-p against their advantage",
                   "low-p against theirs"),
                  [(name, pct(row["same_as_low_only_high"]), pct(row["wrong_high"]), pct(row["wrong_low"]))
                   for name, row in result["update"].items()])
    return (f"{model}: {result['tokens']} response tokens, mean reward {result['reward']:.2f}; the low-p and "
            f"high-p gradients at the weights have cosine {g['param_grad_cosine']:.2f}.\n\n{shares}\n\n{steps}")


def setting_name(config) -> str:
    """A chapter 4 setting's name: its task's (verdicts.LOPTI_TASK_NAMES), with the puzzle sizes on Knights and
    Knaves ("Knights and Knaves, 2-3 people")."""
    name = verdicts.LOPTI_TASK_NAMES[config.task]
    people = config.task_params.get("num_people") if config.task == "knights_knaves" else None
    if people is None:
        return name
    sizes = sorted(people) if isinstance(people, (list, tuple)) else [people]
    return f"{name}, {sizes[0]}{f'-{sizes[-1]}' if len(sizes) > 1 else ''} people"


def verdict_rows(by_setting: dict) -> list:
    """The chapter's one verdict table: `verdicts.lopti_signatures` of each setting's runs ({key: RunSet}, in that
    order), each claim naming its setting ("Knights and Knaves, 2 people: ar beats GRPO"). A setting the profile does
    not define (an empty sweep: no configs) has no rows."""
    rows = []
    for runs in by_setting.values():
        if not runs.configs:
            continue
        name = setting_name(runs.configs[0])
        rows += [s if s.claim.startswith("GRPO learns") else dataclasses.replace(s, claim=f"{name}: {s.claim}")
                 for s in verdicts.lopti_signatures(runs, runs.configs[0].task, name)]
    return rows


def verdict_table(by_setting: dict) -> str:
    """The chapter's one verdict table (`verdict_rows`) under one line naming each setting and its budget, the seeds
    of all the runs, the code that made them and how many settings have no stored run."""
    shown = {key: runs for key, runs in by_setting.items() if runs.configs}
    every = RunSet([run for runs in shown.values() for run in runs])
    every.missing = [config for runs in shown.values() for config in getattr(runs, "missing", [])]
    settings = "; ".join(f"{setting_name(runs.configs[0])}, {runs.configs[0].total_updates} updates"
                         + (" (the paper: 3-7 people)" if runs.configs[0].task == "knights_knaves" else "")
                         for runs in shown.values())
    return tables.verdict_table(verdict_rows(shown), every, settings)


def explorer_figure(runs, alpha: float, eta: float, metric: str = "eval_greedy_acc"):
    """The stored runs with (ar_alpha, lopti_eta) = (alpha, eta) next to plain GRPO (replayed, no training)."""
    fig = curves_figure([r for r in runs if (r.config.ar_alpha, r.config.lopti_eta) in ((alpha, eta), (0.0, 0.0))],
                        (metric,))
    if not any((r.config.ar_alpha, r.config.lopti_eta) == (alpha, eta) for r in runs):
        fig.axes[0].set_title(f"{title(metric)}: no stored run with alpha = {alpha}, eta = {eta} (GRPO only)")
    return fig


def variant_explorer(runs, metrics=("eval_greedy_acc", "eval_sampled_acc", "reward", "low_prob_frac", "entropy")):
    """Explorer: AR's alpha and Lopti's eta among the stored runs, next to plain GRPO (means over seeds)."""
    from .explorer import Control, Explorer, line

    alphas, etas = sorted({r.config.ar_alpha for r in runs}), sorted({r.config.lopti_eta for r in runs})
    metrics = [m for m in metrics if any(run.series(m)[0] for run in runs)]

    def view(alpha, eta, metric):
        window = 1 if metric.startswith("eval") else 5
        chosen = [r for r in runs if (r.config.ar_alpha, r.config.lopti_eta) == (float(alpha), float(eta))]
        grpo = [r for r in runs if (r.config.ar_alpha, r.config.lopti_eta) == (0.0, 0.0)]
        traces = [line(*_mean_series(grpo, metric, window), f"grpo ({len(grpo)} seeds)", "black", dash="dot")]
        if chosen and chosen != grpo:
            name = variant_of(chosen[0].config)
            traces.append(line(*_mean_series(chosen, metric, window), f"{name} ({len(chosen)} seeds)",
                               None, markers=window == 1))
        heading = (f"{title(metric)}: alpha = {alpha}, eta = {eta}" if chosen
                   else f"no stored run with alpha = {alpha}, eta = {eta}: GRPO only")
        return {"data": traces, "layout": {"title": {"text": heading}, "xaxis": {"title": {"text": "model updates"}},
                                           "yaxis": {"title": {"text": axis_label(metric)}}}}

    controls = [Control("alpha", "AR alpha", alphas, value=max(alphas)), Control("eta", "Lopti eta", etas,
                value=max(etas)), Control("metric", "metric", metrics,
                labels={m: title(m) for m in metrics})]
    return Explorer("Advantage Reweighting and Lopti (stored runs)",
                    "Pick AR's alpha and Lopti's eta: the variant's curve against plain GRPO (dotted). alpha = eta = 0 "
                    "is GRPO itself; eta < 0 reverses Lopti's order (the paper's ablation). Look at whether any "
                    "variant ends above GRPO by more than the spread between seeds.", controls, view)
