"""Learning gain per CPU-minute: base accuracy, accuracy after GRPO, and the minutes it took (a benchmark, not a test).

    python bench/learning_gain.py --profiles smoke cpu --seeds 0 1 2 [--set lr=1e-3 finetune=full]

Runs chapter 1's experiment (rlbook.experiments.grpo_from_scratch) per profile and seed through the RunStore
(a finished run replays; delete runs/01_grpo to re-measure), prints a table and writes it as JSON to
bench/results/learning_gain/ with the command and the device.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from rlbook.experiments import grpo_from_scratch
from rlbook.obtain import run_or_load
from rlbook.storage import environment

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/record.py, when run as a script
from record import parse_setting, save_result  # noqa: E402


def measure(profile: str, seed: int, changes: dict) -> dict:
    tic = time.time()
    run = run_or_load(grpo_from_scratch(profile, seed, **changes), progress=False, references=False)
    _, greedy = run.series("eval_greedy_acc")
    _, sampled = run.series("eval_sampled_acc")
    return {"profile": profile, "seed": seed, "run": str(run.path), "base_greedy": greedy[0], "final_greedy": greedy[-1],
            "base_sampled": sampled[0], "final_sampled": sampled[-1], "gain_greedy": greedy[-1] - greedy[0],
            "gain_sampled": sampled[-1] - sampled[0], "rl_minutes": run.meta["wall_time_s"] / 60,
            "this_call_minutes": (time.time() - tic) / 60}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", nargs="+", default=["smoke", "cpu"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--set", nargs="*", default=[], help="config overrides key=value (JSON values)")
    args = parser.parse_args()
    changes = dict(parse_setting(s) for s in args.set)
    rows = [measure(p, s, changes) for p in args.profiles for s in args.seeds]
    print(f"{'profile':<8} {'seed':>4} {'greedy base->final':>19} {'sampled base->final':>20} {'RL min':>7}")
    for r in rows:
        print(f"{r['profile']:<8} {r['seed']:>4} {r['base_greedy']:>9.3f} -> {r['final_greedy']:.3f} "
              f"{r['base_sampled']:>10.3f} -> {r['final_sampled']:.3f} {r['rl_minutes']:>7.2f}")
    for p in args.profiles:
        gains = [r["gain_greedy"] for r in rows if r["profile"] == p]
        print(f"{p}: mean greedy gain {statistics.mean(gains):+.3f} over {len(gains)} seeds (min {min(gains):+.3f})")
    save_result("learning_gain", environment()["device"].split()[0], {"overrides": changes, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
