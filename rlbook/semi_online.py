"""Semi-online RL: a frozen copy of the policy generates, synced with it every `sync_every` updates.

From "Bridging Offline and Online Reinforcement Learning for LLMs" (arXiv 2506.21495).

sync_every = 1 is online RL (the current policy samples every batch); sync_every = k > 1 keeps the generator's
weights for k updates, so the batches are fresh but the lag between the sampling and the trained policy cycles
0..k-1; sync_every = 0 never syncs (offline, from the starting model). Only the trainable weights are copied (the
LoRA adapters, or every weight when fine-tuning fully); the copy is part of a run's checkpoint. The paper pairs this
with online DPO (rlbook.dpo); here any objective can use it.
"""
from __future__ import annotations


def trainable_weights(model) -> dict:
    return {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}


class SemiOnlineGenerator:
    """Samples a step's batch (`sample(step, version)`, rlbook.rollout.BatchSampler) with the generator's weights:
    the model's own, or the snapshot {"version": update it was taken at, "weights": ...} swapped in and out."""

    def __init__(self, model, sample, sync_every: int, snapshot: dict | None = None):
        self.model, self.sample, self.sync_every, self.snapshot = model, sample, sync_every, snapshot

    def __call__(self, step: int, update: int):
        if self.sync_every == 1:
            return self.sample(step, update)
        if self.snapshot is None or (self.sync_every and update - self.snapshot["version"] >= self.sync_every):
            self.snapshot = {"version": update, "weights": trainable_weights(self.model)}
        if self.snapshot["version"] == update:
            return self.sample(step, update)
        current = trainable_weights(self.model)
        self.model.load_state_dict(self.snapshot["weights"], strict=False)
        try:
            return self.sample(step, self.snapshot["version"])
        finally:
            self.model.load_state_dict(current, strict=False)
