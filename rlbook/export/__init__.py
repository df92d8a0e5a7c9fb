"""Write a run's configuration for another training framework (TRL, verl, AReaL), each key beside its source file.

An export is the framework's own configuration format: a flat YAML for `trl grpo --config` (TRL, rlbook.export.trl), the
Hydra overrides of `python3 -m verl.trainer.main_ppo` as a bash script (verl, rlbook.export.verl), a YAML of AReaL's
GRPOConfig (AReaL, rlbook.export.areal). `python bench/check_exports.py` reads every chapter's exports with each
framework's own code. A header names the framework release and the check, states the precision and the length unit,
lists what the reader sets (model, data, machine), what the framework lacks and what it computes differently (with
both values on rlbook's toy batch, rlbook.export.toy_batch, where they differ). A run the framework cannot train as
rlbook does (chapter 7's online DPO) is refused with the reason in one line.

An export never overwrites a file that differs from what it would write (the reader may have edited it): it says
which files are new, unchanged or differ, and writes only with `overwrite=True` (`--overwrite`).

    python -m rlbook export 02_staleness --to areal --profile cpu --out exports/
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..config import RunConfig
from .areal import AREAL_VERSION, areal_export
from .common import Refused, header, yaml_text
from .trl import trl_export
from .verl import VERL_VERSION, verl_export, verl_text

FRAMEWORKS = ("trl", "verl", "areal")
EXPORTERS = {"trl": trl_export, "verl": verl_export, "areal": areal_export}
SUFFIX = {"trl": "trl.yaml", "verl": "verl.sh", "areal": "areal.yaml"}
# experiments with no RL run to export, and why
NOT_EXPORTABLE = {"05_merging": "chapter 5 averages checkpoints of a supervised warm start (rlbook.pretrain, "
                                "rlbook.merging); it has no RL run to export: save your framework's checkpoints and "
                                "merge them with rlbook.merging.merge_state_dicts"}
__all__ = ["AREAL_VERSION", "EXPORTERS", "FRAMEWORKS", "NOT_EXPORTABLE", "Outcome", "Refused", "VERL_VERSION",
           "configs_of", "export", "export_text"]


def check_framework(framework: str) -> None:
    if framework not in EXPORTERS:
        raise ValueError(f"framework {framework!r} is not an export target; choose one of: {', '.join(FRAMEWORKS)}")


def export_text(config: RunConfig, framework: str, seeds: list[int] | None = None) -> str:
    """The configuration file of config for framework (trl, verl or areal); Refused (a ValueError) with the reason when
    the framework cannot train the run as rlbook does."""
    check_framework(framework)
    out = EXPORTERS[framework](config)
    head = header(config, out, seeds or [config.seed])
    return verl_text(out, head) if framework == "verl" else yaml_text(out, head, nested=framework == "areal")


def configs_of(target: str, profile: str) -> list[RunConfig]:
    """The configs a target names: a chapter's experiment (RunConfig.experiment, e.g. 02_staleness), a named sweep
    (rlbook.experiments.SWEEPS) or a run directory holding config.json."""
    from ..experiments import SWEEPS, sweep
    from ..runs import Run

    if (Path(target) / "config.json").exists():
        return [Run(Path(target)).config]
    if target in NOT_EXPORTABLE:
        raise ValueError(f"{target} cannot be exported: {NOT_EXPORTABLE[target]}")
    if target in SWEEPS:
        return sweep(target, profile)
    by_experiment = [c for name in SWEEPS for c in sweep(name, profile) if c.experiment == target]
    if not by_experiment:
        experiments = sorted({c.experiment for name in SWEEPS for c in sweep(name, profile)})
        raise ValueError(f"{target!r} is not a run directory, a sweep or an experiment; sweeps: {', '.join(SWEEPS)}; "
                         f"experiments: {', '.join(experiments)}")
    return by_experiment


@dataclass(frozen=True)
class Outcome:
    """One file of an export: written (new), unchanged (already there, the same), replaced (differed; overwrite=True)
    or refused (not written; `reason` says why)."""

    path: Path
    status: str
    reason: str = ""

    def line(self) -> str:
        return f"{self.status} {self.path}" + (f": {self.reason}" if self.reason else "")


def export(target: str, framework: str, out_dir: str | Path, profile: str = "cpu", overwrite: bool = False
           ) -> list[Outcome]:
    """One file per distinct setting of target (seeds folded into one file). A file that exists and differs is left
    alone (ValueError naming them) unless overwrite; nothing is written before every file is known."""
    check_framework(framework)
    groups: dict[str, list[RunConfig]] = {}
    for config in configs_of(target, profile):
        groups.setdefault(json.dumps(config.replace(seed=0, name="-").identity(), sort_keys=True), []).append(config)
    out_dir, planned = Path(out_dir), []
    for configs in groups.values():
        first = configs[0]
        path = out_dir / f"{first.experiment}-{first.name.replace(f'-seed{first.seed}', '')}.{SUFFIX[framework]}"
        try:
            planned.append((path, export_text(first, framework, sorted({c.seed for c in configs}))))
        except Refused as refusal:
            planned.append((path, refusal))
    texts = [(path, text) for path, text in planned if isinstance(text, str)]
    differing = [path for path, text in texts if path.exists() and path.read_text() != text]
    if differing and not overwrite:
        raise ValueError(f"{len(differing)} file(s) in {out_dir} differ from this export (edited by hand, or an older "
                         f"export): {', '.join(p.name for p in differing)}; nothing was written: pass --overwrite to "
                         "replace them, or choose another --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for path, text in planned:
        if not isinstance(text, str):
            outcomes.append(Outcome(path, "refused", str(text)))
        elif path.exists() and path.read_text() == text:
            outcomes.append(Outcome(path, "unchanged"))
        else:
            status = "replaced" if path.exists() else "written"
            path.write_text(text)
            outcomes.append(Outcome(path, status))
    return outcomes
