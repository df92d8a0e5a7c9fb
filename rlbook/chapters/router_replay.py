"""Chapter 6's analysis: the routing mismatch measured on a model, and the runs with and without R3.

R3, "Stabilizing MoE Reinforcement Learning by Aligning Training and Inference Routers" (arXiv 2510.11370).
`mismatch` samples one rollout batch the way the trainer does (a rollout copy, router-logit noise, the experts
recorded) and measures, against the float32 training forward, the routing mismatch, the train-vs-rollout k3 KL
and F(2), without and with replay. The figures read stored runs. The paper's own numbers are in
`rlbook.chapters.papers`.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..losspath import sequence_inputs, token_stats
from ..rollout import rollout
from ..router_replay import (NOT_ROUTED, RoutingRecorder, extreme_fraction, own_experts, predicting_positions,
                             rollout_copy, routing_mismatch)
from .. import stats
from .run_groups import aggregate, finish, group_runs, variant
from . import tables
from .style import METRICS as STYLE_METRICS
from .verdicts import per_seed, token_share

VARIANT_COLORS = {"grpo": "tab:blue", "grpo+r3": "tab:green", "tis": "tab:orange", "gspo": "tab:purple"}
METRICS = {"routing_mismatch": ("Routing mismatch (trainer's own routing vs rollout)",
                                 "share of (token, layer) decisions"),
           "f2": ("Extreme tokens F(2)", "share of response tokens"),
           "kl_k3": ("Train-vs-rollout KL", "KL, k3 estimate (nats)"),
           "grad_norm": ("Gradient norm (before clipping)", "L2 norm of the gradient"),
           "clip_frac": ("Clipped tokens", "share of response tokens")}


def _log_ratio_stats(logp, batch) -> dict:
    mask, blogp = batch.response_mask.to(logp.device), batch.behavior_logp.to(logp.device)
    log_ratio = (logp.detach() - blogp) * mask
    kl = ((torch.exp(log_ratio) - 1 - log_ratio) * mask).sum() / mask.sum()
    return {"kl_k3": kl.item(), "f2": extreme_fraction(logp, blogp, mask)}


@torch.no_grad()
def mismatch(model, tokenizer, task, problems, group_size: int, max_new_tokens: int, noise: float = 0.0,
             dtype: str = "bfloat16", seed: int = 0) -> tuple[dict, object]:
    """({routing_mismatch, routing_mismatch_layers, kl_k3, f2, kl_k3_r3, f2_r3}, the rollout batch): one rollout
    batch sampled as the trainer samples it, against the float32 training forward without and with replay."""
    policy, device = rollout_copy(model, dtype), next(model.parameters()).device
    recorder = RoutingRecorder(policy, noise, torch.Generator(device=device).manual_seed(seed + 1))
    batch = rollout(policy, tokenizer, task, problems, group_size, max_new_tokens, 1.0,
                    torch.Generator(device=device).manual_seed(seed), policy_version=0, router=recorder)
    own = own_experts(model, lambda: model(**sequence_inputs(model, batch)))
    layers = routing_mismatch(batch.routing, own, predicting_positions(batch.prompt_ids.shape[1],
                                                                        batch.response_mask))
    out = {"noise": noise, "routing_mismatch": float(np.mean(layers)), "routing_mismatch_layers": layers}
    for replay, suffix in ((False, ""), (True, "_r3")):
        batch.replay_routing = replay
        stats = _log_ratio_stats(token_stats(model, batch, 1.0, "reference")[0], batch)
        out.update({key + suffix: value for key, value in stats.items()})
    batch.replay_routing = False
    return out, batch


def token_routes(model, batch, row: int = 0, layer: int = 0) -> dict:
    """The experts of one rollout row at one layer, position by position: the rollout's, the trainer's own (float32
    forward), and which positions flipped; only positions whose output predicts a response token."""
    own = own_experts(model, lambda: model(**sequence_inputs(model, batch.select([row]))))[layer]
    recorded = batch.routing[row, layer].long()
    keep = predicting_positions(batch.prompt_ids.shape[1], batch.response_mask[row:row + 1])[0]
    keep &= recorded[:, 0] != NOT_ROUTED
    ids = torch.cat([batch.prompt_ids[row], batch.response_ids[row]])
    return {"positions": keep.nonzero()[:, 0].tolist(), "tokens": ids[keep].tolist(),
            "rollout": recorded[keep].tolist(), "trainer": own[keep].tolist(),
            "flipped": [sorted(a) != sorted(b) for a, b in zip(recorded[keep].tolist(), own[keep].tolist())]}


def most_flipped(model, batch, layer: int = 0) -> int:
    """The row of a batch with the most flipped routing decisions at `layer` (positions predicting a response token)."""
    recorded = batch.routing[:, layer].long()
    own = own_experts(model, lambda: model(**sequence_inputs(model, batch)))[layer].view(recorded.shape).cpu()
    flipped = (own.sort(-1).values != recorded.sort(-1).values).any(-1)
    flipped &= predicting_positions(batch.prompt_ids.shape[1], batch.response_mask) & (recorded[..., 0] != NOT_ROUTED)
    return int(flipped.sum(1).argmax())


def routes_figure(routes: dict, tokenizer, num_experts: int, layer: int = 0):
    """Which experts each token went to at rollout (filled squares) and in the trainer (rings); flipped tokens
    shaded."""
    n = len(routes["tokens"])
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * n + 2), 4))
    for x, (a, b, flip) in enumerate(zip(routes["rollout"], routes["trainer"], routes["flipped"])):
        if flip:
            ax.axvspan(x - 0.5, x + 0.5, color="tab:red", alpha=0.12, lw=0)
        ax.scatter([x] * len(a), a, marker="s", s=150, color="tab:blue", label="rollout (bfloat16 engine)" if x == 0 else None)
        ax.scatter([x] * len(b), b, marker="o", s=260, facecolors="none", edgecolors="black", lw=1.8,
                   label="trainer (float32, full sequence)" if x == 0 else None)
    labels = [repr(tokenizer.decode([t]))[1:-1].replace(" ", "space") for t in routes["tokens"]]
    ax.set_xticks(range(n), labels)
    ax.set_yticks(range(num_experts))
    ax.set(xlabel="input token at the position (its output predicts the next response token)", ylabel="expert",
           title=f"Experts chosen at layer {layer}, token by token (shaded: the two disagree)",
           ylim=(-0.7, num_experts - 0.3))
    return finish(fig, ax, ncols=2)


def dose_figure(rows: list[dict]):
    """Routing mismatch, KL and F(2) against the router-logit noise, without and with replay."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    noise = [r["noise"] for r in rows]
    axes[0].plot(noise, [r["routing_mismatch"] for r in rows], "o-", color="black", label="routing mismatch")
    for ax, key in zip(axes[1:], ("kl_k3", "f2")):
        ax.plot(noise, [r[key] for r in rows], "o-", color=VARIANT_COLORS["grpo"], label="trainer routes itself")
        ax.plot(noise, [r[key + "_r3"] for r in rows], "s--", color=VARIANT_COLORS["grpo+r3"],
                label="trainer replays the rollout's experts (R3)")
    for ax, key in zip(axes, ("routing_mismatch", "kl_k3", "f2")):
        ax.set(xlabel="std of the router-logit noise at rollout", ylabel=METRICS[key][1], title=METRICS[key][0])
    axes[1].set_yscale("log")
    fig.suptitle("How much the rollout and the trainer disagree, by the dose of router noise (bfloat16 engine)")
    return finish(fig, axes, ncols=3)


def _label(metric: str) -> tuple[str, str]:
    """(title, axis label with unit) of a metric."""
    return {**STYLE_METRICS, **METRICS}.get(metric, (metric, metric))


def training_curves(runs, metrics=("kl_k3", "f2", "routing_mismatch", "clip_frac", "eval_greedy_acc", "grad_norm"),
                    window: int = 10):
    """One panel per metric over model updates (3 per row), one line per variant (mean over seeds, band: min-max)."""
    rows = -(-len(metrics) // 3)
    fig, axes = plt.subplots(rows, 3, figsize=(15, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(metrics):]:
        ax.remove()
    for ax, metric in zip(axes.flat, metrics):
        w = 1 if metric.startswith("eval") else window
        for name, seeds in group_runs(runs, key=variant).items():
            x, mean, low, high = aggregate(seeds, metric, w)
            ax.plot(x, mean, color=VARIANT_COLORS.get(name), marker="o" if w == 1 else None, ms=4,
                    label=f"{name} ({len(seeds)} seed{'s' * (len(seeds) > 1)})")
            if len(seeds) > 1:
                ax.fill_between(x, low, high, color=VARIANT_COLORS.get(name), alpha=0.15, lw=0)
        ax.set(title=_label(metric)[0], xlabel="model updates", ylabel=_label(metric)[1])
        if metric in ("kl_k3", "grad_norm"):
            ax.set_yscale("log")
    fig.suptitle(f"Training with and without router replay (mean over seeds, band: min-max; training metrics: "
                 f"{window}-update mean)")
    return finish(fig, axes.flat[:len(metrics)], ncols=4)


def score_table(runs) -> str:
    """Markdown: per variant, the score (mean of the last 3 evaluations) and the means over updates of the routing
    mismatch, KL, F(2) and clipped share, each as seed mean ± standard error."""
    over_seeds, plus_minus = tables.over_seeds, tables.plus_minus
    share = lambda key: over_seeds(lambda r: token_share(r, key), lambda e: f"{100 * e.mean:.2f}% ± {100 * e.se:.2f}")
    columns = {"seeds": len, "greedy score": over_seeds(stats.score, plus_minus()),
               "routing mismatch (trainer's own routing)": share("routing_mismatch"),
               "KL (k3)": over_seeds(lambda r: token_share(r, "kl_k3"), lambda e: f"{e.mean:.2e} ± {e.se:.1e}"),
               "F(2)": share("f2"), "clipped": share("clip_frac")}
    return tables.score_table(group_runs(runs, key=variant), columns, "variant")


def mean_over_updates(runs, name: str, key: str = "kl_k3") -> stats.Estimate | None:
    """The seed mean ± s.e. of a metric's mean over each run's updates, for one variant's runs ("grpo", "grpo+r3",
    ...), as the score table and the verdict rows compute it; None where none of its runs is stored."""
    seeds = group_runs(runs, key=variant).get(name, [])
    return per_seed(seeds, lambda r: token_share(r, key)) if seeds else None


def explorer(sources: dict, metrics=("eval_greedy_acc", "eval_sampled_acc", "kl_k3", "f2", "routing_mismatch",
                                      "clip_frac", "grad_norm", "reward")):
    """Explorer: pick a set of runs (this notebook's, the reference runs) and a metric; one line per
    variant (mean over seeds; training metrics as a 10-update mean)."""
    from .explorer import Control, Explorer, line

    sources = {name: runs for name, runs in sources.items() if runs}

    def view(source, metric):
        traces = []
        for name, seeds in group_runs(sources[source], key=variant).items():
            x, mean, _, _ = aggregate(seeds, metric, 1 if metric.startswith("eval") else 10)
            traces.append(line(x, mean, f"{name} ({len(seeds)} seed{'s' * (len(seeds) > 1)})",
                               VARIANT_COLORS.get(name), markers=metric.startswith("eval")))
        log = metric in ("kl_k3", "grad_norm")
        return {"data": traces, "layout": {"title": {"text": f"{_label(metric)[0]}: {source}"},
                                           "xaxis": {"title": {"text": "model updates"}},
                                           "yaxis": {"title": {"text": _label(metric)[1]},
                                                     **({"type": "log"} if log else {})}}}

    controls = [Control("source", "runs", list(sources)),
                Control("metric", "metric", list(metrics), labels={m: _label(m)[0] for m in metrics})]
    return Explorer("Explore the router-replay runs (stored runs)",
                    "Pick the runs and a metric: one line per variant (mean over seeds). Look at the gap between "
                    "grpo and grpo+r3 in KL and F(2), and whether it shows in accuracy.", controls, view)
