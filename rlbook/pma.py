"""Checkpoint merging along a pre-training trajectory (PMA, arXiv 2505.12082), at nano scale on CPU.

A warmup-stable-decay (WSD) SFT run keeps a checkpoint every V tokens; we merge the last N stable-phase checkpoints
(`merging.merge_state_dicts`: SMA, EMA, WMA) and compare the merge with its last checkpoint and with the annealed
(decayed) model, draw the loss surface around them, continue training from a merge (PMA-init), and recover from a
loss spike by merging the checkpoints before it. Every result is cached as JSON under `<runs>/pma/<trajectory>/`,
keyed by its settings, so a rerun or a widget replays it without recomputing.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .evaluate import accuracy, completion_budget, evaluation_problems
from .merging import load_checkpoint, merge_state_dicts
from .models import load_pretrained
from .pretrain import WarmStartConfig, save, sft_loss, trace_batch, warm_start
from .profiles import resolve_profile
from .runs import RunStore, environment, read_rows, write_json
from .tasks import make_task

HELDOUT_SEED = 54321  # held-out traces: a stream no training step (seeds >= 1e6) or eval set (12345) uses
CONTINUE_SEED = 10**9  # continued training draws fresh problems from seeds >= 1e9


@dataclass
class PMAConfig:
    preset: str = "nano-tiny"
    seed: int = 0
    lr: float = 3e-3  # peak (stable-phase) learning rate of the trajectory
    batch_size: int = 64
    max_steps: int = 600
    warmup_steps: int = 20
    decay_steps: int = 120  # the annealed model: the last decay_steps decay the LR linearly to 0
    checkpoint_every: int = 20
    eval_size: int = 200  # greedy accuracy on the first eval_size problems of the fixed set
    heldout_size: int = 256  # held-out loss on this many fresh traces
    ns: tuple = (3, 6, 10)  # PMA: N in {3, 6, 10, 15}, 10 by default
    methods: tuple = ("sma", "ema", "wma")
    alpha: float = 0.2  # EMA alpha, PMA uses 0.1 or 0.2
    curve_n: int = 6  # N of the merge-vs-checkpoint curve along the stable phase
    grid: int = 9  # loss-surface grid: grid x grid points
    continue_steps: int = 60  # PMA-init: SFT steps from the merge and from the last checkpoint
    continue_lr: float = 3e-3
    spike_lr: float = 5e-2  # a learning rate the model cannot take: it diverges
    spike_steps: int = 60
    spike_checkpoint_every: int = 5
    resume_steps: int = 60  # after the spike, resume at `lr` from the merge and from the last pre-spike checkpoint
    spike_n: int = 3
    task_params: dict = field(default_factory=dict)

    def warm_start_config(self) -> WarmStartConfig:
        return WarmStartConfig(preset=self.preset, task_params=self.task_params, seed=self.seed,
                               batch_size=self.batch_size, lr=self.lr, schedule="wsd", warmup_steps=self.warmup_steps,
                               decay_steps=self.decay_steps, target_accuracy=None, max_steps=self.max_steps,
                               eval_every=self.max_steps, eval_size=self.eval_size,
                               checkpoint_every=self.checkpoint_every)


PROFILE_SIZES = {
    "smoke": dict(preset="nano-tiny", max_steps=600, decay_steps=120, checkpoint_every=20, ns=(3, 6, 10)),
    "standard": dict(preset="nano-small", max_steps=1500, decay_steps=300, checkpoint_every=25, ns=(3, 6, 10, 15),
                     lr=2e-3, continue_lr=2e-3, curve_n=10, grid=13, continue_steps=150, spike_steps=100,
                     resume_steps=150, eval_size=500, heldout_size=512),
}


def chapter_config(profile: str = "auto", **overrides) -> PMAConfig:
    """The chapter's settings for a profile (smoke: nano-tiny, standard: nano-small), with overrides."""
    profile = resolve_profile(profile)
    if profile == "paper":
        raise ValueError("chapter 5 trains its own pre-training trajectory; a 1.7B one is out of reach: "
                         "use profile smoke or standard")
    return PMAConfig(**{**PROFILE_SIZES[profile], **overrides})


def _key(values: dict) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:10]


class Trajectory:
    """A cached WSD run: stable-phase checkpoints every `checkpoint_every` steps, and the annealed final model."""

    def __init__(self, config: PMAConfig, store: RunStore | None = None, progress: bool = True):
        self.config, self.store = config, store or RunStore()
        ws = config.warm_start_config()
        self.final = warm_start(ws, self.store, progress=progress)  # the annealed model
        self.path = self.final.parent
        self.rows = read_rows(self.path / "metrics.jsonl")
        stable_end = config.max_steps - config.decay_steps
        dirs = sorted((self.path / "checkpoints").glob("step-*"))
        self.checkpoints = {int(d.name[5:]): d for d in dirs}
        self.stable = [s for s in self.checkpoints if s <= stable_end]  # PMA merges in the constant-LR phase
        self.results = self.store.root / "pma" / ws.key()
        self.task = make_task(ws.task, **ws.task_params)
        self.model, self.tokenizer = load_pretrained(str(self.final))
        self.eval_set = evaluation_problems(ws.task, ws.task_params, config.eval_size)
        self.budget = completion_budget(self.task, self.tokenizer)
        heldout = self.task.generate(config.heldout_size, seed=HELDOUT_SEED)
        self.heldout = trace_batch(self.tokenizer, self.task, heldout)

    def tokens_per_checkpoint(self) -> float:
        """V: tokens between two checkpoints, from the metrics' running token count."""
        tokens = {r["step"]: r["tokens"] for r in self.rows}
        steps = self.stable
        return (tokens[steps[-1]] - tokens[steps[0]]) / max(len(steps) - 1, 1)

    def set_weights(self, state_dict) -> torch.nn.Module:
        """Load weights into the shared model (tied lm_head follows the embedding)."""
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:
            raise ValueError(f"checkpoint does not fit the model: missing {missing}, unexpected {unexpected}")
        return self.model

    @torch.no_grad()
    def heldout_loss(self, model) -> float:
        model.eval()
        return sft_loss(model, *self.heldout).item()

    def evaluate(self, state_dict) -> dict:
        """Held-out loss and greedy accuracy of a set of weights."""
        model = self.set_weights(state_dict)
        return {"loss": self.heldout_loss(model),
                "acc": accuracy(model, self.tokenizer, self.task, self.eval_set, self.budget)}

    def merged(self, method: str, n: int, end: int) -> dict:
        """PMA: merge the last n stable checkpoints ending at step `end`, oldest first."""
        steps = [s for s in self.stable if s <= end][-n:]
        if len(steps) < n or steps[-1] != end:
            raise ValueError(f"need {n} stable checkpoints ending at step {end}; have {self.stable}")
        return merge_state_dicts([self.checkpoints[s] for s in steps], method, self.config.alpha)


def _cached(path: Path, keys: dict, compute, progress: bool = True, desc: str = "") -> dict:
    """{name: result} for every name in `keys` (name -> settings), computing and storing only the missing ones."""
    store = json.loads(path.read_text()) if path.exists() else {}
    missing = [k for k in keys if k not in store]
    for name in tqdm(missing, desc=desc, disable=not progress or not missing):
        store[name] = compute(**keys[name])
        store["environment"] = environment()
        write_json(path, store)  # after each result: an interrupted run keeps what it finished
    return {k: store[k] for k in keys}


def evaluate_checkpoints(traj: Trajectory, progress: bool = True) -> dict:
    """{step: {loss, acc}} of every checkpoint, and 'annealed' for the decayed final model."""
    keys = {str(s): {"path": str(p)} for s, p in traj.checkpoints.items()}
    keys["annealed"] = {"path": str(traj.final)}
    return _cached(traj.results / "checkpoints.json", keys, lambda path: traj.evaluate(load_checkpoint(path)),
                   progress, "evaluate checkpoints")


def merge_name(method: str, n: int, end: int, alpha: float) -> str:
    return f"{method}-N{n}-end{end}" + (f"-a{alpha}" if method == "ema" else "")


def run_merges(traj: Trajectory, specs, progress: bool = True) -> dict:
    """{name: {loss, acc, method, n, end}} for (method, n, end) specs; cached in merges.json."""
    keys = {merge_name(m, n, e, traj.config.alpha): dict(method=m, n=n, end=e) for m, n, e in specs}
    return _cached(traj.results / "merges.json", keys,
                   lambda method, n, end: {**traj.evaluate(traj.merged(method, n, end)), "method": method, "n": n,
                                           "end": end}, progress, "merge")


def merge_grid(traj: Trajectory, end: int | None = None, progress: bool = True) -> dict:
    """Every method x N (that fits) merged at `end` (default: the last stable checkpoint)."""
    end = end or traj.stable[-1]
    available = sum(s <= end for s in traj.stable)
    specs = [(m, n, end) for m in traj.config.methods for n in traj.config.ns if n <= available]
    return run_merges(traj, specs, progress)


def merge_curve(traj: Trajectory, methods=("sma", "wma"), n: int | None = None, progress: bool = True) -> dict:
    """Merges of the last n checkpoints ending at every stable checkpoint with n predecessors."""
    n = n or traj.config.curve_n
    specs = [(m, n, end) for m in methods for end in traj.stable[n - 1:]]
    return run_merges(traj, specs, progress)


def _flat(state_dict) -> torch.Tensor:
    return torch.cat([v.reshape(-1).float() for _, v in sorted(state_dict.items())])


def _unflat(vector: torch.Tensor, like) -> dict:
    out, i = {}, 0
    for k, v in sorted(like.items()):
        out[k] = vector[i:i + v.numel()].reshape(v.shape).to(v.dtype)
        i += v.numel()
    return out


def loss_surface(traj: Trajectory, n: int | None = None, span: float = 1.4, progress: bool = True) -> dict:
    """Held-out loss on the PCA plane of the last n stable checkpoints (centred on their mean, the SMA merge),
    with the checkpoints, the merge and the annealed model projected onto it."""
    n = n or max(traj.config.ns)
    settings = dict(n=n, span=span, grid=traj.config.grid, end=traj.stable[-1])
    return _cached(traj.results / "surface.json", {_key(settings): settings},
                   lambda **s: _surface(traj, progress=progress, **s), False)[_key(settings)]


def _surface(traj: Trajectory, n: int, span: float, grid: int, end: int, progress: bool) -> dict:
    steps = [s for s in traj.stable if s <= end][-n:]
    like = load_checkpoint(traj.checkpoints[steps[0]])
    points = torch.stack([_flat(load_checkpoint(traj.checkpoints[s])) for s in steps])
    center = points.mean(0)  # = the SMA merge of these checkpoints
    _, _, vt = torch.linalg.svd(points - center, full_matrices=False)
    basis = vt[:2]  # the two principal directions of the checkpoints' spread
    project = lambda v: ((v - center) @ basis.T).tolist()
    coords = points.sub(center) @ basis.T
    radius = span * coords.abs().max().item()
    axis = torch.linspace(-radius, radius, grid)
    losses = [[traj.heldout_loss(traj.set_weights(_unflat(center + a * basis[0] + b * basis[1], like)))
               for a in axis] for b in tqdm(axis, desc="loss surface", disable=not progress)]
    annealed = _flat(load_checkpoint(traj.final))
    return {"axis": axis.tolist(), "loss": losses, "steps": steps, "checkpoints": coords.tolist(),
            "merge": [0.0, 0.0], "annealed": project(annealed),
            "annealed_off_plane": (annealed - center - (annealed - center) @ basis.T @ basis).norm().item(),
            "checkpoint_loss": [traj.heldout_loss(traj.set_weights(load_checkpoint(traj.checkpoints[s])))
                                for s in steps],
            "explained": ((points - center) @ basis.T).pow(2).sum().item() / (points - center).pow(2).sum().item()}


def continue_training(traj: Trajectory, state_dict, steps: int, lr, seed: int = 0, checkpoint_dir: Path | None = None,
                      checkpoint_every: int = 0, progress: bool = True, desc: str = "continue") -> list[dict]:
    """SFT from `state_dict` with a fresh AdamW and lr(step) (a float: constant); one row per step with the loss
    and the gradient norm before clipping, plus the held-out loss at the end. Same pieces as `pretrain`."""
    model = traj.set_weights(state_dict)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0, weight_decay=0.0)
    rows = []
    for step in tqdm(range(steps), desc=desc, disable=not progress):
        for group in optimizer.param_groups:
            group["lr"] = lr(step) if callable(lr) else lr
        problems = traj.task.generate(traj.config.batch_size, seed=CONTINUE_SEED + 10**6 * seed + step)
        loss = sft_loss(model, *trace_batch(traj.tokenizer, traj.task, problems))
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        rows.append({"step": step + 1, "loss": loss.item(), "grad_norm": grad_norm.item(),
                     "lr": optimizer.param_groups[0]["lr"]})
        if checkpoint_every and (step + 1) % checkpoint_every == 0:
            save(model, traj.tokenizer, checkpoint_dir / f"step-{step + 1:06d}")
    rows[-1]["heldout_loss"] = traj.heldout_loss(model)
    return rows


def pma_init(traj: Trajectory, method: str = "sma", n: int | None = None, progress: bool = True) -> dict:
    """PMA-init: continue SFT at a constant LR from the merge of the last n stable checkpoints and from the last
    checkpoint itself (the paper reports a smoother GradNorm from the merge)."""
    c = traj.config
    settings = dict(method=method, n=n or max(c.ns), steps=c.continue_steps, lr=c.continue_lr, seed=c.seed,
                    end=traj.stable[-1])
    def compute(method, n, steps, lr, seed, end):
        starts = {"merged": traj.merged(method, n, end), "last": load_checkpoint(traj.checkpoints[end])}
        return {k: continue_training(traj, sd, steps, lr, seed, progress=progress, desc=f"continue from {k}")
                for k, sd in starts.items()}
    return _cached(traj.results / "pma_init.json", {_key(settings): settings}, compute, False)[_key(settings)]


def detect_spike(losses, window: int = 10, factor: float = 1.5) -> int | None:
    """Index of the first loss above `factor` times the lowest of the `window` losses before it, else None."""
    for i in range(window, len(losses)):
        if not losses[i] == losses[i] or losses[i] > factor * min(losses[i - window:i]):  # NaN counts as a spike
            return i
    return None


def spike_recovery(traj: Trajectory, progress: bool = True) -> dict:
    """From the middle of the stable phase, train at `spike_lr` until the loss spikes (checkpoints every few steps);
    then resume at the trajectory's LR from the merge of the last `spike_n` checkpoints before the spike, and from
    the last of them alone (PMA: merging pre-spike checkpoints returns training to its trajectory)."""
    c = traj.config
    start = traj.stable[len(traj.stable) // 2]
    settings = dict(start=start, spike_lr=c.spike_lr, spike_steps=c.spike_steps, every=c.spike_checkpoint_every,
                    resume_steps=c.resume_steps, lr=c.lr, n=c.spike_n, seed=c.seed)
    return _cached(traj.results / "spike.json", {_key(settings): settings},
                   lambda **s: _spike(traj, progress=progress, **s), False)[_key(settings)]


def _spike(traj: Trajectory, start, spike_lr, spike_steps, every, resume_steps, lr, n, seed, progress) -> dict:
    folder = traj.results / f"spike-{start}-{spike_lr}-{seed}"
    rows = continue_training(traj, load_checkpoint(traj.checkpoints[start]), spike_steps, spike_lr, seed + 1,
                             folder, every, progress, "high LR")
    spike = detect_spike([r["loss"] for r in rows])
    if spike is None:
        return {"spike_rows": rows, "spike_step": None}
    before = list(range(every, spike, every))[-n:]  # weights after step s give the loss at index s: s < spike
    if not before:
        return {"spike_rows": rows, "spike_step": spike + 1, "pre_spike_steps": []}
    paths = [folder / f"step-{s:06d}" for s in before]
    starts = {"merged": merge_state_dicts(paths, "sma"), "last": load_checkpoint(paths[-1])}
    resumed = {k: continue_training(traj, sd, resume_steps, lr, seed + 2, progress=progress, desc=f"resume from {k}")
               for k, sd in starts.items()}
    return {"spike_rows": rows, "spike_step": spike + 1, "pre_spike_steps": before, **resumed,
            "start_loss": {k: traj.heldout_loss(traj.set_weights(sd)) for k, sd in starts.items()}}
