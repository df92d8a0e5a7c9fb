"""Write stored runs as TensorBoard event files, under the tags a TRL run logs for the quantities TRL has.

A TRL run reporting to TensorBoard logs each metric through transformers' TensorBoardCallback as `train/<TRL name>`
(and `eval/<name>` for evaluation metrics), so a book run opened beside the reader's own TRL run lines up tag by tag:
rlbook's `reward` is `train/reward`, `zero_std_frac` is `train/frac_reward_zero_std` (rlbook.trl_backend's
TRL_METRIC_NAMES); rlbook's own quantities keep rlbook's names (`train/m2`, `eval/greedy_acc`). One folder per run:
DIR/<experiment>/<run directory>, with the config and meta as text.

    python -m rlbook runs --export tensorboard DIR      (pip install -e ".[tensorboard]")
"""
from __future__ import annotations

import json
from pathlib import Path

from .runs import Run, reference_root
from .trl_backend import TRL_METRIC_NAMES

FORMATS = ("tensorboard",)


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


def write_runs(runs: list[Run], out_dir: str | Path) -> list[Path]:
    """One TensorBoard log folder per run; returns the folders written."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ValueError("the TensorBoard export needs the tensorboard package: pip install -e \".[tensorboard]\" "
                         "(tensorboard==2.21.0)") from None
    written, seen = [], set()
    for run in runs:
        if run.path.resolve() in seen:
            continue
        seen.add(run.path.resolve())
        reference = reference_root() in run.path.resolve().parents
        folder = Path(out_dir) / run.path.parent.name / (run.path.name + ("-reference" if reference else ""))
        with SummaryWriter(log_dir=str(folder)) as writer:
            writer.add_text("config", f"```\n{json.dumps(run.config.to_dict(), indent=1)}\n```", 0)
            writer.add_text("meta", f"```\n{json.dumps(run.meta, indent=1)}\n```", 0)
            for row in run.metrics:
                for name, value in scalars(row).items():
                    writer.add_scalar(name, value, row["update"])
        written.append(folder)
    return written
