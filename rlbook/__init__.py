"""rlbook: reinforcement learning for LLMs, reproduced at a scale one GPU (or a laptop) can run."""

__version__ = "0.1.0"
