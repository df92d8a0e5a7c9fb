"""Chapter 1's GRPO run trained by TRL beside rlbook's: the TRL runs, and the speed and accuracy of both from the runs.

    pip install -e ".[trl]"
    python bench/trl_chapter1.py train --seeds 0 1 2 [--backends trl rlbook] [--updates N] [--store data/runs]
    python bench/trl_chapter1.py report --seeds 0 1 2 [--updates N] [--store data/runs]   # bench/results/trl_chapter1/

`train` trains (or replays) chapter 1's cpu config with rlbook.trl_backend into <store>/01_grpo_trl
(rlbook.chapters.backends.trl_config: rlbook's engine options at their defaults, as TRL runs its own generation and
forward) and, with `--backends rlbook`, with rlbook's trainer into <store>/01_grpo; `--updates` shortens both runs
(default: the chapter's budget). `report` reads both backends' runs of the same seeds (current code only) and records
for each the score (greedy accuracy, the mean of a run's last 3 evaluations; mean and standard error over seeds), the
median seconds per update (generation and update, evaluations excluded: rlbook's update_s + sample_s, TRL's update_s)
and the wall time per run, both from the runs' own clocks, and their ratios, with the load average of the machine when
the report was made.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/record.py, when run as a script



def trl_config(seed: int, updates: int | None = None):
    from rlbook.chapters.backends import trl_config

    config = trl_config("cpu", seed)
    return config.replace(total_updates=updates, name=f"{config.name}-u{updates}") if updates else config


def rlbook_config(seed: int, updates: int | None = None):
    from rlbook.experiments import grpo_from_scratch

    config = grpo_from_scratch("cpu", seed)
    return config.replace(total_updates=updates, name=f"{config.name}-u{updates}") if updates else config


def per_run(run) -> dict:
    rows = run.metrics
    from rlbook import stats

    return {"run": str(run.path), "score": stats.score(run), "base_greedy": stats.base_score(run),
            "s_per_update": statistics.median(r["update_s"] + r.get("sample_s", 0.0) for r in rows[1:]),
            "wall_time_s": run.meta["wall_time_s"],
            "device": run.meta["device"], "git_commit": run.meta["git_commit"]}


def mean_se(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan"))


def report(store_root: str, seeds: list[int], updates: int | None) -> dict:
    from rlbook.runs import RunStore

    store, table = RunStore(store_root), {}
    for backend, make in (("rlbook", rlbook_config), ("trl", trl_config)):
        runs = [store.find(make(seed, updates)) for seed in seeds]
        missing = [seed for seed, run in zip(seeds, runs) if run is None or not run.complete]
        if missing:
            raise SystemExit(f"{backend}: no finished run of seeds {missing} in {store.root} (train them first)")
        rows = [per_run(run) for run in runs]
        score, se = mean_se([r["score"] for r in rows])
        table[backend] = {"runs": rows, "score": score, "score_se": se,
                          "s_per_update": statistics.median(r["s_per_update"] for r in rows),
                          "wall_time_s": statistics.median(r["wall_time_s"] for r in rows)}
    gap = table["rlbook"]["score"] - table["trl"]["score"]
    table["comparison"] = {
        "accuracy_gap": gap,
        "two_se": 2 * (table["rlbook"]["score_se"] ** 2 + table["trl"]["score_se"] ** 2) ** 0.5,
        "speedup_per_update": table["trl"]["s_per_update"] / table["rlbook"]["s_per_update"],
        "speedup_wall": table["trl"]["wall_time_s"] / table["rlbook"]["wall_time_s"]}
    for backend in ("rlbook", "trl"):
        t = table[backend]
        print(f"{backend:<7} score (greedy, mean of the last 3 evaluations) {t['score']:.3f} +- {t['score_se']:.3f}  "
              f"{t['s_per_update']:.3f} s/update  {t['wall_time_s']:.0f} s/run")
    c = table["comparison"]
    print(f"rlbook - trl: {c['accuracy_gap']:+.3f} (2 s.e. {c['two_se']:.3f}); rlbook is {c['speedup_per_update']:.2f}x "
          f"faster per update, {c['speedup_wall']:.2f}x per run")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["train", "report"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--store", default="data/runs", help="RunStore root of both backends' runs")
    parser.add_argument("--backends", nargs="+", default=["trl"], choices=["trl", "rlbook"], help="what `train` trains")
    parser.add_argument("--updates", type=int, default=None, help="updates per run (default: the chapter's)")
    args = parser.parse_args()
    if args.command == "train":
        from rlbook.obtain import run_or_load
        from rlbook.runs import RunStore
        from rlbook.trl_backend import train_with_trl

        store = RunStore(args.store)
        for seed in args.seeds:
            for backend in args.backends:
                run = (train_with_trl(trl_config(seed, args.updates), store) if backend == "trl"
                       else run_or_load(rlbook_config(seed, args.updates), store))
                print(run.path)
        return 0
    import os

    table = report(args.store, args.seeds, args.updates)
    from record import save_result

    save_result("trl_chapter1", table["trl"]["runs"][0]["device"].split()[0],
                {"seeds": args.seeds, "updates": args.updates, "load_average": os.getloadavg(), "summary": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
