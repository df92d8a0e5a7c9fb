"""Write stored runs as TensorBoard event files, under the tags a TRL run logs for the quantities TRL has.

A TRL run reporting to TensorBoard logs each metric through transformers' TensorBoardCallback as `train/<TRL name>`
(and `eval/<name>` for evaluation metrics), so a book run opened beside the reader's own TRL run lines up tag by tag:
rlbook's `reward` is `train/reward`, `zero_std_frac` is `train/frac_reward_zero_std` (rlbook.trl_backend's
TRL_METRIC_NAMES); rlbook's own quantities keep rlbook's names (`train/m2`, `eval/greedy_acc`). One folder per run:
DIR/<experiment>/<run directory>, with the config and meta as text.

Exporting again writes only what changed: each folder holds a stamp (STAMP) of what it was written from; a run whose
stamp matches is left alone, a run that changed is written into a new folder that then replaces the old one, so a
curve is never written twice and an unreadable run leaves nothing behind. A folder without the stamp was not written
by this export and is never touched.

    python -m rlbook runs --export tensorboard DIR      (pip install -e ".[tensorboard]")
"""
from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .runs import Run, reference_root
from .trl_backend import TRL_METRIC_NAMES

FORMATS = ("tensorboard",)
STAMP = "rlbook-export.json"


def tag(name: str) -> str:
    """The TensorBoard tag of an rlbook metric: TRL's name where TRL logs the quantity, as transformers' callback
    writes it (train/<name>; eval_<name> becomes eval/<name>)."""
    if name.startswith("eval_"):
        return f"eval/{name[len('eval_'):]}"
    return f"train/{TRL_METRIC_NAMES.get(name, name)}"


def scalars(row: dict) -> dict[str, float]:
    """The row's numbers by tag (lists, bins and missing values are not scalars; the update is the step)."""
    return {tag(k): float(v) for k, v in row.items()
            if k != "update" and isinstance(v, (int, float)) and not isinstance(v, bool)}


@dataclass(frozen=True)
class Written:
    """A run's folder: written (new), rewritten (the run changed), unchanged, or failed (the reason: nothing
    written)."""

    folder: Path
    status: str
    reason: str = ""

    def line(self) -> str:
        return f"{self.status} {self.folder}" + (f": {self.reason}" if self.reason else "")


def write_runs(runs: list[Run], out_dir: str | Path) -> list[Written]:
    """One TensorBoard log folder per run, written only where the run changed since the last export."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ValueError("the TensorBoard export needs the tensorboard package: pip install -e \".[tensorboard]\" "
                         "(tensorboard==2.21.0)") from None
    outcomes, seen = [], set()
    for run in runs:
        if run.path.resolve() in seen:
            continue
        seen.add(run.path.resolve())
        reference = reference_root() in run.path.resolve().parents
        folder = Path(out_dir) / run.path.parent.name / (run.path.name + ("-reference" if reference else ""))
        try:
            outcomes.append(write_run(run, folder, SummaryWriter))
        except ValueError as error:  # an unreadable run (CorruptRunError) or a folder this export did not write
            outcomes.append(Written(folder, "failed", str(error)))
    return outcomes


def write_run(run: Run, folder: Path, writer_class) -> Written:
    """Read the whole run, then write it into a fresh folder that replaces `folder` (unless its stamp matches)."""
    config, meta, rows = run.config.to_dict(), run.meta, run.metrics  # raises before anything is written
    stamp = {"run": str(run.path), "sha256": hashlib.sha256(json.dumps([config, meta, rows], sort_keys=True,
                                                                       default=str).encode()).hexdigest()}
    old = folder / STAMP
    if folder.exists() and not old.exists():
        raise ValueError(f"{folder} exists and was not written by this export (no {STAMP}); remove it or export into "
                         "another folder")
    if old.exists() and json.loads(old.read_text()) == stamp:
        return Written(folder, "unchanged")
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        with writer_class(log_dir=str(fresh)) as writer:
            writer.add_text("config", f"```\n{json.dumps(config, indent=1)}\n```", 0)
            writer.add_text("meta", f"```\n{json.dumps(meta, indent=1)}\n```", 0)
            for row in rows:
                for name, value in scalars(row).items():
                    writer.add_scalar(name, value, row["update"])
        (fresh / STAMP).write_text(json.dumps(stamp))
        status = "rewritten" if folder.exists() else "written"
        if folder.exists():
            shutil.rmtree(folder)
        fresh.rename(folder)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return Written(folder, status)
