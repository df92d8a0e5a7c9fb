"""Train the book's reference runs into data/runs, most important first, shared by several processes (not a test).

    python bench/reference_runs.py --part 0/2 &   python bench/reference_runs.py --part 1/2 &
    python bench/reference_runs.py --list          # the queue, with what is stored and current
    python bench/reference_runs.py --sweep fixed_rate,fixed_rate_bf16 --part 0/2 &   # these sweeps alone, in order

The queue is QUEUE's sweeps in order (cpu profile); process i of n takes every n-th run, so two processes work down
the same priorities side by side. A run already stored under this code's training version is skipped; an
interrupted one resumes (rlbook.runs). Runs land in data/runs/<experiment>/, where a run made by an older training
version stays until its successor is stored (the book labels such runs; git keeps their history once removed).

What a finished run ships: its config, its meta and the metrics columns the book reads (SHIPPED_COLUMNS), from
which the book replays it. Its checkpoint (state.safetensors: the trainable weights, Adam's moments, the stale-batch
queue, the random stream) is what resuming needs, and a finished run never resumes, so it is removed. The one thing a
chapter computes from a run's final weights, chapter 4's accuracy by puzzle size (EVALUATED_AT_SHIP), is evaluated
before the checkpoint goes and cached in the run as accuracy_by_people.json: a reader who wants the weights, or a
metric the book does not show, retrains the run from its config. (Keeping them cost about 0.7 MB a LoRA run, tens of
MB a fully fine-tuned MoE, and three quarters of every table, in every clone for ever.)

    python bench/reference_runs.py --trim 03_fixed_rate 02_collapse_long   # cut stored runs to SHIPPED_COLUMNS
"""
from __future__ import annotations

import argparse
import time

from rlbook.chapters.lopti import run_accuracy_by_people
from rlbook.checkpoint import location
from rlbook.experiments import LADDER, sweep
from rlbook.obtain import run_or_load
from rlbook.runs import RunStore, reference_root

# Verdicts first: chapter 1, the drift ladder's rungs at the half and the reference rate, chapter 4 where GRPO learns
# (arithmetic), the ladder's quarter-rate rung (with the other two, the trend verdict's three rungs) and its fast
# rung; then what makes a whole chapter or section current for a few minutes a run (the M2PO variants, chapters 6
# and 7), chapter 2's long no-trust-region runs (full fine-tuning: about 20 min a run, but the collapse verdict needs
# their seeds), chapter 3's test of AReaL's denominator, chapter 2's staleness set, chapter 4's test of Lopti at half
# the rate, the ladder's slowest rung (the fifth rung the ladder needs); then chapter 3's tau sweep, chapter 2's
# fast-drift set, and last chapter 4 on K&K (the costliest a run). An entry is a sweep, or the ladder with the rungs it
# takes (by the learning rate's factor over the reference rate).
QUEUE = ("grpo", "slow_drift", ("drift_ladder", (0.5, 1.0)), "lopti_arithmetic", ("drift_ladder", (0.25, 2.0)),
         "m2po_variants", "router_replay", "semi_online", "collapse_long", "areal_denominator", "staleness",
         "lopti_half_rate", ("drift_ladder", (0.125,)), "tau", "fast_drift", "lopti")
# The metrics columns of each experiment that a chapter, its verdicts or the fidelity table reads (besides `update`),
# measured by building the book and the fidelity table with every read of a run's rows recorded (session 20): the
# rest of a row (timings, losses, the |r-1| bins of most experiments...) is dropped when a run ships. An experiment not
# listed keeps every column. A chapter that comes to read another column of stored runs finds it missing (its build
# fails): add the column here and retrain, or read it from runs that still hold it.
SHIPPED_COLUMNS = {
    "01_grpo": ("clip_frac", "entropy", "eval_greedy_acc", "eval_sampled_acc", "reward", "zero_std_frac"),
    "01_grpo_trl": ("eval_greedy_acc", "reward"),
    "02_collapse_long": ("eval_greedy_acc", "grad_norm", "m2"),
    "02_drift_ladder": ("clip_frac", "clip_frac_high", "clip_frac_low", "eval_greedy_acc", "m2", "mask_frac",
                        "policy_lag", "ratio_bins", "removed_frac_m2po", "tokens_neg_adv", "tokens_pos_adv",
                        "tokens_zero_adv"),
    "02_fast_drift": ("eval_greedy_acc", "policy_lag", "reward"),
    "02_slow_drift": ("clip_frac", "clip_frac_high", "clip_frac_low", "entropy_removed_m2po",
                      "entropy_removed_m2po_areal", "entropy_removed_m2po_cap", "eval_greedy_acc", "m2", "mask_frac",
                      "policy_lag", "removed_frac_m2po", "removed_frac_m2po_areal", "removed_frac_m2po_cap", "reward",
                      "tokens_neg_adv", "tokens_pos_adv", "tokens_zero_adv"),
    "02_staleness": ("clip_frac", "clip_frac_high", "clip_frac_low", "entropy", "entropy_clipped", "entropy_kept",
                     "entropy_masked", "eval_greedy_acc", "eval_sampled_acc", "grad_norm", "m2", "m2_kept",
                     "mask_frac", "policy_lag", "ratio_bins", "removed_frac_m2po", "reward", "tokens_neg_adv",
                     "tokens_pos_adv", "tokens_zero_adv", "tr_frac"),
    "03_fixed_rate": ("clip_frac", "eval_greedy_acc", "m2", "mask_frac"),
    "04_lopti": ("entropy", "eval_greedy_acc", "eval_sampled_acc", "low_prob_frac", "reward"),
    "04_lopti_arithmetic": ("eval_greedy_acc", "low_prob_frac"),
    "04_lopti_kk": ("eval_greedy_acc", "low_prob_frac"),
    "06_router_replay": ("clip_frac", "eval_greedy_acc", "eval_sampled_acc", "f2", "grad_norm", "kl_k3", "reward",
                         "routing_mismatch"),
    "07_semi_online": ("eval_greedy_acc", "eval_sampled_acc", "kl_k3", "loss", "m2", "policy_lag", "reward",
                       "sample_s", "update_s", "zero_std_frac"),
}
EVALUATED_AT_SHIP = ("04_lopti",)  # rlbook.chapters.lopti.run_accuracy_by_people: these (K&K) runs' accuracy by size


RUNG_ORDER = ("grpo", "m2po", "no_clip")  # within a rung: what its M2PO verdicts compare first (no trust region last)


def _rung_configs(rungs: tuple, profile: str) -> list:
    """The drift ladder's configs on the given rungs, in the rungs' order; within a rung on-policy GRPO first, then
    the largest staleness's cells in RUNG_ORDER."""
    base = sweep("staleness", profile)[0].lr
    configs = sweep("drift_ladder", profile)
    factor = {c.hash(): min(LADDER[profile], key=lambda r: abs(r - c.lr / base)) for c in configs}
    return [c for rung in rungs for c in sorted((c for c in configs if factor[c.hash()] == rung),
                                                key=lambda c: (c.staleness > 0, RUNG_ORDER.index(c.objective)))]


def queue(profile: str = "cpu", entries: tuple = QUEUE) -> list:
    """Every reference config of `entries` (default QUEUE) once, in their order."""
    seen, ordered = set(), []
    for entry in entries:
        name, configs = (entry, sweep(entry, profile)) if isinstance(entry, str) else \
            (entry[0], _rung_configs(entry[1], profile))
        for config in configs:
            if config.hash() not in seen:
                seen.add(config.hash())
                ordered.append((name, config))
    return ordered


def ship(run) -> None:
    """Remove a finished run's checkpoint, after caching what a chapter computes from its final weights, and cut its
    table to the columns the book reads (see the module's docstring)."""
    if not run.complete:
        return
    state_path = location(run.path)
    if state_path is not None:
        if run.config.experiment in EVALUATED_AT_SHIP:
            run_accuracy_by_people(run)  # evaluated now and cached in the run: the book only reads it
        state_path.unlink()
    if run.config.experiment in SHIPPED_COLUMNS:
        run.keep_columns(SHIPPED_COLUMNS[run.config.experiment])


def trim(experiments: list[str], store: RunStore) -> None:
    """Cut every complete stored run of `experiments` to SHIPPED_COLUMNS, saying what each experiment saved."""
    unknown = [e for e in experiments if e not in SHIPPED_COLUMNS]
    if unknown:
        raise SystemExit(f"no SHIPPED_COLUMNS for {unknown}; experiments with a list: {', '.join(SHIPPED_COLUMNS)}")
    for experiment in experiments:
        runs = [run for run in store.runs(experiment) if run.complete]
        saved = sum(run.keep_columns(SHIPPED_COLUMNS[experiment]) for run in runs)
        print(f"{experiment}: {len(runs)} runs cut to {len(SHIPPED_COLUMNS[experiment]) + 1} columns, "
              f"{saved / 2**20:.1f} MiB saved", flush=True)


def train_and_ship(config, store: RunStore):
    """The run of `config`, trained (or resumed) if `store` lacks it finished; a run this call finishes is shipped, a
    run stored finished before keeps what it was committed with."""
    stored = store.find(config)
    trains = stored is None or not stored.complete  # decided now: Run.complete reads meta.json when asked
    run = run_or_load(config, store, references=False)
    if trains:
        ship(run)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", default="0/1", help="i/n: this process takes every n-th run, starting at i")
    parser.add_argument("--list", action="store_true", help="print the queue and what is stored, train nothing")
    parser.add_argument("--trim", nargs="+", metavar="EXPERIMENT",
                        help="cut these experiments' stored runs to SHIPPED_COLUMNS, train nothing")
    parser.add_argument("--sweep", help="comma-separated sweeps (rlbook.experiments.SWEEPS) to train in this order, not QUEUE")
    args = parser.parse_args()
    store = RunStore(reference_root())
    if args.trim:
        return trim(args.trim, store)
    todo = queue(entries=tuple(args.sweep.split(",")) if args.sweep else QUEUE)
    if args.list:
        for i, (name, config) in enumerate(todo):
            run = store.find(config)
            state = "stored" if run is not None and run.complete else "partial" if run is not None else "to train"
            print(f"{i:4d} {name:<16} {config.experiment}/{config.name} ({config.total_updates} updates): {state}")
        return
    index, parts = map(int, args.part.split("/"))
    mine = todo[index::parts]
    for i, (name, config) in enumerate(mine, 1):
        tic = time.time()
        run = train_and_ship(config, store)
        print(f"[{i}/{len(mine)}] {name}: {run.path.relative_to(reference_root())} "
              f"({time.time() - tic:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
