"""Chapter 3's fixed-rate sweep: one learning rate (the ladder's quarter rung), staleness walked up, the ladder's
stored s = 0 and s = 192 runs reused, the bfloat16 arm differing from its control in the rollout precision alone."""
from rlbook import experiments as ex


def test_the_fixed_rate_sweep_holds_the_ladders_quarter_rate_and_budget():
    ladder = [c for c in ex.sweep("drift_ladder", "cpu") if abs(c.lr - 1.25e-4) < 1e-12]
    runs = ex.sweep("fixed_rate", "cpu")
    assert {c.lr for c in runs} == {ladder[0].lr} and {c.total_updates for c in runs} == {ladder[0].total_updates}
    assert {c.staleness for c in ladder} == {0, 192} and {c.staleness for c in runs} == {4, 8, 16, 32}
    assert (runs[0].objective, runs[0].staleness, runs[0].seed) == ("grpo", 8, 0)  # the cheapest pilot first
    assert sum(c.staleness == 8 for c in runs) == 20  # 10 seeds at the predicted cell
    a, b = runs[0].to_dict(), next(c for c in ladder if c.staleness == 192 and c.objective == "grpo").to_dict()
    differ = {k for k in a if a[k] != b[k]}
    assert differ == {"staleness", "experiment", "name", "seed"} - ({"seed"} if a["seed"] == b["seed"] else set())


def test_the_bfloat16_arm_differs_from_its_control_only_in_rollout_precision():
    runs = ex.sweep("fixed_rate_bf16", "cpu")
    assert {c.engine for c in runs} == {"reference"}
    bf16 = [c for c in runs if c.rollout_dtype == "bfloat16"]
    for c in bf16:
        control = c.replace(rollout_dtype="float32", name=c.name.replace("-bf16", ""))
        assert control.hash() in {r.hash() for r in runs}
    assert len(bf16) * 2 == len(runs)


def test_the_axis_adds_the_ladders_runs_at_the_fixed_rate():
    axis = ex.sweep("fixed_rate_axis", "cpu")
    stored = {(c.objective, c.staleness) for c in axis if c.experiment == "02_drift_ladder"}
    assert stored == {("grpo", 0), ("grpo", 192), ("m2po", 192), ("no_clip", 192)}
    assert len(axis) == len(ex.sweep("fixed_rate", "cpu")) + 4 * 5 and len({c.lr for c in axis}) == 1
