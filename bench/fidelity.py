"""Every chapter's signature table from the reference runs in data/runs: the paper reports / we observe / verdict.

    python bench/fidelity.py [--root data/runs] [--readme README.md book/index.md]
    python bench/fidelity.py --golden tests/golden/fidelity.json   # the golden tests/test_store_fidelity.py compares

The runs read are the ones the book shows (RunStore.as_shown): for each setting, the run made by the current code
(rlbook.versions), else the stored run made by older code, and each chapter's row counts how many of each it read.
Prints the tables and writes them as JSON to bench/results/fidelity/fidelity-<commit>-<time>.json; with --readme,
also replaces the chapter table of each file named (one row per chapter: its verdicts counted and its headline
claims) between the `<!-- fidelity:start -->` and `<!-- fidelity:end -->` markers, so neither the README nor the
book's landing page quotes a result by hand.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from record import save_result  # noqa: E402

from rlbook.chapters import drift_ladder, m2_axis, merging_verdicts, pma, rollout_precision, verdicts  # noqa: E402
from rlbook.chapters.run_groups import select  # noqa: E402
from rlbook.experiments import sweep  # noqa: E402
from rlbook.runs import RunStore, lookup, reference_root  # noqa: E402
from rlbook.runset import RunSet  # noqa: E402


def tau_runs(runs):
    """M2PO over tau at the largest staleness: the tau sweep's runs and, at the default tau, the staleness sweep's."""
    top = max((r.config.staleness for r in runs), default=0)
    return [r for r in runs if r.config.objective == "m2po" and r.config.staleness == top]


def staleness_sweep(runs):
    """The staleness sweep's runs (the tau sweep shares the experiment)."""
    return [r for r in runs if "tau" not in r.config.objective_params]


CHAPTERS = {
    "01 GRPO from scratch": ("01_grpo", verdicts.grpo_learns),
    "02 staleness (M2PO)": ("sweep:staleness", verdicts.staleness_signatures),
    "02 staleness at 2.8x the learning rate (fast drift)": ("02_fast_drift", verdicts.staleness_signatures),
    "02 staleness at half the learning rate, s up to 96 (slow drift)": ("sweep:slow_drift",
                                                                         verdicts.staleness_signatures),
    "02 the drift ladder (five learning rates, staleness scaled by the inverse)": (
        "sweep:drift_ladder", lambda runs: drift_ladder.signatures(drift_ladder.rungs(runs))),
    "02 no trust region vs GRPO and M2PO over 3x the updates, unclipped gradients, LoRA (long horizon)": (
        ("02_collapse_long", lambda runs: select(runs, finetune="lora")), verdicts.long_collapse_signatures),
    "02 no trust region vs GRPO and M2PO over 3x the updates, unclipped gradients, full fine-tuning "
    "(long horizon)": (
        ("02_collapse_long", lambda runs: select(runs, finetune="full")), verdicts.long_collapse_signatures),
    "03 clip vs mask (M2PO)": ("02_staleness", lambda runs: verdicts.clip_mask_signatures(staleness_sweep(runs))
                               + verdicts.entropy_signature(staleness_sweep(runs))
                               + verdicts.tau_signatures(tau_runs(runs))),
    "03 clip vs mask at half the learning rate (slow drift)": ("sweep:slow_drift", verdicts.clip_mask_signatures),
    "03 clip vs mask along the drift ladder": (
        "sweep:drift_ladder", lambda runs: drift_ladder.token_signatures(drift_ladder.rungs(runs))),
    "03 clip vs mask at one learning rate, staleness walked up (the M2 / tau axis)": ("sweep:fixed_rate_axis",
                                                                                      m2_axis.signatures),
    "03 clip vs mask with bfloat16 rollouts (the paper's inference/training mismatch)": (
        "sweep:fixed_rate_bf16", rollout_precision.signatures),
    "04 Lopti / Advantage Reweighting on arithmetic": ("sweep:lopti_arithmetic", verdicts.lopti_signatures),
    "04 Lopti / Advantage Reweighting on Knights and Knaves, 2-3 people": ("04_lopti", verdicts.lopti_signatures),
    "04 Lopti / Advantage Reweighting on Knights and Knaves, 2 people": (
        "sweep:lopti_kk", verdicts.lopti_signatures),
    "05 checkpoint merging (PMA)": (pma.REFERENCE_EXPERIMENT, merging_verdicts.merging_signatures),
    "06 router replay (R3)": ("06_router_replay", verdicts.router_replay_signatures),
    "07 semi-online RL": ("07_semi_online", verdicts.semi_online_signatures),
}


def stored(root: str, source) -> tuple[list, list]:
    """(every finished result a chapter row reads, current or not; those the book shows), from its source: an
    experiment's RunStore runs; (experiment, pick), the runs `pick` selects of them; "sweep:<name>", the cpu
    profile's configs of a sweep, as a RunSet (rlbook.runs.lookup): for a sweep that spans experiments, or shares one
    with other runs (chapter 3's and 4's tests of their explanations train beside the slow-drift and arithmetic sets); or chapter 5's merge
    results of trajectories (no weights, `pma.load_references`; all shown)."""
    experiment, pick = source if isinstance(source, tuple) else (source, lambda runs: runs)
    if experiment == pma.REFERENCE_EXPERIMENT:
        results = pma.load_references(root, current_only=False)
        return results, results
    if experiment.startswith("sweep:"):
        configs = sweep(experiment.removeprefix("sweep:"), "cpu")
        found = RunSet(lookup(configs, root), configs)
        return found, found
    store = RunStore(root)
    return pick([r for r in store.runs(experiment) if r.complete]), pick(store.as_shown(experiment))


def tables(root: str) -> dict:
    """Every chapter's verdicts from the runs stored under root: {title: {experiment, runs, current, superseded,
    made, signatures}} (what main prints and saves, and tests/golden/fidelity.json holds)."""
    result = {}
    for title, (source, signatures) in CHAPTERS.items():
        every, runs = stored(root, source)
        current = [r for r in runs if r.current]
        made = (f"{len(current)} made by this code" + (f", {len(runs) - len(current)} by older code (retraining "
                                                       "pending)" if len(current) < len(runs) else "")
                if runs else "none stored yet")
        result[title] = {"experiment": source[0] if isinstance(source, tuple) else source, "runs": len(runs),
                         "current": bool(current), "superseded": len(every) - len(runs), "made": made,
                         "signatures": [dataclasses.asdict(s) for s in (signatures(runs) if runs else [])]}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=str(reference_root()))
    parser.add_argument("--readme", type=Path, nargs="+", default=[],
                        help="files whose fidelity block to rewrite (README.md, book/index.md)")
    parser.add_argument("--golden", type=Path, help="write the tables to this file (tests/golden/fidelity.json) "
                                                    "instead of bench/results")
    args = parser.parse_args()
    chapters, summary = tables(args.root), []
    for title, table in chapters.items():
        rows = [verdicts.Signature(**s) for s in table["signatures"]]
        print(f"\n## {title}: {table['runs']} runs in {table['experiment']}: {table['made']} "
              f"({table['superseded']} superseded)")
        print(verdicts.markdown(rows) if rows else "no runs")
        summary.append(chapter_row(title, rows, table["made"]))
    if args.golden:
        args.golden.write_text(golden_text(chapters))
        print(f"wrote {args.golden}")
        return
    saved = {title: {k: v for k, v in table.items() if k != "made"} for title, table in chapters.items()}
    path = save_result("fidelity", "references", {"root": args.root, "chapters": saved})
    table = [HEADER, "|---|---|---|---|---|", *summary]
    for readme in args.readme:
        rewrite_block(readme, "\n".join(table) + f"\n\n(generated by `python bench/fidelity.py --readme README.md "
                                              f"book/index.md` from the stored reference runs; {path.name})")


def golden_text(chapters: dict) -> str:
    """The tables as the golden file holds them (sorted keys, one space indent)."""
    return json.dumps(chapters, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


SHOWN_CLAIMS = 2  # claims a README cell names before it counts the rest: a row read on a projector
LISTED_SETTINGS = 30  # characters: settings of one claim listed up to this long, counted beyond it


def claims_cell(rows, verdict: str) -> str:
    """The claims with `verdict`, short: a claim made per setting ("<setting>: <claim>", e.g. the drift ladder's
    rungs, chapter 7's objectives) once, with its settings listed or counted; at most SHOWN_CLAIMS, then how many
    more (the chapter's table has them all)."""
    settings = {}  # claim -> the settings it holds in, in table order
    for s in rows:
        if s.verdict == verdict:
            setting, _, claim = s.claim.rpartition(": ")
            settings.setdefault(claim, []).append(setting)
    shown = []
    for claim, where in settings.items():
        named = ", ".join(w for w in where if w)
        if len(where) == 1:
            shown.append(f"{named}: {claim}" if named else claim)
        else:
            shown.append(f"{claim} ({named if len(named) <= LISTED_SETTINGS else f'{len(where)} settings'})")
    more = len(shown) - SHOWN_CLAIMS
    text = "; ".join(shown[:SHOWN_CLAIMS]) + (f"; and {more} more" if more > 0 else "")
    return text.replace("|", "\\|") or "-"


HEADER = "| chapter | verdicts: reproduced / not / within noise | reproduced | not reproduced | runs |"


def chapter_row(title: str, rows, made: str) -> str:
    """One README row (under HEADER): a chapter's verdicts counted, the claims reproduced and not reproduced
    (claims_cell), and its runs."""
    count = lambda verdict: sum(s.verdict == verdict for s in rows)
    counts = (f"{count('reproduced')} / {count('not reproduced')} / {count('within noise')}" if rows else "no runs")
    return f"| {title} | {counts} | {claims_cell(rows, 'reproduced')} | {claims_cell(rows, 'not reproduced')} | {made} |"


def rewrite_block(readme: Path, text: str, start: str = "<!-- fidelity:start -->", end: str = "<!-- fidelity:end -->"):
    """Replace what lies between the two markers of `readme` with `text` (atomically)."""
    old = readme.read_text()
    if old.count(start) != 1 or old.count(end) != 1:
        raise SystemExit(f"{readme} needs exactly one {start} and one {end} line around the tables")
    head, rest = old.split(start)
    tmp = readme.with_suffix(".tmp")
    tmp.write_text(head + start + "\n" + text + "\n" + end + rest.split(end)[1])
    tmp.replace(readme)


if __name__ == "__main__":
    main()
