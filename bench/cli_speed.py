"""Where the command line's time per update goes, against the engine alone and TRL (a benchmark, not a test).

    python bench/cli_speed.py [--updates 300] [--seed 0] [--systems cli engine trl]

`cli` runs `python -m rlbook train` as a reader would: chapter 1's cpu config at bench/vs_trl.py's compared update (16
prompts x 8, LoRA r16), engine auto (graph), the shipped warm start, evaluated before the first and after the last
update as vs_trl evaluates both systems, everything else at its default (checkpoints, the metrics journal, sealing,
the progress bar). Its child times each part of the command from the interpreter's start: imports, parsing the command
line, the checks and estimate, loading the model, sampling and updating (the engine), evaluations, metrics rows,
checkpoints, sealing, and the rest. `engine` and `trl` are bench/vs_trl.py's rlbook-graph and trl systems (its
harness: the median interval between consecutive updates, evaluations excluded). Every system runs in its own
process on one thread. Reported: the CLI's seconds per update (its whole run divided by the updates), the engine's
and TRL's (vs_trl's median), in wall and in process-CPU seconds (steadier when other processes share the cores), every
system's whole run in CPU seconds per update (its process from start to end: imports, setup, evaluations), and TRL's
time per update over each of rlbook's. Writes bench/results/cli_speed/.
"""
from __future__ import annotations

import time

START = time.perf_counter(), time.process_time()  # the child's clock starts with its interpreter, before any import

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
# The parts of a CLI run, each a function the child wraps with a clock: "module:attribute" -> part
PARTS = {"rlbook.cli:_parser": "parsing the command line (and its imports)",
         "rlbook.cli:_estimate": "checks and memory estimate",
         "rlbook.trainer:warm_start_of": "finding the warm start",
         "rlbook.trainer:init_policy": "loading the model",
         "rlbook.rollout:BatchSampler.__call__": "engine: sampling",
         "rlbook.trainer:train_update": "engine: update",
         "rlbook.trainer:evaluation_row": "evaluations",
         "rlbook.runs:Run.append": "metrics rows",
         "rlbook.trainer:save_state": "checkpoints",
         "rlbook.runs:Run.finish": "sealing"}

def cli_config(seed: int, updates: int):
    """vs_trl's compared config, as the command line's default path trains it (engine auto)."""
    from vs_trl import compared_config

    return compared_config(seed, engine="auto", total_updates=updates, eval_every=updates, experiment="cli_speed")


def argv_of(config) -> list[str]:
    """The `train` flags of every field of config that differs from its default."""
    from rlbook.checks import defaults

    flags = []
    for name, default in defaults(type(config)).items():
        value = getattr(config, name)
        if value != default:
            text = json.dumps(value) if isinstance(value, (dict, bool)) else str(value)
            flags += [f"--{name.replace('_', '-')}", text]
    return ["train", *flags]


def clocked(function, part: str, totals: dict):
    """function, adding its wall and CPU seconds to totals[part] (a call inside another part's counts once)."""
    def wrapper(*args, **kwargs):
        if totals.setdefault("_depth", 0):
            return function(*args, **kwargs)
        totals["_depth"] += 1
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            totals["_depth"] -= 1
            spent = totals.setdefault(part, [0.0, 0.0])
            spent[0] += time.perf_counter() - wall
            spent[1] += time.process_time() - cpu
    return wrapper


def cli_child(argv: list[str], runs: str, out: str) -> None:
    """Run the command line in this process with every part of PARTS clocked; write the seconds of each."""
    import importlib

    import rlbook.cli
    import rlbook.obtain  # what main imports first (torch, transformers, the trainer)

    imported = time.perf_counter(), time.process_time()
    totals: dict = {}
    for name, part in PARTS.items():
        module, _, attribute = name.partition(":")
        *owners, attribute = attribute.split(".")
        target = importlib.import_module(module)
        for owner in owners:
            target = getattr(target, owner)
        setattr(target, attribute, clocked(getattr(target, attribute), part, totals))
    status = rlbook.cli.main([*argv, "--runs-dir", runs])
    end = time.perf_counter(), time.process_time()
    totals.pop("_depth", None)
    parts = {"imports": [imported[0] - START[0], imported[1] - START[1]], **totals}
    parts["the rest (loop, progress bar, store lookups)"] = [end[i] - START[i] - sum(p[i] for p in parts.values())
                                                             for i in (0, 1)]
    Path(out).write_text(json.dumps({"status": status, "total": [end[0] - START[0], end[1] - START[1]],
                                     "parts": parts}))


def measure_cli(seed: int, updates: int, threads: int) -> dict:
    argv = argv_of(cli_config(seed, updates))
    with tempfile.TemporaryDirectory() as runs, tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, __file__, "--cli-child", out.name, "--runs", runs, "--", *argv], check=True,
                       env={**os.environ, "RLBOOK_THREADS": str(threads)})
        result = json.loads(Path(out.name).read_text())
    if result["status"]:
        raise SystemExit(f"the command line exited with status {result['status']}")
    per_update = {i: result["total"][i] / updates for i in (0, 1)}
    return {"system": "cli", "argv": argv, "s_per_update": per_update[0], "cpu_s_per_update": per_update[1],
            "total_s": result["total"][0], "cpu_total_s": result["total"][1],
            "parts": {part: {"s": s, "cpu_s": cpu, "cpu_s_per_update": cpu / updates}
                      for part, (s, cpu) in result["parts"].items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--systems", nargs="+", default=["cli", "engine", "trl"], choices=["cli", "engine", "trl"])
    parser.add_argument("--cli-child", metavar="OUT", help=argparse.SUPPRESS)
    parser.add_argument("--runs", help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cli_child:
        cli_child(args.argv, args.runs, args.cli_child)
        return 0
    from vs_trl import SETTINGS, checkpoint_path, measure

    rows = []
    for system in args.systems:
        print(f"{system} ({args.updates} updates) ...", flush=True)
        load, before = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_CHILDREN)
        row = (measure_cli(args.seed, args.updates, SETTINGS["threads"]) if system == "cli" else
               measure({"engine": "rlbook-graph", "trl": "trl"}[system], args.seed, args.updates,
                       checkpoint_path(None)))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        whole = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / args.updates
        rows.append({**row, "system": system, "whole_run_cpu_s_per_update": whole, "load_before": load,
                     "load_after": os.getloadavg()[0]})
        print(json.dumps(rows[-1]), flush=True)
    by = {row["system"]: row for row in rows}
    if "cli" in by:
        print(f"\n{'part of the CLI run':<46} {'wall s':>8} {'CPU s':>8} {'CPU s/update':>12}")
        for part, t in by["cli"]["parts"].items():
            print(f"{part:<46} {t['s']:>8.1f} {t['cpu_s']:>8.1f} {t['cpu_s_per_update']:>12.4f}")
    summary = {}
    for mine in ("cli", "engine"):
        if mine in by and "trl" in by:
            summary[f"trl_over_{mine}"] = {k: by["trl"][k] / by[mine][k]
                                           for k in ("s_per_update", "cpu_s_per_update", "whole_run_cpu_s_per_update")}
            ratio = summary[f"trl_over_{mine}"]
            print(f"TRL's time per update over the {mine}'s: {ratio['s_per_update']:.2f}x wall, "
                  f"{ratio['cpu_s_per_update']:.2f}x CPU; whole runs (start-up, evaluations, everything): "
                  f"{ratio['whole_run_cpu_s_per_update']:.2f}x CPU")
    from record import save_result

    save_result("cli_speed", "cpu", {"updates": args.updates, "seed": args.seed, "settings": SETTINGS, "rows": rows,
                                     "summary": summary})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
