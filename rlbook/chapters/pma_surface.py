"""Chapter 5's loss landscape: held-out loss on the plane of the last stable checkpoints.

Chapter 5, the loss landscape around a merge: held-out loss on the plane of the two principal directions of the
last stable checkpoints, centred on their mean (the SMA merge), as PMA (arXiv 2505.12082) draws it."""
from __future__ import annotations

import torch

from ..merging import load_checkpoint
from ..progress import progress_bar
from .pma import Trajectory


def _flat(state_dict) -> torch.Tensor:
    return torch.cat([v.reshape(-1).float() for _, v in sorted(state_dict.items())])


def _unflat(vector: torch.Tensor, like) -> dict:
    sizes = [v.numel() for _, v in sorted(like.items())]
    return {k: part.reshape(v.shape) for (k, v), part in zip(sorted(like.items()), vector.split(sizes))}


def loss_surface(traj: Trajectory, span: float = 1.4, progress: bool = True) -> dict:
    """Held-out loss on the PCA plane of the last focus_n stable checkpoints, centred on their mean (the SMA merge),
    with the checkpoints and the annealed models projected onto it."""
    settings = dict(n=traj.config.focus_n, span=span, grid=traj.config.grid, end=traj.stable[-1])
    return traj.results.cached_one("surface.json", settings, lambda **s: _surface(traj, progress=progress, **s))


def _surface(traj: Trajectory, n: int, span: float, grid: int, end: int, progress: bool) -> dict:
    steps = [s for s in traj.stable if s <= end][-n:]
    like = load_checkpoint(traj.checkpoints[steps[0]])
    points = torch.stack([_flat(load_checkpoint(traj.checkpoints[s])) for s in steps])
    center = points.mean(0)  # = the SMA merge of these checkpoints
    basis = torch.linalg.svd(points - center, full_matrices=False)[2][:2]  # the two principal directions
    coords = (points - center) @ basis.T
    axis = torch.linspace(-1, 1, grid) * span * coords.abs().max().item()
    losses = [[traj.heldout_loss(_unflat(center + a * basis[0] + b * basis[1], like)) for a in axis]
              for b in progress_bar(axis, progress, desc="loss surface")]
    others = {k: _flat(load_checkpoint(p)) - center for k, p in (("annealed", traj.final),
                                                                 ("annealed_equal", traj.annealed_equal))}
    return {"axis": axis.tolist(), "loss": losses, "steps": steps, "checkpoints": coords.tolist(),
            "checkpoint_loss": [traj.heldout_loss(load_checkpoint(traj.checkpoints[s])) for s in steps],
            "explained": coords.pow(2).sum().item() / (points - center).pow(2).sum().item(),
            **{k: (v @ basis.T).tolist() for k, v in others.items()},
            **{f"{k}_off_plane": (v - v @ basis.T @ basis).norm().item() for k, v in others.items()}}
