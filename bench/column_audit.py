"""Which metrics columns of which experiment the book reads: builds the book (reference profile) and the fidelity
table with every read of a stored run's rows recorded, then prints, per experiment, the columns read and how they
compare with bench/reference_runs.py SHIPPED_COLUMNS (what a shipped run keeps). Not a test: about 5 minutes.

    python bench/column_audit.py

A column read but not shipped means a chapter reads data the store no longer holds (its runs must be retrained, or
the column kept); a column shipped but not read can go at the next retraining.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from reference_runs import SHIPPED_COLUMNS

ROOT = Path(__file__).resolve().parents[1]

# Loaded by every Python process of the build (the notebooks' kernels too) through PYTHONPATH: rlbook.runs.Run's rows
# and columns record the keys read, per experiment, into $COLUMN_AUDIT/<pid>.json at exit.
RECORDER = '''
import atexit, collections, importlib.machinery, json, os, sys
READ = collections.defaultdict(set)
WHOLE = "*"  # a row read whole (iterated): every column it holds counts as read

class Recording(dict):
    def __getitem__(self, key):
        READ[self.experiment].add(key)
        return dict.__getitem__(self, key)

    def get(self, key, default=None):
        READ[self.experiment].add(key)
        return dict.get(self, key, default)

    def __contains__(self, key):
        READ[self.experiment].add(key)
        return dict.__contains__(self, key)

    def _whole(self):
        READ[self.experiment].add(WHOLE)

    def items(self):
        self._whole()
        return dict.items(self)

    def keys(self):
        self._whole()
        return dict.keys(self)

    def values(self):
        self._whole()
        return dict.values(self)

    def __iter__(self):
        self._whole()
        return dict.__iter__(self)

def record(runs):
    metrics, columns = runs.Run.metrics.fget, runs.Run.columns

    def recorded_metrics(self):
        out = []
        for row in metrics(self):
            out.append(Recording(row))
            out[-1].experiment = self.path.parent.name
        return out

    def recorded_columns(self, keys):
        READ[self.path.parent.name].update(keys)
        return columns(self, keys)

    runs.Run.metrics, runs.Run.columns = property(recorded_metrics), recorded_columns

class Finder:
    def find_spec(self, name, path, target=None):
        if name != "rlbook.runs":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        load = spec.loader.exec_module
        spec.loader.exec_module = lambda module: (load(module), record(module))
        return spec

sys.meta_path.insert(0, Finder())
atexit.register(lambda: READ and json.dump({k: sorted(v) for k, v in READ.items()},
                                           open(os.path.join(os.environ["COLUMN_AUDIT"], f"{os.getpid()}.json"), "w")))
'''


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="column-audit-") as folder:
        Path(folder, "sitecustomize.py").write_text(RECORDER)
        env = {**os.environ, "PYTHONPATH": folder, "COLUMN_AUDIT": folder}
        for command in ([sys.executable, "-m", "rlbook.book", "--profile", "reference"],
                        [sys.executable, "-c", "import sys; sys.path.insert(0, 'bench'); import fidelity; "
                                               "fidelity.tables('data/runs')"]):
            subprocess.run(command, cwd=ROOT, env=env, check=True)
        read: dict[str, set] = {}
        for path in Path(folder).glob("*.json"):
            for experiment, keys in json.loads(path.read_text()).items():
                read.setdefault(experiment, set()).update(keys)
    for experiment in sorted(read):
        if "*" in read[experiment]:
            print(f"{experiment}: READS WHOLE ROWS (a row iterated): keep every column, or read by key")
        keys = read[experiment] - {"update", "*"}
        shipped = set(SHIPPED_COLUMNS.get(experiment, ()))
        print(f"{experiment}: reads {', '.join(sorted(keys))}")
        if experiment not in SHIPPED_COLUMNS:
            print("  not in SHIPPED_COLUMNS: its runs ship every column")
        elif keys - shipped:
            print(f"  READ BUT NOT SHIPPED: {', '.join(sorted(keys - shipped))}")
        elif shipped - keys:
            print(f"  shipped, not read: {', '.join(sorted(shipped - keys))}")


if __name__ == "__main__":
    main()
