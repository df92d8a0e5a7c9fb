"""Write the fixed evaluation sets of `rlbook.evaluate.EVAL_SETS` to data/eval/<file>.jsonl.

Each set is `make_task(name, **params).generate(size, seed=EVAL_SEED)`, one `json.dumps(problem, sort_keys=True)`
per line. `python data/make_eval_sets.py` (re)writes the files; `--check` only compares and exits 1 if any differ.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rlbook.evaluate import EVAL_SEED, EVAL_SETS
from rlbook.tasks import make_task

EVAL_DIR = Path(__file__).resolve().parent / "eval"


def render(file: str) -> str:
    """The exact text of data/eval/<file>.jsonl."""
    name, params, size = EVAL_SETS[file]
    problems = make_task(name, **params).generate(size, seed=EVAL_SEED)
    return "".join(json.dumps(problem, sort_keys=True) + "\n" for problem in problems)


def write_eval_sets(directory: Path = EVAL_DIR) -> list[Path]:
    """Write every set into `directory`; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for file in EVAL_SETS:
        path = directory / f"{file}.jsonl"
        path.write_text(render(file), encoding="utf-8", newline="\n")
        paths.append(path)
    return paths


def differing(directory: Path = EVAL_DIR) -> list[str]:
    """Files in `directory` that are missing or differ from what the generator writes."""
    bad = []
    for file in EVAL_SETS:
        path = Path(directory) / f"{file}.jsonl"
        if not path.exists() or path.read_bytes() != render(file).encode("utf-8"):
            bad.append(str(path))
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 if a file is missing or differs")
    parser.add_argument("--dir", type=Path, default=EVAL_DIR, help="output directory (default: data/eval)")
    args = parser.parse_args(argv)
    if args.check:
        bad = differing(args.dir)
        if bad:
            print("evaluation sets out of date (run `python data/make_eval_sets.py`): " + ", ".join(bad),
                  file=sys.stderr)
            return 1
        print(f"{len(EVAL_SETS)} evaluation sets up to date in {args.dir}")
        return 0
    for path in write_eval_sets(args.dir):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
