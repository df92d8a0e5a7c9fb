"""Versions of what the code computes: part of the identity of every stored run and warm start.

Bump TRAINING_VERSION in any change that alters the metrics a fixed RunConfig produces (rollout, objectives,
trainer, evaluation); bump WARM_START_VERSION in any change that alters a warm-started checkpoint (pretrain,
validation set, model construction); bump RESULTS_VERSION in any change that alters a result computed from
stored weights (rlbook.runs.ResultSet: merges, loss surfaces). A stored result made under another version is never replayed as current.
tests/test_versions.py holds golden values that fail when a bump is due.
"""
TRAINING_VERSION = 3  # 1: before versioning (run hashes covered the config alone); 2: until RL prompts, rollouts,
# evaluation and router noise drew from separate named streams (rlbook.seeds)
WARM_START_VERSION = 2  # 2: early stopping on a validation split disjoint from the evaluation set
RESULTS_VERSION = 1  # results computed from stored weights (chapter 5's merges, evaluations and loss surfaces)
