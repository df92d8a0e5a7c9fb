"""The toy batch each framework's own advantage and loss code is checked on, and rlbook's results on it.

tests/test_engine_*.py run it through each framework; the exports' headers quote rlbook's results beside a
framework's where the two compute different quantities by design.
One group of four completions of one prompt: rewards [1, 0, 0, 0], lengths [2, 6, 6, 6] response tokens. Each token's
log-probability under three policies: the behaviour policy that sampled it (`blogp`, `STALENESS` updates ago), the
policy at the start of the step (`prox_logp`, the proximal policy of decoupled PPO) and the current one (`logp`).
The drifts are chosen so that the PPO clip binds on both sides (A > 0 with r > 1 + eps, A < 0 with r < 1 - eps),
M2PO's second moment exceeds tau = 0.04 (Algorithm 1 masks tokens) and AReaL's drift between the behaviour and the
proximal policy exceeds it too.
"""
from __future__ import annotations

import torch

REWARDS = [1.0, 0.0, 0.0, 0.0]
LENGTHS = [2, 6, 6, 6]
STALENESS = 8  # updates between the behaviour policy and the step's start (what the drifts stand for)
# log p of each response token under the behaviour policy
BEHAVIOUR = [[-0.4, -1.2], [-0.9, -2.3, -0.2, -1.6, -0.7, -3.0], [-1.1, -0.5, -2.6, -0.3, -1.9, -0.8],
             [-0.6, -1.4, -0.9, -2.1, -0.25, -1.3]]
# log pi_prox - log pi_behaviour (staleness) and log pi - log pi_prox (this step's own updates), per token
STALE_DRIFT = [[0.10, 0.02], [-0.20, -0.05, 0.05, 0.0, 0.10, -0.02], [0.30, -0.20, 0.02, -0.01, 0.0, 0.05],
               [-0.01, 0.02, -0.15, 0.10, -0.90, 0.0]]
STEP_DRIFT = [[0.25, 0.01], [-0.30, -0.05, 0.05, 0.0, 0.10, -0.03], [0.20, -0.10, 0.03, -0.01, 0.0, 0.05],
              [-0.01, 0.01, -0.10, 0.05, -0.10, 0.01]]
TAU = 0.04


def padded(rows: list[list[float]]) -> torch.Tensor:
    """[B, T] float64, zeros after each row's last response token."""
    out = torch.zeros(len(rows), max(LENGTHS), dtype=torch.float64)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row, dtype=torch.float64)
    return out


def batch() -> dict[str, torch.Tensor]:
    """rewards [B], mask [B, T] (bool, response tokens), blogp, prox_logp, logp [B, T] (float64)."""
    mask = torch.arange(max(LENGTHS))[None, :] < torch.tensor(LENGTHS)[:, None]
    blogp = padded(BEHAVIOUR)
    prox_logp = blogp + padded(STALE_DRIFT)
    return {"rewards": torch.tensor(REWARDS, dtype=torch.float64), "mask": mask, "blogp": blogp,
            "prox_logp": prox_logp, "logp": prox_logp + padded(STEP_DRIFT)}


def rlbook_advantages() -> torch.Tensor:
    """rlbook's group advantages of the toy rewards ([B]): 1.5, -0.5, -0.5, -0.5."""
    from ..advantages import group_advantages

    return group_advantages(batch()["rewards"], len(REWARDS))


def rlbook_loss(objective: str, **params) -> tuple[float, dict]:
    """rlbook's loss of `objective` on the toy batch (the proximal policy passed where the objective takes it) and
    its flags (bool [B, T] per token; float scalars as they are)."""
    from ..objectives import needs_proximal, policy_loss

    toy = batch()
    advantages = rlbook_advantages()[:, None].expand_as(toy["blogp"])
    if needs_proximal(objective):
        params = {"prox_logp": toy["prox_logp"], **params}
    loss, flags = policy_loss(objective, toy["logp"], toy["blogp"], advantages, toy["mask"], **params)
    return float(loss), flags


# The frameworks' results on the toy batch where they compute a different quantity by design, as their own code gives
# them (tests/test_engine_trl.py and tests/test_engine_areal.py recompute each with the framework); the headers
# quote them.
TRL_RESULTS = {"advantage": 1.499700}
AREAL_RESULTS = {"m2po": 0.26127, "gspo": 0.30833}
