"""Chapter 1's GRPO run trained by TRL beside rlbook's: the TRL runs, and the speed and accuracy of both from the runs.

    pip install -e ".[trl]"
    python bench/trl_chapter1.py train --seeds 0 1 2 [--store data/runs]     # TRL runs into <store>/01_grpo_trl
    python bench/trl_chapter1.py report --seeds 0 1 2 [--store data/runs]    # writes bench/results/trl_chapter1-*.json

`train` trains (or replays) chapter 1's cpu config with rlbook.trl_backend (rlbook.chapters.backends.trl_config:
rlbook's engine options at their defaults, as TRL runs its own generation and forward). `report` reads the TRL runs
and the rlbook runs of the same seeds (<store>/01_grpo, current code only) and records for each backend the final
greedy accuracy (mean and standard error over seeds), the median seconds per update and the wall time per run (both
from the runs' own clocks, evaluations excluded from the per-update time), and their ratios.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/learning_gain.py, when run as a script



def trl_config(seed: int):
    from rlbook.chapters.backends import trl_config

    return trl_config("cpu", seed)


def rlbook_config(seed: int):
    from rlbook.experiments import grpo_from_scratch

    return grpo_from_scratch("cpu", seed)


def per_run(run) -> dict:
    rows = run.metrics
    return {"run": str(run.path), "final_greedy": rows[-1]["eval_greedy_acc"], "base_greedy": rows[0]["eval_greedy_acc"],
            "s_per_update": statistics.median(r["update_s"] for r in rows[1:]), "wall_time_s": run.meta["wall_time_s"],
            "device": run.meta["device"], "git_commit": run.meta["git_commit"]}


def mean_se(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), (statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan"))


def report(store_root: str, seeds: list[int]) -> dict:
    from rlbook.runs import RunStore

    store, table = RunStore(store_root), {}
    for backend, make in (("rlbook", rlbook_config), ("trl", trl_config)):
        runs = [store.find(make(seed)) for seed in seeds]
        missing = [seed for seed, run in zip(seeds, runs) if run is None or not run.complete]
        if missing:
            raise SystemExit(f"{backend}: no finished run of seeds {missing} in {store.root} (train them first)")
        rows = [per_run(run) for run in runs]
        final, se = mean_se([r["final_greedy"] for r in rows])
        table[backend] = {"runs": rows, "final_greedy": final, "final_greedy_se": se,
                          "s_per_update": statistics.median(r["s_per_update"] for r in rows),
                          "wall_time_s": statistics.median(r["wall_time_s"] for r in rows)}
    gap = table["rlbook"]["final_greedy"] - table["trl"]["final_greedy"]
    table["comparison"] = {
        "accuracy_gap": gap,
        "two_se": 2 * (table["rlbook"]["final_greedy_se"] ** 2 + table["trl"]["final_greedy_se"] ** 2) ** 0.5,
        "speedup_per_update": table["trl"]["s_per_update"] / table["rlbook"]["s_per_update"],
        "speedup_wall": table["trl"]["wall_time_s"] / table["rlbook"]["wall_time_s"]}
    for backend in ("rlbook", "trl"):
        t = table[backend]
        print(f"{backend:<7} final greedy {t['final_greedy']:.3f} +- {t['final_greedy_se']:.3f}  "
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
    args = parser.parse_args()
    if args.command == "train":
        from rlbook.runs import RunStore
        from rlbook.trl_backend import train_with_trl

        for seed in args.seeds:
            print(train_with_trl(trl_config(seed), RunStore(args.store)).path)
        return 0
    table = report(args.store, args.seeds)
    from learning_gain import save_result

    save_result("trl_chapter1", table["trl"]["runs"][0]["device"].split()[0], {"seeds": args.seeds, "summary": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
