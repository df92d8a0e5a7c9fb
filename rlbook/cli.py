"""Command line: `python -m rlbook train ...`, `python -m rlbook runs`, `python -m rlbook sweep ...`.

Every RunConfig field is a flag (`--staleness 16`, `--objective-params '{"tau": 0.04}'`), so the command line,
notebooks and scripts describe runs the same way. A bad flag or value is one line on stderr, naming what was wrong
and the valid choices, with exit status 2, before any run directory is made or any model is loaded; so is a run that
cannot fit in this machine's memory or the model's context (rlbook.memory; a run that fits gets its estimate). Ctrl-C
stops a run with exit status 130, at any moment: this module imports only the standard library, everything else is
imported inside main's handler. The same command resumes the run from its last checkpoint.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import RunConfig
    from .runs import RunStore


LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines splits at


def _one_line(text: str) -> str:
    """text with its line breaks escaped (a bad value may hold some), ending in one newline."""
    return "".join(repr(ch)[1:-1] if ch in LINE_BREAKS else ch for ch in text) + "\n"


class _Parser(argparse.ArgumentParser):
    """A bad command line is one line (argparse would print the usage first)."""

    def error(self, message):
        self.exit(2, _one_line(f"{self.prog}: error: {message} ({self.prog} --help lists every flag)"))


def _parse_bool(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() in ("true", "1", "yes")


def _parse_json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({error}); expected an object like "
                                         "'{\"key\": 1}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is a JSON {type(value).__name__}; expected an object like "
                                         "'{\"key\": 1}'")
    return value


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    from .checks import defaults
    from .config import FIELD_HELP, RunConfig

    for name, default in defaults(RunConfig).items():
        kind = {bool: _parse_bool, dict: _parse_json_object}.get(type(default), type(default))
        help_text = f"{FIELD_HELP[name]} (default: {json.dumps(default)})"
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, default=None,
                            help=help_text.replace("%", "%%"))


def _config_from(args: argparse.Namespace) -> RunConfig:
    from .config import RunConfig

    names = {f.name for f in fields(RunConfig)}
    return RunConfig.from_dict({k: v for k, v in vars(args).items() if k in names and v is not None})


def _on_the_gpu_if_present(args: argparse.Namespace) -> argparse.Namespace:
    """`train` without --device computes where a user expects it to: on the GPU when torch sees one (said on stderr,
    since a GPU run is another result than the CPU run of the same seed), else on the CPU."""
    import torch

    if args.device is None and torch.cuda.is_available():
        print(f"device: cuda ({torch.cuda.get_device_name()}); pass --device cpu to train on the CPU", file=sys.stderr)
        args.device = "cuda"
    return args


def _parser() -> argparse.ArgumentParser:
    from .engines import EPILOG
    from .experiments import SWEEPS
    from .profiles import PROFILES

    parser = _Parser(prog="python -m rlbook", description=__doc__, allow_abbrev=False,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train a run (or replay / resume it from the RunStore)",
                                allow_abbrev=False, epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_flags(train)
    train.add_argument("--runs-dir", default=None, help="RunStore root (default: $RLBOOK_RUNS or ./runs)")
    train.add_argument("--keep-superseded", action="store_true", help="replay a stored run of this config made by "
                       "an older version of the code instead of training it anew")
    train.add_argument("--backend", default="rlbook", choices=["rlbook", "trl"], help="rlbook's trainer, or TRL's "
                       "GRPOTrainer (rlbook.trl_backend; settings TRL cannot express are refused)")
    sweeping = commands.add_parser("sweep", help="run (or replay) a chapter's named sweep", allow_abbrev=False)
    sweeping.add_argument("name", choices=list(SWEEPS), help="the sweep: %(choices)s")
    sweeping.add_argument("--profile", default="auto", choices=["auto", *PROFILES],
                          help="model and budget: auto (standard with a GPU, else smoke) or %(choices)s")
    sweeping.add_argument("--reverse", action="store_true", help="run the sweep backwards (a second process can "
                          "share a sweep: runs another process is training are waited for, then replayed)")
    sweeping.add_argument("--runs-dir", default=None, help="RunStore root (default: $RLBOOK_RUNS or ./runs)")
    listing = commands.add_parser("runs", help="list stored runs", allow_abbrev=False)
    listing.add_argument("--experiment", default=None, help="list only this experiment's runs")
    listing.add_argument("--runs-dir", default=None, help="RunStore root (default: $RLBOOK_RUNS or ./runs)")
    _add_export_flags(commands, listing)
    return parser


def _add_export_flags(commands, listing: argparse.ArgumentParser) -> None:
    """`export` (a run or a chapter's experiment as another framework's configuration) and `runs --export`."""
    from .export import FRAMEWORKS

    exporting = commands.add_parser("export", help="write a run's or an experiment's configuration for TRL, verl or "
                                    "AReaL (rlbook.export)", allow_abbrev=False)
    exporting.add_argument("target", help="a run directory, a sweep (grpo, staleness, ...) or an experiment "
                           "(01_grpo, 02_staleness, ...)")
    exporting.add_argument("--to", required=True, choices=FRAMEWORKS, help="the training framework: %(choices)s")
    exporting.add_argument("--profile", default="cpu", help="profile of a sweep or experiment (default: cpu, the "
                           "reference runs)")
    exporting.add_argument("--out", default="exports", help="folder to write into (default: ./exports)")
    exporting.add_argument("--overwrite", action="store_true", help="replace files in --out that differ from the "
                           "export (by default they are left alone and the export stops, naming them)")
    exporting.set_defaults(runs_dir=None)  # an export reads no RunStore
    listing.add_argument("--export", nargs=2, metavar=("FORMAT", "DIR"), default=None, help="write the listed runs "
                         "(and the reference runs in data/runs) as TensorBoard event files under DIR: FORMAT is "
                         "tensorboard (pip install -e \".[tensorboard]\")")


def _export(args: argparse.Namespace) -> None:
    from .export import export

    for outcome in export(args.target, args.to, args.out, args.profile, overwrite=args.overwrite):
        print(outcome.line())  # written, unchanged, replaced or refused (with the reason)


def _export_runs(store: RunStore, args: argparse.Namespace) -> None:
    from .runs import RunStore, reference_root
    from .tensorboard_export import FORMATS, write_runs

    fmt, out = args.export
    if fmt not in FORMATS:
        raise ValueError(f"--export {fmt!r} is not a format; choose one of: {', '.join(FORMATS)}")
    runs = store.runs(args.experiment) + RunStore(reference_root()).runs(args.experiment)
    outcomes = write_runs(runs, out)
    for outcome in outcomes:  # written, rewritten, unchanged or failed (nothing written for that run)
        print(outcome.line())
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        raise ValueError(f"{len(failed)} of {len(outcomes)} runs were not exported: {failed[0].reason}")


def _list_runs(store: RunStore, experiment: str | None) -> int:
    """Print one line per stored run; a run that cannot be read is named (stderr) and the others still listed.
    Returns how many could not be read."""
    from .runs import CorruptRunError

    print(f"{'experiment':<14} {'run':<32} {'updates':>7} {'complete':>8} {'greedy acc':>10} {'code':>9}  device")
    unreadable = 0
    for run in store.runs(experiment):
        try:
            rows, meta = run.columns(["eval_greedy_acc"])["eval_greedy_acc"], run.meta
            acc = [a for a in rows if a is not None]
            code = 'current' if run.current else f'v{run.training_version}'
        except CorruptRunError as error:
            unreadable += 1
            sys.stderr.write(_one_line(f"error: {error}"))
            continue
        print(f"{run.path.parent.name:<14} {run.path.name:<32} {len(rows):>7} {str(meta.get('complete')):>8} "
              f"{acc[-1] if acc else float('nan'):>10.3f} {code:>9}  {meta.get('device', '?')}")
    return unreadable


def _interrupted(store: RunStore | None, config: RunConfig | None) -> str:
    """Where Ctrl-C stopped the run being trained, and where the same command will resume it."""
    from .checkpoint import location

    run = store.find(config) if store is not None and config is not None else None
    if run is None:
        return "interrupted before the run started; rerun the same command to start it"
    rows = run.metrics
    return (f"interrupted at update {rows[-1]['update'] if rows else 0}; rerun the same command to resume from "
            f"update {run.meta.get('updates', 0) if location(run.path) is not None else 0}")


def _estimate(config: RunConfig, store: RunStore) -> None:
    """A run that will start training (none stored, here or among the reference runs): what this machine must provide
    for it (rlbook.obtain.check_runnable: a ValueError when it cannot), and its memory and compute estimate on one line
    of stderr."""
    from .memory import matmul_rate, shape_of, summary
    from .models import set_cpu_threads
    from .obtain import check_runnable
    from .runs import RunStore, reference_root

    if any(s.find(config) is not None for s in (store, RunStore(reference_root()))):
        return  # replayed, or resumed: its estimate was printed when it started
    estimate = check_runnable(config)
    if estimate is not None:
        set_cpu_threads()  # the threads training will use: the rate is theirs
        print(summary(estimate, matmul_rate(shape_of(config), config.device)), file=sys.stderr, flush=True)


def _train(config: RunConfig, store: RunStore, args: argparse.Namespace):
    """Train (or replay) a run with the chosen backend."""
    if args.backend == "trl":
        from .trl_backend import train_with_trl

        return train_with_trl(config, store)
    from .obtain import run_or_load

    return run_or_load(config, store, keep_superseded=args.keep_superseded)


def main(argv: list[str] | None = None) -> int:
    store, current = None, None
    try:  # every import but the standard library's is in here: Ctrl-C while torch loads is answered too
        from .obtain import run_or_load
        from .runs import RunStore

        args = _parser().parse_args(argv)
        store = RunStore(args.runs_dir)
        if args.command == "train":
            current = _config_from(_on_the_gpu_if_present(args))
            if args.backend == "trl":  # what TRL cannot express is refused before anything is estimated
                from .trl_backend import check_expressible

                check_expressible(current)
            _estimate(current, store)
            run = _train(current, store, args)
            last = run.metrics[-1] if run.metrics else {}
            print(f"{run.path}: {len(run.metrics)} updates, reward {last.get('reward', float('nan')):.3f}, "
                  f"greedy accuracy {last.get('eval_greedy_acc', float('nan')):.3f}")
        elif args.command == "sweep":
            from .experiments import sweep

            configs = sweep(args.name, args.profile)[::-1 if args.reverse else 1]
            for i, current in enumerate(configs, 1):
                print(f"[{i}/{len(configs)}] {run_or_load(current, store).path}")
        elif args.command == "export":
            _export(args)
        elif args.export:
            _export_runs(store, args)
        elif _list_runs(store, args.experiment):
            return 2
    except KeyboardInterrupt:
        tqdm = sys.modules.get("tqdm")  # not imported yet: no progress bar to end
        for bar in list(tqdm.tqdm._instances) if tqdm is not None else []:  # the run's progress bar ends its line first
            bar.close()
        print(_interrupted(store, current), file=sys.stderr)
        return 130
    except (ValueError, OSError) as error:
        sys.stderr.write(_one_line(f"error: {error}"))
        return 2
    return 0
