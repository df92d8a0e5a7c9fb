"""Replay a stored run or train it: the one place that joins the RunStore (rlbook.runs) and the trainer.

The RunStore only reads and writes runs; this module sits above both, so `runs` never imports the trainer.
"""
from __future__ import annotations

import fcntl
import importlib.util
import os
import warnings

import torch

from . import trainer
from .config import INIT, RunConfig
from .models import check_checkpoint, get_preset
from .runs import UNTOUCHED, CorruptRunError, Run, RunStore, SupersededRunWarning, reference_root
from .versions import TRAINING_VERSION


def run_or_load(config: RunConfig, store: RunStore | None = None, progress: bool = True,
                references: bool = True, keep_superseded: bool = False) -> Run:
    """Replay a finished run at once, resume an interrupted one, or train a new one (with a progress bar).

    With `references`, a finished reference run shipped in data/runs with the same config is replayed too. A run
    with the same config made by another version of the code is never replayed as current: a warning names it and
    the run is trained anew, unless `keep_superseded` asks to replay it (the warning still says so).
    """
    store = store or RunStore()
    run = store.find(config)
    if run is not None and run.config.hash() != config.hash():
        raise CorruptRunError(f"{run.path / 'config.json'} does not hold the config its directory name says; "
                              f"{UNTOUCHED}")
    if run is None and references:
        reference = RunStore(reference_root()).find(config)
        if reference is not None and reference.complete:
            return reference
    if run is None:
        stores = [store, RunStore(reference_root())] if references else [store]
        older = [r for s in stores for r in s.superseded(config) if r.complete]
        if older:
            what = (f"{older[0].path} has this config but was made by training version {older[0].training_version} "
                    f"(this code: {TRAINING_VERSION})")
            if keep_superseded:
                warnings.warn(f"{what}; replaying it as asked (keep_superseded)", SupersededRunWarning, stacklevel=2)
                return older[0]
            warnings.warn(f"{what}; training it anew (keep_superseded=True, or --keep-superseded, replays the old "
                          "one instead)", SupersededRunWarning, stacklevel=2)
    if run is not None and run.complete:
        return run
    check_runnable(config)
    if run is None:
        trainer.warm_start_of(config, store, progress)  # before the run's directory: a failed warm start leaves none
        try:
            run = store.create(config)
        except FileExistsError:  # another process created it a moment ago
            run = store.find(config)
    with open(run.path / "config.json") as lock:  # flock on the run's own config: no extra file
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits for the one training this run, then replays it
        if not run.complete:
            trainer.train(config, run, progress=progress)
    return run


def check_runnable(config: RunConfig) -> None:
    """What this machine must provide to train the run (a GPU for fused_ratio='on', the checkpoint that init or the
    preset names): checked before a run directory is made or a model is loaded."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton") is not None
    if config.fused_ratio == "on" and not (torch.cuda.is_available() or interpreted):
        raise ValueError("fused_ratio='on' needs a CUDA GPU (the fused Triton kernel) and none is available; "
                         "use fused_ratio='auto' (fused only on a GPU) or 'off'")
    if config.init not in INIT:
        check_checkpoint("init", config.init)
    elif get_preset(config.preset).hub_id is not None:
        check_checkpoint("preset", get_preset(config.preset).hub_id)
