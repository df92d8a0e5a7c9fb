"""Checkpoint merging along a pre-training trajectory (PMA, arXiv 2505.12082), at nano scale on CPU.

A warmup-stable-decay (WSD) SFT run keeps a checkpoint every V tokens; we merge the last N stable-phase checkpoints
(`merging.merge_state_dicts`: SMA, EMA, WMA) and compare the merge with its last checkpoint and with annealed models,
draw the loss surface around them (`pma_surface`), continue training from a merge (PMA-init), and recover from a
loss spike by merging the checkpoints before it (`pma_training`). Every result is a RunStore result
(`rlbook.runs.ResultSet`, `<runs>/pma/<trajectory>/`), keyed by its settings, so a rerun or a widget replays it
without recomputing.

Reference results: `store_reference` copies a trajectory's JSON results (never its weights) into
`data/runs/05_merging/` as a result set, and `load_references` reads them back without any weights, for the
chapter's verdict (`rlbook.chapters.merging_verdicts`) over trajectory seeds.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch

from ..evaluate import accuracy, completion_budget, evaluation_problems
from ..merging import METHODS, load_checkpoint, merge_state_dicts
from ..models import load_pretrained, set_cpu_threads
from ..pretrain import WarmStartConfig, sft_loss, trace_batch, warm_start
from ..profiles import resolve_profile
from ..runs import RESULT_RECORD, CorruptRunError, ResultSet, RunStore, read_json, read_rows, reference_root
from ..tasks import make_task
from ..versions import RESULTS_VERSION

HELDOUT_SEED = 54321  # held-out traces: a stream no training step (seeds >= 1e6) or eval set (12345) uses
CONTINUE_SEED = 10**9  # continued training draws fresh problems from seeds >= 1e9
RESULTS_EXPERIMENT = "pma"  # the trajectories' result sets under <runs>
REFERENCE_EXPERIMENT = "05_merging"  # the reference results' folder under data/runs
REFERENCE_RESULTS = ("checkpoints.json", "merges.json")  # what the reference verdict needs


@dataclass
class PMAConfig:
    preset: str = "nano-tiny"
    seed: int = 0
    lr: float = 3e-3  # peak (stable-phase) learning rate of the trajectory
    batch_size: int = 64
    max_steps: int = 600
    warmup_steps: int = 20
    decay_steps: int = 60  # the annealed model: the last decay_steps decay the LR linearly to 0
    checkpoint_every: int = 20
    eval_size: int = 200  # greedy accuracy on the first eval_size problems of the fixed set
    heldout_size: int = 256  # held-out loss on this many fresh traces
    ns: tuple = (3, 6, 10)  # PMA: N in {3, 6, 10, 15}, 10 by default
    methods: tuple = ("sma", "ema", "wma")
    alpha: float = 0.2  # EMA alpha, PMA uses 0.1 or 0.2
    focus_n: int = 6  # N of the merge curve along the stable phase, the loss surface and PMA-init
    grid: int = 9  # loss-surface grid: grid x grid points
    repeats: int = 3  # PMA-init and spike recovery run on this many data streams
    continue_steps: int = 60  # PMA-init: SFT steps from the merge and from the last checkpoint
    continue_lr: float = 3e-3
    continue_warmup: int = 10  # fresh AdamW: warm up the LR, then constant
    spike_lr: float = 1e-1  # the LR ramps up to this (exponentially) until the loss spikes
    spike_steps: int = 60
    spike_checkpoint_every: int = 5
    resume_steps: int = 60  # after the spike, resume at `lr` from the merge and from the last pre-spike checkpoint
    spike_n: int = 3
    task_params: dict = field(default_factory=lambda: {"digits": [1, 2]})  # 1-2 digit addition: learnt in minutes

    def __post_init__(self):
        if not set(self.methods) <= set(METHODS):
            raise ValueError(f"methods={self.methods!r}; choose from: {', '.join(METHODS)}")
        need = max(*self.ns, self.focus_n)
        if self.checkpoint_every <= 0 or self.max_steps - self.decay_steps < need * self.checkpoint_every:
            raise ValueError(f"checkpoint_every={self.checkpoint_every}: the stable phase needs at least {need} "
                             "checkpoints (max of ns and focus_n)")

    def warm_start_config(self) -> WarmStartConfig:
        return WarmStartConfig(preset=self.preset, task_params=self.task_params, seed=self.seed,
                               batch_size=self.batch_size, lr=self.lr, schedule="wsd", warmup_steps=self.warmup_steps,
                               decay_steps=self.decay_steps, target_accuracy=None, max_steps=self.max_steps,
                               eval_every=self.max_steps, validation_size=self.eval_size,
                               checkpoint_every=self.checkpoint_every)


_NANO_SMALL = dict(preset="nano-small", max_steps=2000, decay_steps=200, checkpoint_every=25, ns=(3, 6, 10, 15),
                   focus_n=10, grid=13, continue_steps=100, resume_steps=100, eval_size=500, heldout_size=512)
# the trajectory is a warm start (rlbook.pretrain), which trains on the CPU unless a run asks for a GPU: every profile
# trains it there, so the GPU profiles use the CPU-sized model too
PROFILE_SIZES = {"smoke": dict(preset="nano-tiny", repeats=2),  # two data streams: the fewest a spread needs
                 "cpu": _NANO_SMALL, "standard": _NANO_SMALL, "paper": _NANO_SMALL}


def chapter_config(profile: str = "auto", **overrides) -> PMAConfig:
    """The chapter's settings for a profile (smoke: nano-tiny; the others: nano-small), with overrides."""
    profile = resolve_profile(profile)
    unknown = set(overrides) - {f.name for f in fields(PMAConfig)}
    if unknown:
        raise ValueError(f"unknown setting(s) {sorted(unknown)}; valid: {', '.join(f.name for f in fields(PMAConfig))}")
    return PMAConfig(**{**PROFILE_SIZES[profile], **overrides})


def results_name(config: PMAConfig) -> str:
    """The name of a trajectory's results folder: its warm start's key (settings, seed, code version), the held-out
    size and the code's RESULTS_VERSION."""
    return f"{config.warm_start_config().key()}-heldout{config.heldout_size}-v{RESULTS_VERSION}"


class Trajectory:
    """A cached WSD run: stable-phase checkpoints every `checkpoint_every` steps and the annealed final model, plus
    a twin run annealed at the last stable checkpoint (same data and steps until its decay: equal tokens)."""

    def __init__(self, config: PMAConfig, store: RunStore | None = None, progress: bool = True):
        self.config, self.store = config, store or RunStore()
        ws = config.warm_start_config()
        self.final = warm_start(ws, self.store, progress=progress)  # annealed after all max_steps
        stable_end = config.max_steps - config.decay_steps
        self.annealed_equal = warm_start(replace(ws, max_steps=stable_end, checkpoint_every=0, eval_every=stable_end),
                                         self.store, progress=progress)
        set_cpu_threads()
        self.rows = read_rows(self.final.parent / "metrics.jsonl")
        self.checkpoints = {int(d.name[5:]): d for d in sorted((self.final.parent / "checkpoints").glob("step-*"))}
        self.stable = [s for s in self.checkpoints if s <= stable_end]  # PMA merges in the constant-LR phase
        self.results = self.store.result_set(RESULTS_EXPERIMENT, results_name(config))
        self.task = make_task(ws.task, **ws.task_params)
        self.model, self.tokenizer = load_pretrained(str(self.final))
        self.eval_set = evaluation_problems(ws.task, ws.task_params, config.eval_size)
        self.budget = completion_budget(self.task, self.tokenizer)
        heldout = self.task.generate(config.heldout_size, seed=HELDOUT_SEED)
        self.heldout = trace_batch(self.tokenizer, self.task, heldout)

    def tokens_per_checkpoint(self) -> float:
        """V: tokens between two checkpoints, from the metrics' running token count."""
        tokens = {r["step"]: r["tokens"] for r in self.rows}
        return (tokens[self.stable[-1]] - tokens[self.stable[0]]) / max(len(self.stable) - 1, 1)

    def set_weights(self, state_dict) -> torch.nn.Module:
        """Load weights into the shared model (the tied lm_head follows the embedding)."""
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:
            raise ValueError(f"checkpoint does not fit the model: missing {missing}, unexpected {unexpected}")
        return self.model

    @torch.no_grad()
    def heldout_loss(self, state_dict) -> float:
        return sft_loss(self.set_weights(state_dict).eval(), *self.heldout).item()

    def evaluate(self, state_dict) -> dict:
        """Held-out loss and greedy accuracy of a set of weights."""
        loss = self.heldout_loss(state_dict)
        return {"loss": loss, "acc": accuracy(self.model, self.tokenizer, self.task, self.eval_set, self.budget)}

    def merged(self, method: str, n: int, end: int, alpha: float | None = None) -> dict:
        """PMA: merge the last n stable checkpoints ending at step `end`, oldest first."""
        steps = [s for s in self.stable if s <= end][-n:]
        if len(steps) < n or steps[-1] != end:
            raise ValueError(f"need {n} stable checkpoints ending at step {end}; have {self.stable}")
        return merge_state_dicts([self.checkpoints[s] for s in steps], method, alpha or self.config.alpha)


def evaluate_checkpoints(traj: Trajectory, progress: bool = True) -> dict:
    """{step: {loss, acc}} of every checkpoint, 'annealed' (the final model), 'annealed_equal' (the twin run)."""
    keys = {str(s): {"path": str(p)} for s, p in traj.checkpoints.items()}
    keys.update(annealed={"path": str(traj.final)}, annealed_equal={"path": str(traj.annealed_equal)})
    return traj.results.cached("checkpoints.json", keys, lambda path: traj.evaluate(load_checkpoint(path)), progress,
                               "evaluate checkpoints")


def merge_name(method: str, n: int, end: int, alpha: float) -> str:
    return f"{method}-N{n}-end{end}" + (f"-a{alpha}" if method == "ema" else "")


def run_merges(traj: Trajectory, specs, alpha: float | None = None, progress: bool = True) -> dict:
    """{name: {loss, acc, method, n, end, alpha}} for (method, n, end) specs; cached in merges.json."""
    alpha = alpha or traj.config.alpha
    keys = {merge_name(m, n, e, alpha): dict(method=m, n=n, end=e, alpha=alpha) for m, n, e in specs}
    return traj.results.cached("merges.json", keys, lambda **s: {**traj.evaluate(traj.merged(**s)), **s}, progress,
                               "merge")


def merge_grid(traj: Trajectory, progress: bool = True) -> dict:
    """Every method x N merged at the last stable checkpoint."""
    specs = [(m, n, traj.stable[-1]) for m in traj.config.methods for n in traj.config.ns]
    return run_merges(traj, specs, progress=progress)


def merge_curve(traj: Trajectory, methods=("sma", "wma"), progress: bool = True) -> dict:
    """Merges of the last focus_n checkpoints ending at every stable checkpoint with enough predecessors."""
    n = traj.config.focus_n
    return run_merges(traj, [(m, n, end) for m in methods for end in traj.stable[n - 1:]], progress=progress)


def reference_results(traj: Trajectory, progress: bool = True) -> dict:
    """What the chapter's reference verdict reads (`merging_verdicts`): every checkpoint and both annealed models
    evaluated, and the merge grid (every method x N, ending at the last stable checkpoint)."""
    return {"checkpoints": evaluate_checkpoints(traj, progress), "merges": merge_grid(traj, progress)}


def store_reference(traj: Trajectory, root: str | Path | None = None) -> Path:
    """Copy a trajectory's JSON results, never its weights, to the result set
    `<root>/05_merging/seed<seed>-<results name>/` (root: data/runs), its record (settings, where the trajectory
    and its twin were trained) last: a folder with result.json is complete."""
    missing = [name for name in REFERENCE_RESULTS if not (traj.results.path / name).exists()]
    if missing:
        raise ValueError(f"{traj.results.path} lacks {missing}: run pma.reference_results(traj) first")
    folder = f"seed{traj.config.seed}-{traj.results.path.name}"
    trained = {name: read_json(model.parent / "meta.json")  # where the trajectory and its twin were trained
               for name, model in (("trajectory", traj.final), ("annealed_equal", traj.annealed_equal))}
    record = {"config": asdict(traj.config), "results": traj.results.path.name, "end": traj.stable[-1], **trained}
    return traj.results.copy_to(RunStore(root or reference_root()).result_set(REFERENCE_EXPERIMENT, folder),
                                record).path


@dataclass(frozen=True)
class Reference:
    """One trajectory's stored results, read without its weights: its settings, `end` (the last stable checkpoint,
    where the grid's merges end), `checkpoints` ({step | 'annealed' | 'annealed_equal': {loss, acc}}), `merges`
    ({merge name: {loss, acc, method, n, end, alpha}}) and `meta` (where it was trained and evaluated)."""
    path: Path
    config: PMAConfig
    end: int
    results: str  # the results folder's name when it was stored
    checkpoints: dict
    merges: dict
    meta: dict

    @property
    def current(self) -> bool:
        """Made by this code: this code gives its settings the same results name (warm-start and results versions)."""
        return results_name(self.config) == self.results


def load_references(root: str | Path | None = None, current_only: bool = True) -> list[Reference]:
    """The reference results in `<root>/05_merging` (root: data/runs) by seed, only those made by this code unless
    current_only is False; an unreadable one raises CorruptRunError naming its folder."""
    sets = RunStore(root or reference_root()).result_sets(REFERENCE_EXPERIMENT)
    references = [_read_reference(result_set) for result_set in sets]
    return sorted((r for r in references if r.current or not current_only), key=lambda r: r.config.seed)


def _read_reference(result_set: ResultSet) -> Reference:
    folder = result_set.path
    missing = [name for name in REFERENCE_RESULTS if not (folder / name).exists()]
    if missing:
        raise CorruptRunError(f"{folder}: has {RESULT_RECORD} but lacks {missing}; store it again")
    stored = result_set.record
    checkpoints, merges = (read_json(folder / name) for name in REFERENCE_RESULTS)
    try:
        values = stored["config"]
        config = PMAConfig(**{**values, "ns": tuple(values["ns"]), "methods": tuple(values["methods"])})
        meta = {"trajectory": stored["trajectory"], "annealed_equal": stored["annealed_equal"],
                "evaluated": checkpoints.pop("environment", None), "merged": merges.pop("environment", None)}
        return Reference(folder, config, int(stored["end"]), stored["results"], checkpoints, merges, meta)
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptRunError(f"{folder / RESULT_RECORD}: not a chapter 5 reference ({error!r}); store it "
                              "again") from None
