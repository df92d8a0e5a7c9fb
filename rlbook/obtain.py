"""Obtain runs: replay a stored run, resume an interrupted one or train a new one (joins the RunStore and trainer).

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
from .memory import Estimate, check_fits
from .models import check_checkpoint, get_preset
from .runs import UNTOUCHED, CorruptRunError, Run, RunStore, SupersededRunWarning, reference_root
from .versions import TRAINING_VERSION


def run_or_load(config: RunConfig, store: RunStore | None = None, progress: bool = True,
                references: bool = True, keep_superseded: bool = False, backend: str | None = None,
                train=None) -> Run:
    """Replay a finished run at once, resume an interrupted one, or train a new one (with a progress bar).

    With `references`, a finished reference run shipped in data/runs with the same config is replayed too. A run
    with the same config made by another version of the code is never replayed as current: a warning names it and
    the run is trained anew, unless `keep_superseded` asks to replay it (the warning still says so). `backend` names
    what trains the run, `train(config, run, progress)` (None: rlbook's trainer; "trl": rlbook.trl_backend): a stored
    run of this config made by another backend is refused, never replayed as this one's.
    """
    store = store or RunStore()
    run = store.find(config)
    if run is not None and run.config.hash() != config.hash():
        raise CorruptRunError(f"{run.path / 'config.json'} does not hold the config its directory name says; "
                              f"{UNTOUCHED}")
    if run is not None:
        check_backend(run, backend)
    if run is None and references:
        reference = RunStore(reference_root()).find(config)
        if reference is not None and reference.complete and reference.current:
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
    if run is not None and run.complete and not run.current:
        raise CorruptRunError(f"{run.path / 'meta.json'} says training version {run.training_version} made this run, "
                              f"but its directory carries this code's hash (version {TRAINING_VERSION}); {UNTOUCHED}")
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
            (train or trainer.train)(config, run, progress=progress)
    return run


def check_backend(run: Run, backend: str | None) -> None:
    """A ValueError when a stored run was made by another backend than `backend` (None: rlbook's trainer), naming
    the experiment to store it under instead (an empty run, made before its trainer started, is anyone's)."""
    made_by = run.meta.get("backend")
    if made_by == backend or (made_by is None and not run.metrics):
        return
    what = f"a {made_by}" if made_by else "an rlbook"
    experiment = run.path.parent.name
    raise ValueError(f"{run.path} holds {what} run of this config; store {backend or 'rlbook'} runs under their own "
                     f"experiment (e.g. --experiment {experiment}_{backend or 'rlbook'})")


def check_runnable(config: RunConfig) -> Estimate | None:
    """What this machine must provide to train the run (a GPU for device='cuda' and fused_ratio='on', the checkpoint
    that init or the preset names, the memory it needs): checked before a run directory is made or a model is loaded;
    returns the run's estimate (rlbook.memory)."""
    interpreted = os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton") is not None
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' needs a CUDA GPU and none is available; use device='cpu' (a notebook: "
                         "PROFILE='cpu' or 'reference')")
    if config.fused_ratio == "on" and not (torch.cuda.is_available() or interpreted):
        raise ValueError("fused_ratio='on' needs a CUDA GPU (the fused Triton kernel) and none is available; "
                         "use fused_ratio='auto' (fused only on a GPU) or 'off'")
    if config.init not in INIT:
        check_checkpoint("init", config.init)
    elif get_preset(config.preset).hub_id is not None:
        check_checkpoint("preset", get_preset(config.preset).hub_id)
    return check_fits(config)  # the memory and context it needs (rlbook.memory), refused when they do not fit


def seconds_per_update(config: RunConfig, stores: list[RunStore]) -> tuple[float, str] | None:
    """The measured wall time per update of stored runs like config (same settings, else same experiment and model),
    preferring runs made on this machine, and where they ran; None when nothing comparable is stored."""
    import platform
    import statistics

    from .runs import settings

    def per_update(runs):
        times = [(r.meta["wall_time_s"] / max(r.meta.get("updates") or r.config.total_updates, 1), r.meta.get("host"),
                  r.meta.get("device", "?")) for r in runs if r.complete and r.meta.get("wall_time_s")]
        here = [t for t in times if t[1] == platform.node()]
        return here or times

    runs = [r for s in stores for r in s.runs(config.experiment)]
    for like in ([r for r in runs if settings(r.config) == settings(config)],
                 [r for r in runs if r.config.preset == config.preset]):
        times = per_update(like)
        if times:
            where = "this machine" if times[0][1] == platform.node() else f"{times[0][2]} (another machine)"
            return statistics.median(t[0] for t in times), where
    return None


def plan(configs: list[RunConfig], store: RunStore | None = None) -> str:
    """What obtaining these runs will cost, said before anything trains: how many runs of how many updates, how many
    are stored (replayed), and a time estimate for the rest from the measured speed of comparable stored runs; for
    runs on a GPU also their GPU-hours by rlbook.gpu_hours' rough model."""
    from .gpu_hours import describe
    store = store or RunStore()
    stores = [store, RunStore(reference_root())]
    stored = [c for c in configs if any((r := s.find(c)) is not None and r.complete for s in stores)]
    todo = [c for c in configs if c not in stored]
    updates = sorted({c.total_updates for c in configs})
    text = (f"{len(configs)} runs of {'/'.join(map(str, updates))} updates: {len(stored)} stored by this code "
            f"(replayed), {len(todo)} to train")
    if todo:
        estimates = [seconds_per_update(c, stores) for c in todo]
        known = [(e[0] * c.total_updates, e[1]) for c, e in zip(todo, estimates) if e is not None]
        if known:
            where = sorted({w for _, w in known})
            text += (f", about {sum(s for s, _ in known) / 60:.0f} minutes (measured speed of comparable stored runs "
                     f"on {', '.join(where)}" + (f"; {len(todo) - len(known)} runs have none to time by" if
                                                 len(known) < len(todo) else "") + ")")
        else:
            text += ", no comparable stored run to time them by"
        on_gpu = [c for c in todo if c.device == "cuda"]
        if on_gpu:
            text += f"; on a GPU: {describe(on_gpu)}"
    return text


def obtain(configs: list[RunConfig], trains: bool, store: RunStore | None = None, progress: bool = True):
    """The runs of a notebook's settings as a RunSet.

    trains=False (the `reference` profile): the stored reference runs only (rlbook.runs.lookup: this code's, else older code's,
    labelled), never training; a setting with no stored run is missing. trains=True: print the plan (rlbook.obtain.plan),
    then replay what this code has stored and train the rest (run_or_load), never retraining a stored run."""
    from .runs import lookup
    from .runset import RunSet

    if not trains:
        return RunSet(lookup(configs), configs, trained=False)
    print("plan:", plan(configs, store), flush=True)
    return RunSet([run_or_load(c, store, progress=progress) for c in configs], configs, trained=True)
