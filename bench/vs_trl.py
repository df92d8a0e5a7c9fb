"""rlbook's trainer against TRL's GRPOTrainer on the same task, side by side (a benchmark, not a test).

    pip install -e ".[bench]"      # TRL, pinned
    python bench/vs_trl.py [--seeds 0 1 2] [--updates 300] [--systems rlbook rlbook-fast rlbook-graph trl]
                           [--store runs]

Both systems start from the same warm-started nano-small checkpoint (chapter 1's cpu profile, trained once into the
RunStore at --store if it is not there), train LoRA r16 / alpha 32 on the same 7 projections with GRPO on the same
arithmetic prompts (rlbook's "rl_prompts" stream, rlbook.seeds), 8
samples per prompt, the same reward, lr 5e-4 constant, token-mean loss, no KL, max grad norm 1, 1 thread, one
update per rollout batch. Each (seed, system) runs in its own process, one after the other (systems interleaved per
seed), so peak RSS is its own. Reported per system: s/update (median interval between consecutive updates,
generation included, evaluations excluded) in wall and in process-CPU seconds (steadier when other processes share
the cores), generated tokens/s (generated tokens / wall time of the timed updates), peak RSS, and greedy accuracy on the 500 evaluation problems before and after (rlbook.evaluate.accuracy
for both). `rlbook` is the reference engine (bit-exact); `rlbook-fast` and `rlbook-graph` are the engines of those names
(rlbook.engines), which change rounding (fast: shared prompts, merged sampler, no grad through zero-advantage
sequences; graph, which the default engine picks for this on-policy single-update config: backpropagation through the
sampling pass). `trl` is rlbook.trl_backend: TRL's GRPOTrainer on the same RunConfig, gradient checkpointing off
(TRL's fastest setting here), evaluated by the same function at the same updates.
Writes bench/results/vs_trl-<device>-<commit>-<time>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/learning_gain.py, when run as a script

SYSTEMS = ["rlbook", "rlbook-fast", "rlbook-graph", "trl"]
OPTIONS = {"rlbook": {}, "rlbook-fast": dict(engine="fast"), "rlbook-graph": dict(engine="graph")}  # not bit-equal
SETTINGS = dict(profile="cpu", lora_rank=16, lora_alpha=32.0, prompts=16, group=8, lr=5e-4, threads=1)
# The update both systems make, whatever chapter 1's own budget is: SETTINGS' prompts and the reference engine
COMPARED_UPDATE = dict(prompts_per_step=SETTINGS["prompts"], engine="reference")


def unmatched() -> list[str]:
    """What the two systems compute differently (rlbook.trl_backend's list for the compared config)."""
    from rlbook.trl_backend import differences

    return [*differences(compared_config(0)), "TRL's data loader, accelerate wrapper and logging run in its loop"]


def compared_config(seed: int, **changes):
    """Chapter 1's cpu config at the compared update; a system's engine comes in as changes."""
    from rlbook.experiments import grpo_from_scratch

    return grpo_from_scratch(SETTINGS["profile"], seed, **{**COMPARED_UPDATE, **changes})


def checkpoint_path(store_root: str | None) -> str:
    """The warm-started nano-small checkpoint of chapter 1's cpu profile (trained once if not cached)."""
    from rlbook.pretrain import WarmStartConfig, warm_start
    from rlbook.runs import RunStore

    config = compared_config(0)
    start = WarmStartConfig(preset=config.preset, task=config.task, task_params=config.task_params,
                            **config.warm_start)
    return str(warm_start(start, RunStore(store_root) if store_root else RunStore(), progress=True))


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def summary(ends: list[tuple[float, float]], tokens: list[float], base: float, final: float) -> dict:
    """Per-system numbers from the (wall, process CPU) end times of consecutive updates and the tokens each
    generated; CPU seconds are less sensitive than wall seconds to other processes sharing the cores."""
    wall, cpu = ([b[i] - a[i] for a, b in zip(ends, ends[1:])] for i in (0, 1))
    return {"s_per_update": statistics.median(wall), "cpu_s_per_update": statistics.median(cpu),
            "tokens_per_s": sum(tokens[1:]) / (ends[-1][0] - ends[0][0]), "updates_timed": len(wall),
            "base_greedy": base, "final_greedy": final, "peak_rss_mib": peak_rss_mib()}


def clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def run_rlbook(seed: int, updates: int, checkpoint: str, changes: dict) -> dict:
    from rlbook.runs import RunStore
    from rlbook.trainer import train

    config = compared_config(seed, init=checkpoint, total_updates=updates, eval_every=updates,
                             checkpoint_every=updates, experiment="vs_trl", **changes)
    ends = []
    with tempfile.TemporaryDirectory() as root:
        run = RunStore(root).create(config)
        write = run.append
        run.append = lambda row: (ends.append(clock()), write(row))  # a row is appended when its update ends
        train(config, run, progress=False)
        rows = run.metrics
    width = config.prompts_per_step * config.group_size
    # row 0 is the base evaluation, row 1 ends after it, the last row holds the final one
    return summary(ends[2:-1], [r["response_len"] * width for r in rows[2:-1]], rows[0]["eval_greedy_acc"],
                   rows[-1]["eval_greedy_acc"])


def run_trl(seed: int, updates: int, checkpoint: str) -> dict:
    """The same compared config trained by TRL's GRPOTrainer through rlbook.trl_backend (TRL's own generation and
    forward: rlbook's engine options stay at their defaults)."""
    from rlbook.runs import Run, RunStore
    from rlbook.trl_backend import train_with_trl

    config = compared_config(seed, init=checkpoint, total_updates=updates, eval_every=updates, experiment="vs_trl")
    ends, write = [], Run.append
    Run.append = lambda run, row: (ends.append(clock()), write(run, row))  # a row is appended when its update ends
    with tempfile.TemporaryDirectory() as root:
        rows = train_with_trl(config, RunStore(root), progress=False).metrics
    width = config.prompts_per_step * config.group_size
    return summary(ends[2:-1], [r["response_len"] * width for r in rows[2:-1]], rows[0]["eval_greedy_acc"],
                   rows[-1]["eval_greedy_acc"])


def child(system: str, seed: int, updates: int, checkpoint: str, out: str) -> None:
    import warnings

    import torch

    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames, printed by TRL's setup
    torch.set_num_threads(SETTINGS["threads"])
    result = (run_rlbook(seed, updates, checkpoint, OPTIONS[system])
              if system.startswith("rlbook")
              else run_trl(seed, updates, checkpoint))
    Path(out).write_text(json.dumps(result))


def measure(system: str, seed: int, updates: int, checkpoint: str) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        load = os.getloadavg()[0]
        subprocess.run([sys.executable, __file__, "--child", system, "--seeds", str(seed), "--updates", str(updates),
                        "--checkpoint", checkpoint, "--out", out.name], check=True,
                       env={**os.environ, "RLBOOK_THREADS": str(SETTINGS["threads"])})
        return {"system": system, "seed": seed, "load_before": load, "load_after": os.getloadavg()[0],
                **json.loads(Path(out.name).read_text())}


def mean_se(values: list[float]) -> tuple[float, float]:
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return statistics.mean(values), se


def report(rows: list[dict], systems: list[str]) -> dict:
    """Per-system medians / means over seeds, printed; rlbook's speed ratio to each TRL setting."""
    table = {}
    print(f"{'system':<11} {'s/update':>9} {'cpu s/upd':>9} {'tokens/s':>9} {'peak RSS':>9} "
          f"{'greedy base -> final (mean +- s.e.)':>36}")
    for system in systems:
        mine = [r for r in rows if r["system"] == system]
        final, se = mean_se([r["final_greedy"] for r in mine])
        table[system] = {"s_per_update": statistics.median(r["s_per_update"] for r in mine),
                         "cpu_s_per_update": statistics.median(r["cpu_s_per_update"] for r in mine),
                         "tokens_per_s": statistics.median(r["tokens_per_s"] for r in mine),
                         "peak_rss_mib": max(r["peak_rss_mib"] for r in mine),
                         "base_greedy": statistics.mean(r["base_greedy"] for r in mine),
                         "final_greedy": final, "final_greedy_se": se}
        t = table[system]
        print(f"{system:<11} {t['s_per_update']:>9.3f} {t['cpu_s_per_update']:>9.3f} {t['tokens_per_s']:>9.0f} "
              f"{t['peak_rss_mib']:>5.0f} MiB {t['base_greedy']:>15.3f} -> {final:.3f} +- {se:.3f}")
    for mine in (s for s in systems if s.startswith("rlbook")):
        for system in (s for s in systems if s.startswith("trl")):
            speed = table[system]["s_per_update"] / table[mine]["s_per_update"]
            cpu = table[system]["cpu_s_per_update"] / table[mine]["cpu_s_per_update"]
            gap = table[mine]["final_greedy"] - table[system]["final_greedy"]
            bound = 2 * (table[mine]["final_greedy_se"] ** 2 + table[system]["final_greedy_se"] ** 2) ** 0.5
            table[f"{mine}_vs_{system}"] = {"speedup": speed, "cpu_speedup": cpu, "accuracy_gap": gap,
                                            "two_se": bound}
            print(f"{mine} vs {system}: {speed:.2f}x updates/s ({cpu:.2f}x in CPU time); final accuracy gap "
                  f"{gap:+.3f} (2 s.e. {bound:.3f})")
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--systems", nargs="+", default=["rlbook", "rlbook-fast", "rlbook-graph", "trl"],
                        choices=SYSTEMS)
    parser.add_argument("--store", default=None, help="RunStore root holding (or to hold) the warm start")
    parser.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seeds[0], args.updates, args.checkpoint, args.out)
        return 0
    if args.updates < 4:
        parser.error("--updates must be >= 4 (the first and last updates are not timed)")
    checkpoint = checkpoint_path(args.store)
    for line in ["settings: " + json.dumps(SETTINGS), *("not matched: " + u for u in unmatched())]:
        print(line)
    rows = []
    for seed in args.seeds:
        for system in args.systems:
            rows.append(measure(system, seed, args.updates, checkpoint))
            print(json.dumps(rows[-1]))
    table = report(rows, args.systems)
    from record import save_result
    from rlbook.runs import environment

    save_result("vs_trl", environment()["device"].split()[0],
                {"settings": SETTINGS, "rlbook_options": OPTIONS, "unmatched": unmatched(), "updates": args.updates, "checkpoint": checkpoint,
                 "rows": rows, "summary": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
