"""Chapter 5's verdicts: the paper reports / we observe / verdict, over the reference trajectories.

Chapter 5's signatures (PMA, arXiv 2505.12082) from the reference trajectories: the paper reports / we observe /
verdict, with the rule of rlbook.stats (two standard errors over trajectory seeds).

Each trajectory seed (`pma.load_references`) is one sample of every quantity. The merge is fixed before looking: SMA
of the last `focus_n` stable-phase checkpoints (N = 10 in the cpu profile, the paper's default), ending at the last
checkpoint before the decay. It is compared with that checkpoint and with the twin annealed at equal tokens (same
seed and data, its decay ending at that checkpoint). The merge and both baselines come from the same trajectory, so
every effect is a per-seed difference (paired), averaged over seeds.
"""
from __future__ import annotations

from dataclasses import fields

from .. import stats
from ..runset import seed_list
from . import papers, tables
from .pma import merge_name
from .verdicts import MATCH_BOUND, Signature

# "Close to the annealed model": the merge closes at least this share of the held-out-loss gap between the last
# checkpoint and the twin annealed at equal tokens (the share the notebook's summary calls "nearly").
CLOSE_SHARE = 0.9
BEATS_LAST, NEARS_ANNEALED = papers.PMA_BEATS_LAST.text, papers.PMA_NEARS_ANNEALED.text
CLAIMS = (("Merging the last N stable checkpoints lowers the held-out loss below the last checkpoint's", BEATS_LAST),
          ("The merge's greedy accuracy is at least that of the last checkpoint", BEATS_LAST),
          ("The merge comes close to the model annealed at equal tokens (closes >= "
           f"{CLOSE_SHARE:.0%} of the loss gap)", NEARS_ANNEALED),
          ("The merge's greedy accuracy is at least that of the model annealed at equal tokens", NEARS_ANNEALED))


def merge_outcomes(reference, method: str = "sma", n: int | None = None) -> dict:
    """One trajectory's {'merged' | 'last' | 'annealed_equal' | 'annealed': {'loss', 'acc'}} for the `method` merge
    of the last `n` (default: focus_n) stable checkpoints ending at the last one."""
    c = reference.config
    name = merge_name(method, n or c.focus_n, reference.end, c.alpha)
    if name not in reference.merges:
        raise ValueError(f"{reference.path}: no stored merge {name!r}; stored: {', '.join(sorted(reference.merges))}")
    return {"merged": reference.merges[name], "last": reference.checkpoints[str(reference.end)],
            "annealed_equal": reference.checkpoints["annealed_equal"], "annealed": reference.checkpoints["annealed"]}


def _same_settings(references) -> None:
    """The seeds of one verdict must differ in their seed only."""
    settings = {tuple((f.name, str(getattr(r.config, f.name))) for f in fields(r.config) if f.name != "seed")
                for r in references}
    if len(settings) > 1:
        raise ValueError(f"the reference trajectories differ in more than their seed: {sorted(settings)}")


def _g(e: stats.Estimate) -> str:
    """An estimate of a small quantity (a held-out loss near 0 nats) to 3 significant digits."""
    return f"{e.mean:.3g} ± {e.se:.2g} (n={e.n})"


def merging_signatures(references, method: str = "sma", n: int | None = None) -> list[Signature]:
    """PMA's two claims on our reference trajectories, in held-out loss and greedy accuracy: the merge improves on
    the last stable checkpoint (loss lower; accuracy no worse, within MATCH_BOUND) and comes close to the twin
    annealed at equal tokens (closes >= CLOSE_SHARE of the loss gap; accuracy no worse, within MATCH_BOUND)."""
    if not references:
        return [Signature(claim, paper, "no reference trajectories", "no runs") for claim, paper in CLAIMS]
    _same_settings(references)
    n = n or references[0].config.focus_n
    outcomes = [merge_outcomes(r, method, n) for r in references]
    seeds = lambda quantity: stats.estimate([quantity(o) for o in outcomes])
    loss = {k: seeds(lambda o: o[k]["loss"]) for k in ("merged", "last", "annealed_equal")}
    acc = {k: seeds(lambda o: o[k]["acc"]) for k in ("merged", "last", "annealed_equal")}
    loss_drop = seeds(lambda o: o["last"]["loss"] - o["merged"]["loss"])
    acc_gain = seeds(lambda o: o["merged"]["acc"] - o["last"]["acc"])
    # merged below the point CLOSE_SHARE of the way from the last checkpoint's loss to the annealed twin's
    closeness = seeds(lambda o: o["last"]["loss"] - o["merged"]["loss"]
                      - CLOSE_SHARE * (o["last"]["loss"] - o["annealed_equal"]["loss"]))
    acc_vs_annealed = seeds(lambda o: o["merged"]["acc"] - o["annealed_equal"]["acc"])
    gaps = [(o["last"]["loss"] - o["merged"]["loss"]) / (o["last"]["loss"] - o["annealed_equal"]["loss"])
            for o in outcomes if o["last"]["loss"] > o["annealed_equal"]["loss"]]
    closed = f"{sum(gaps) / len(gaps):.1%} (mean over {len(gaps)} seeds)" if gaps else "n/a (no gap to close)"
    merge = f"the {method.upper()} merge of the last {n}"
    step = f"step {references[0].end}"
    observed = [f"held-out loss {_g(loss['last'])} at {step}, {_g(loss['merged'])} for {merge}; per seed, last minus "
                f"merge: {_g(loss_drop)}",
                f"greedy accuracy {acc['last'].mean:.3f} at {step}, {acc['merged'].mean:.3f} for {merge}; merge minus "
                f"last: {acc_gain} (no worse = above -{MATCH_BOUND})",
                f"held-out loss {_g(loss['merged'])} for {merge}, {_g(loss['annealed_equal'])} annealed at equal "
                f"tokens; the merge closes {closed} of the gap from {step}; loss drop minus {CLOSE_SHARE} x the "
                f"annealed twin's: {_g(closeness)} (close = above 0)",
                f"greedy accuracy {acc['merged'].mean:.3f} for {merge}, {acc['annealed_equal'].mean:.3f} annealed at "
                f"equal tokens; merge minus annealed: {acc_vs_annealed} (no worse = above -{MATCH_BOUND})"]
    verdicts = [stats.verdict(loss_drop, +1), stats.verdict(acc_gain, +1, -MATCH_BOUND), stats.verdict(closeness, +1),
                stats.verdict(acc_vs_annealed, +1, -MATCH_BOUND)]
    return [Signature(claim, paper, seen, verdict) for (claim, paper), seen, verdict in zip(CLAIMS, observed, verdicts)]


def summary_table(references) -> str:
    """Markdown: held-out loss and greedy accuracy, mean ± s.e. over the trajectory seeds, of the last stable
    checkpoint, both annealed models and every stored merge ending at the last stable checkpoint."""
    if not references:
        raise ValueError("no reference trajectories to summarise (data/runs/05_merging is empty?)")
    _same_settings(references)
    end = references[0].end
    rows = {f"last stable checkpoint (step {end})": [r.checkpoints[str(end)] for r in references],
            "annealed at equal tokens (twin)": [r.checkpoints["annealed_equal"] for r in references],
            f"annealed, final ({references[0].config.decay_steps} more steps)": [r.checkpoints["annealed"]
                                                                               for r in references]}
    names = sorted(set.intersection(*(set(r.merges) for r in references)),
                   key=lambda k: (references[0].merges[k]["method"], references[0].merges[k]["n"]))
    rows.update({f"merge {name}": [r.merges[name] for r in references] for name in names
                 if references[0].merges[name]["end"] == end})
    columns = {"held-out loss": tables.over_seeds(lambda v: v["loss"], _g), "greedy accuracy": tables.over_seeds(
        lambda v: v["acc"])}
    return tables.score_table(rows, columns, "model")


def reference_line(references) -> str:
    """The line naming the reference trajectories under the chapter's figure and table: how many, their seeds, the
    model and length, where they were trained, and whether this code made them."""
    seeds = [r.config.seed for r in references]
    older = [r.config.seed for r in references if not r.current]
    devices = ", ".join(sorted({r.meta["trajectory"]["device"] for r in references}))
    made = f"made by older code (seeds {seed_list(older)}), recomputation pending" if older else "made by this code"
    first = references[0].config
    return (f"{len(references)} reference trajectories, seeds {seed_list(seeds)}: {first.preset}, {first.max_steps} "
            f"steps, trained on {devices}; {made}")
