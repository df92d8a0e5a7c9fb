"""The markdown tables a chapter page shows: settings, each run's score, scores over seeds, verdicts.

Tables a chapter page shows, as markdown (the book renders them as HTML tables): a config's settings, each run's
score, the score table every chapter builds (`score_table`: one row per setting, quantities over its seeds) and a
verdict table with the provenance line of the runs it rests on."""
from __future__ import annotations

from .. import stats
from ..runset import provenance, where_made
from .verdicts import Signature, markdown


def table(header, rows) -> str:
    """A markdown table from a header and rows of cells."""
    line = lambda cells: "| " + " | ".join(str(c) for c in cells) + " |"
    return "\n".join([line(header), "|---" * len(header) + "|", *map(line, rows)])


def plus_minus(digits: int = 3, sign: str = ""):
    """The text of an Estimate as "mean ± standard error" to `digits` decimals (sign "+": always signed)."""
    return lambda e: f"{e.mean:{sign}.{digits}f} ± {e.se:.{digits}f}"


def over_seeds(quantity, text=str):
    """A score-table cell: `quantity` of each run (or result) of a group, as stats.estimate over them, as `text`."""
    return lambda runs: text(stats.estimate([quantity(run) for run in runs]))


def score_table(groups: dict, columns: dict, label) -> str:
    """The chapters' score table: one row per group ({label cells (a tuple or one value): runs, e.g. a setting's
    seeds}), its label cells under the `label` headers, then one cell per column ({header: cell(runs) -> text},
    e.g. `over_seeds`)."""
    label, cells = (label if isinstance(label, tuple) else (label,)), lambda k: k if isinstance(k, tuple) else (k,)
    return table((*label, *columns), [(*cells(key), *(cell(runs) for cell in columns.values()))
                                      for key, runs in groups.items()])


def settings_table(config, keys) -> str:
    """The named fields of a RunConfig, one row each."""
    rows = ["| setting | value |", "|---|---|"]
    rows += [f"| `{key}` | {getattr(config, key)} |" for key in keys]
    return "\n".join(rows)


def run_scores(runs, metrics=("eval_greedy_acc", "eval_sampled_acc")) -> str:
    """One row per run: seed, base -> score of each metric (score: mean of the last 3 evaluations), wall time, and
    the code that made it and where."""
    head = " | ".join(f"{m.removeprefix('eval_').replace('_acc', '')} base → score" for m in metrics)
    rows = [f"| seed | {head} | seconds | made by |", "|---" * (len(metrics) + 3) + "|"]
    for run in runs:
        made = "this code" if run.current else f"older code (training version {run.training_version})"
        made += f", {where_made([run])}"
        cells = " | ".join(f"{stats.base_score(run, m):.3f} → {stats.score(run, m):.3f}" for m in metrics)
        rows.append(f"| {run.config.seed} | {cells} | {run.meta.get('wall_time_s', float('nan')):.0f} | {made} |")
    return "\n".join(rows)


def verdict_table(signatures: list[Signature], runs, title: str | None = None) -> str:
    """A verdict table (the paper found / reports / we observe / verdict), under a line naming its runs' seeds and the
    code that made them."""
    missing = len(getattr(runs, "missing", []))
    head = f"**{title}** ({provenance(runs, missing)})" if title else f"Runs: {provenance(runs, missing)}."
    return f"{head}\n\n{markdown(signatures)}"


def accuracy_by_size(labels: list[str], results: list[dict]) -> str:
    """Greedy accuracy per puzzle size, one row per labelled result ({"by_people": {n: acc} or None, "overall"})."""
    sizes = sorted({n for r in results for n in (r.get("by_people") or {})})
    rows = [(label, *(f"{(r.get('by_people') or {})[n]:.3f}" if n in (r.get("by_people") or {}) else "-"
                      for n in sizes), f"{r['overall']:.3f}") for label, r in zip(labels, results)]
    return table(("run", *(f"{n} people" for n in sizes), "overall"), rows)
