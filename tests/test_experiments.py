"""Sweeps defined before they are trained: each builds with the settings its pilots chose."""
from rlbook import experiments as ex
from rlbook.pretrain import WarmStartConfig


def test_lopti_kk_is_chapter_4_on_two_person_puzzles_with_the_pilots_budget():
    runs = ex.sweep("lopti_kk", "cpu")
    assert len(runs) == len(ex.LOPTI_VARIANTS) * len(ex.DECISIVE_SEEDS["cpu"]) == len({c.hash() for c in runs})
    assert {c.experiment for c in runs} == {"04_lopti_kk"} and {c.resolved_engine.name for c in runs} == {"fast"}
    chapter = {c.hash() for c in ex.sweep("lopti", "cpu")}
    for variant in ex.LOPTI_VARIANTS:
        kk, same = ex.lopti_kk_run("cpu", variant, 3), ex.lopti_run("cpu", variant, 3)
        differ = {k for k, v in kk.to_dict().items() if v != getattr(same, k)}
        assert differ == {"task_params", "total_updates", "lr", "warm_start", "experiment", "name"}, variant
        assert (kk.task_params, kk.total_updates, kk.lr) == ({"num_people": 2, "scratchpad": True}, 500, 5e-4)
        assert kk.warm_start == {**same.warm_start, "seed": 3}  # the chapter's rule; the seed the pilots chose
        assert kk.hash() not in chapter  # the chapter's stored runs keep their identity
    warm = WarmStartConfig(preset=kk.preset, task=kk.task, task_params=kk.task_params, **kk.warm_start)
    assert warm.key() == "nano-small-knights_knaves-31fe078180"  # chosen on the validation split (kk-2people-select)
    assert ex.sweep("lopti_kk", "smoke") == []  # the set exists where pilots chose its budget
    assert ex.lopti_kk_run("smoke").task_params["num_people"] == 2
