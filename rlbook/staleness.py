"""Stale rollouts exactly as M2PO defines staleness (arXiv 2510.01161).

Staleness s counts model updates between the policy that sampled a batch and the policy being updated. One
training step samples one rollout batch and makes `updates_per_step` updates with it, so a FIFO of s / k batches
delays every batch by s updates: the step starting at update u trains on the batch sampled by the policy of update
u - s. The s / k batches that first fill the queue, and the first step's own batch, are sampled by the base model,
so the first s + k updates (k = updates_per_step) train on its rollouts.
"""
from __future__ import annotations

from collections import deque


def queue_depth(staleness: int, updates_per_batch: int) -> int:
    """Rollout batches in the FIFO: s / k (RunConfig checks that s >= 0 is a multiple of k)."""
    return staleness // updates_per_batch


class StaleQueue:
    """The FIFO of rollout batches between sampling and training, `depth` batches deep; `sample(step, update)` makes
    the batch of a step (rlbook.rollout.BatchSampler, or the semi-online generator around it)."""

    def __init__(self, staleness: int, updates_per_batch: int, total_steps: int):
        self.depth, self.total_steps, self.batches = queue_depth(staleness, updates_per_batch), total_steps, deque()

    def fill(self, sample) -> None:
        """At the start of a run: the batches of the first `depth` steps, sampled by the base model (steps -1, -2, ...,
        each its own prompts)."""
        while len(self.batches) < self.depth:
            self.batches.append(sample(-1 - len(self.batches), 0))

    def next_batch(self, step: int, update: int, sample):
        """The batch `step` trains on, after queueing the batch sampled at this step (unless the run would end before
        training it)."""
        if step + self.depth < self.total_steps:
            self.batches.append(sample(step, update))
        return self.batches.popleft()
