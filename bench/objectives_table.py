"""Final accuracy and clipped / masked token fraction of grpo, no_clip and m2po at staleness 0 and a large staleness.

    python bench/objectives_table.py --profile cpu --staleness 0 64 --seeds 0 1 2 [--set total_updates=240]

Runs go through the RunStore (rlbook.experiments.stale_run), so a second call replays them and prints the table;
several calls with disjoint --seeds can run in parallel. Writes the table as JSON to bench/results/.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from rlbook.experiments import stale_run
from rlbook.obtain import run_or_load

sys.path.insert(0, str(Path(__file__).parent))
from record import parse_setting, save_result  # noqa: E402

OBJECTIVES = ("grpo", "no_clip", "m2po")


def summary(run) -> dict:
    rows = [r for r in run.metrics if r["update"] > 0]
    _, greedy = run.series("eval_greedy_acc")
    return {"base_greedy": greedy[0], "final_greedy": greedy[-1], "best_greedy": max(greedy),
            "clip_frac": statistics.mean(r["clip_frac"] for r in rows if r.get("clip_frac") is not None),
            "mask_frac": statistics.mean(r["mask_frac"] for r in rows if r.get("mask_frac") is not None),
            "minutes": run.meta["wall_time_s"] / 60}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--staleness", nargs="+", type=int, default=[0, 64])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--set", nargs="*", default=[], help="config overrides key=value (JSON values)")
    args = parser.parse_args()
    changes = dict(parse_setting(s) for s in args.set)
    table = []
    for s in args.staleness:
        for objective in OBJECTIVES:
            runs = [run_or_load(stale_run(args.profile, objective, s, seed, **changes), progress=False,
                                references=False) for seed in args.seeds]
            rows = [summary(r) for r in runs]
            table.append({"objective": objective, "staleness": s, "seeds": args.seeds, "runs": [str(r.path) for r in runs],
                          **{k: [row[k] for row in rows] for k in rows[0]}})
    print(f"{'objective':<9} {'s':>4} {'greedy base':>11} {'final (mean +- sd)':>20} {'clip %':>7} {'mask %':>7} {'min/run':>7}")
    for t in table:
        sd = statistics.stdev(t["final_greedy"]) if len(t["final_greedy"]) > 1 else 0.0
        print(f"{t['objective']:<9} {t['staleness']:>4} {statistics.mean(t['base_greedy']):>11.3f} "
              f"{statistics.mean(t['final_greedy']):>12.3f} +- {sd:.3f} {100 * statistics.mean(t['clip_frac']):>7.3f} "
              f"{100 * statistics.mean(t['mask_frac']):>7.3f} {statistics.mean(t['minutes']):>7.2f}")
    save_result("objectives_table", args.profile, {"overrides": changes, "table": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
