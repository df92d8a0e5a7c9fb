"""Seal finished runs in place: each complete run's journal (metrics.jsonl) becomes metrics.parquet (rlbook.columnar).

    python bench/convert_store.py data/runs --experiments 02_drift_ladder   # one experiment of the reference store
    python bench/convert_store.py data/runs/03_fixed_rate/m2po-s8-cpu-seed1-0123456789   # one run
    python bench/convert_store.py data/runs --list     # what is sealed and what is not: bench/results/convert_store

Each PATH is a store root, an experiment's folder or a run's folder. A run is sealed by `Run.seal`: its rows are
written to the table, read back and compared with the journal's (every value equal, floats at the table's precision:
rlbook.columnar), and only then is the journal removed; any difference stops with an error and keeps the journal.
Runs not complete are left as they are (they are still training, or will be resumed), and so are warm starts. Run
directories of an experiment are sealed largest journal first; the sizes before and after are printed.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from record import save_result  # noqa: E402

from rlbook.runs import JOURNAL, SEALED, Run  # noqa: E402


def run_dirs(path: Path) -> list[Path]:
    """The run folders at or under path (a run, an experiment, a store root), warm starts and hidden folders left
    out."""
    if (path / "config.json").exists():
        return [path]
    found = sorted(p.parent for p in path.glob("*/config.json")) or sorted(p.parent for p in path.glob("*/*/*.json")
                                                                            if p.name == "config.json")
    return [p for p in found if p.parent.name != "warmstart" and not p.name.startswith(".")]


def size(run: Path, name: str) -> int:
    return (run / name).stat().st_size if (run / name).exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="store roots, experiment folders or run folders")
    parser.add_argument("--experiments", nargs="+", help="only the runs of these experiments")
    parser.add_argument("--list", action="store_true", help="print each experiment's sealed and unsealed runs, seal none")
    args = parser.parse_args()
    runs = [p for path in args.paths for p in run_dirs(path)
            if not args.experiments or p.parent.name in args.experiments]
    if not runs:
        sys.exit(f"no run folders under {', '.join(map(str, args.paths))}"
                 + (f" of experiments {', '.join(args.experiments)}" if args.experiments else ""))
    if args.list:
        experiments = {}
        for experiment in sorted({p.parent for p in runs}):
            mine = [p for p in runs if p.parent == experiment]
            experiments[experiment.name] = {"runs": len(mine), "sealed": sum((p / SEALED).exists() for p in mine),
                                            "journal_bytes": sum(size(p, JOURNAL) for p in mine),
                                            "table_bytes": sum(size(p, SEALED) for p in mine),
                                            "checkpoint_bytes": sum(size(p, "state.pt") + size(p, "state.safetensors")
                                                                    for p in mine)}
            print(f"{experiment}: {experiments[experiment.name]}")
        save_result("convert_store", "store", {"experiments": experiments})
        return
    before = after = sealed = 0
    for path in sorted(runs, key=lambda p: -size(p, JOURNAL)):
        run = Run(path)
        if not run.complete:
            print(f"{path}: not complete, left as it is")
            continue
        journal = size(path, JOURNAL)
        if run.seal():
            sealed, before, after = sealed + 1, before + journal, after + size(path, SEALED)
            print(f"{path}: sealed, {journal} -> {size(path, SEALED)} bytes")
    print(f"sealed {sealed} runs: journals {before} bytes -> tables {after} bytes"
          + (f" ({before / after:.1f}x smaller)" if after else ""))


if __name__ == "__main__":
    main()
