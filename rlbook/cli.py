"""Command line: `python -m rlbook train ...`, `python -m rlbook runs`, `python -m rlbook warmstart ...`.

Every RunConfig field is a flag (`--staleness 16`, `--objective-params '{"tau": 0.04}'`), so the command line,
notebooks and scripts describe runs the same way.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import MISSING, fields

from .config import RunConfig


def _parse_bool(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1", "yes")


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    for f in fields(RunConfig):
        default = f.default if f.default is not MISSING else f.default_factory()
        kind = {bool: _parse_bool, dict: json.loads}.get(type(default), type(default))
        parser.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=kind, default=None,
                            help=f"(default: {json.dumps(default)})")


def _config_from(args: argparse.Namespace) -> RunConfig:
    names = {f.name for f in fields(RunConfig)}
    return RunConfig.from_dict({k: v for k, v in vars(args).items() if k in names and v is not None})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlbook", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a run (or replay / resume it from the RunStore)",
                                allow_abbrev=False)
    _add_config_flags(train)
    train.add_argument("--runs-dir", default=None, help="RunStore root (default: $RLBOOK_RUNS or ./runs)")
    train.add_argument("--keep-superseded", action="store_true", help="replay a stored run of this config made by "
                       "an older version of the code instead of training it anew")
    sweeping = commands.add_parser("sweep", help="run (or replay) a chapter's named sweep", allow_abbrev=False)
    sweeping.add_argument("name", help="grpo | staleness | tau | lopti")
    sweeping.add_argument("--profile", default="auto")
    sweeping.add_argument("--reverse", action="store_true", help="run the sweep backwards (a second process can "
                          "share a sweep: runs another process is training are waited for, then replayed)")
    sweeping.add_argument("--runs-dir", default=None)
    listing = commands.add_parser("runs", help="list stored runs")
    listing.add_argument("--experiment", default=None)
    listing.add_argument("--runs-dir", default=None)
    args = parser.parse_args(argv)

    from .replay import run_or_load
    from .runs import RunStore

    store = RunStore(args.runs_dir)
    try:
        if args.command == "train":
            run = run_or_load(_config_from(args), store, keep_superseded=args.keep_superseded)
            last = run.metrics[-1] if run.metrics else {}
            print(f"{run.path}: {len(run.metrics)} updates, reward {last.get('reward', float('nan')):.3f}, "
                  f"greedy accuracy {last.get('eval_greedy_acc', float('nan')):.3f}")
        elif args.command == "sweep":
            from .experiments import sweep

            configs = sweep(args.name, args.profile)[::-1 if args.reverse else 1]
            for i, config in enumerate(configs, 1):
                run = run_or_load(config, store)
                print(f"[{i}/{len(configs)}] {run.path}")
        else:
            print(f"{'experiment':<14} {'run':<32} {'updates':>7} {'complete':>8} {'greedy acc':>10} {'code':>9}  device")
            for run in store.runs(args.experiment):
                rows, meta = run.metrics, run.meta
                acc = [r["eval_greedy_acc"] for r in rows if "eval_greedy_acc" in r]
                print(f"{run.path.parent.name:<14} {run.path.name:<32} {len(rows):>7} {str(meta.get('complete')):>8} "
                      f"{acc[-1] if acc else float('nan'):>10.3f} {'current' if run.current else f'v{run.training_version}':>9}"
                      f"  {meta.get('device', '?')}")
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
