"""The tracked tree stays at or below its size: a ratchet, lowered as the run store is converted (issue 38).

The target is 60 MiB. Every journal is sealed and no run keeps a checkpoint (the last ones, 04_lopti_arithmetic's,
02_staleness's, 02_slow_drift's and 04_lopti's final weights, went in session 20: chapter 4 reads only the
accuracy_by_people.json each of its runs caches). What holds the tree above the target (78.1 MiB then): about 57 MB of
sealed tables, the warm starts' weights (data/runs/warmstart, 15.7 MB, which spare every training profile minutes of
warm-up) and about 4 MB of code, text and records. Below that, the tables' columns that no figure, table or verdict
reads (the |r-1| bins of most experiments, the timing columns) would have to go: rewriting the tables costs about
1.2x their size twice in a session's diff budget.
Lower LIMIT_MIB after each conversion; never raise it.
"""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 90  # 78.1 MiB with no checkpoint left, plus room for the runs queued in issue 40 (chapter 4's 25 K&K runs
# and their warm start, 4 MB; chapter 3's remaining fixed-rate runs, about 0.23 MB each)


def tracked_bytes() -> int:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return sum((ROOT / name).stat().st_size for name in out.decode().split("\0") if name and (ROOT / name).is_file())


def test_the_tracked_tree_is_at_most_its_limit():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    size = tracked_bytes() / 2**20
    assert size <= LIMIT_MIB, f"the tracked tree is {size:.1f} MiB, above its limit {LIMIT_MIB} MiB (target 60 MiB)"
