"""RunSet: the runs behind one figure or table, with what its label must say about them.

RunSet: the runs behind one figure or table, with what its label must say (seeds, made by this code or by older
code, on a CPU or a GPU, settings with no stored run).

A stored run made by an older TRAINING_VERSION is shown as what it is, never as this code's result: its label says
"made by older code (training version N); retraining pending". A run made on a GPU (RunConfig.device 'cuda', part
of its identity) is never a reference run, whose settings say the CPU; its label names the GPU it was made on.
"""
from __future__ import annotations

from collections import Counter

from .config import RunConfig
from .versions import TRAINING_VERSION


def seed_list(seeds) -> str:
    """0, 1, 2, 3, 4 -> '0-4'; 0, 2, 5 -> '0, 2, 5'."""
    seeds = sorted(set(seeds))
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def where_made(runs) -> str:
    """Where runs were made: 'on a CPU', 'on a GPU (its name)', or 'k of n on a GPU (...), the rest on a CPU'."""
    gpu = [r for r in runs if r.config.device != "cpu"]
    if not gpu:
        return "on a CPU"
    names = ", ".join(sorted({r.meta.get("device", r.config.device) for r in gpu}))
    return (f"on a GPU ({names})" if len(gpu) == len(runs) else
            f"{len(gpu)} of {len(runs)} on a GPU ({names}), the rest on a CPU")


def provenance(runs, missing: int = 0) -> str:
    """One line for a figure or table: the seeds, which code made the runs and where (and how many settings are
    missing)."""
    runs = list(runs)
    if not runs:
        return f"no stored runs ({missing} settings missing)" if missing else "no runs"
    parts = [f"seed{'s' if len({r.config.seed for r in runs}) > 1 else ''} {seed_list(r.config.seed for r in runs)}"]
    older = Counter(r.training_version for r in runs if not r.current)
    made_here = len(runs) - sum(older.values())
    if not older:
        parts.append(f"all {len(runs)} runs made by this code (training version {TRAINING_VERSION})"
                     if len(runs) > 1 else f"made by this code (training version {TRAINING_VERSION})")
    else:
        versions = ", ".join(str(v) for v in sorted(older))
        which = "all" if not made_here else f"{sum(older.values())} of {len(runs)}"
        parts.append(f"{which} runs made by older code (training version {versions}; this code: {TRAINING_VERSION}), "
                     "retraining pending")
    parts[-1] += f", {where_made(runs)}"
    if missing:
        parts.append(f"{missing} setting{'s' if missing > 1 else ''} with no stored run (shown as missing)")
    return "; ".join(parts)


class RunSet(list):
    """A list of runs (what every chapter function takes) that remembers the configs it was asked for, so a page can
    say which settings have no run, and whether the runs were made by this code."""

    def __init__(self, runs, configs: list[RunConfig] | None = None, trained: bool = False):
        super().__init__(run for run in runs if run is not None)
        self.configs = list(configs) if configs is not None else [run.config for run in self]
        self.missing = [c for c, run in zip(self.configs, runs) if run is None] if configs is not None else []
        self.trained = trained  # True: this notebook's profile trains; False: stored runs replayed

    @property
    def current(self) -> bool:
        return all(run.current for run in self)

    def label(self, runs=None) -> str:
        """The provenance line of these runs (or of a subset of them drawn in one figure)."""
        if runs is None:
            return provenance(self, len(self.missing))
        return provenance(runs)
