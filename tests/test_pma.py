"""Chapter 5 (rlbook.chapters.pma, pma_training) on a 12-step trajectory of nano-tiny: checkpoints, cached merges,
spikes."""
import json
import math

import pytest

from rlbook.chapters import pma, pma_figures, pma_surface, pma_training
from rlbook.chapters.pma_figures import merge_figure
from rlbook.merging import load_checkpoint, merge_state_dicts
from rlbook.runs import RunStore, write_json

TINY = dict(preset="nano-tiny", max_steps=12, warmup_steps=2, decay_steps=4, checkpoint_every=2, batch_size=8,
            eval_size=8, heldout_size=16, ns=(2, 3), focus_n=2, grid=3, continue_steps=3, continue_warmup=1,
            spike_steps=8, spike_checkpoint_every=2, spike_lr=5.0, resume_steps=2, spike_n=2)


@pytest.fixture(scope="module")
def traj(tmp_path_factory):
    return pma.Trajectory(pma.PMAConfig(**TINY), RunStore(tmp_path_factory.mktemp("runs")), progress=False)


def test_checkpoints_at_expected_steps(traj):
    assert sorted(traj.checkpoints) == [2, 4, 6, 8, 10, 12]
    assert traj.stable == [2, 4, 6, 8]  # the last 4 steps decay the LR: not merged
    assert (traj.final / "model.safetensors").exists() and (traj.annealed_equal / "model.safetensors").exists()
    assert traj.tokens_per_checkpoint() > 0


def test_merges_are_cached_and_not_recomputed(traj, monkeypatch):
    first = pma.merge_grid(traj, progress=False)
    assert set(first) == {pma.merge_name(m, n, 8, 0.2) for m in ("sma", "ema", "wma") for n in (2, 3)}
    stored = json.loads((traj.results.path / "merges.json").read_text())
    assert "environment" in stored and stored["sma-N3-end8"]["loss"] == first["sma-N3-end8"]["loss"]

    def fail(*args, **kwargs):
        raise AssertionError("a cached merge was evaluated again")

    monkeypatch.setattr(traj, "evaluate", fail)
    assert pma.merge_grid(traj, progress=False) == first


@pytest.mark.parametrize("method", ["sma", "ema", "wma"])
def test_merge_of_identical_checkpoints_evaluates_like_the_checkpoint(traj, method):
    path = traj.checkpoints[4]
    alone = traj.evaluate(load_checkpoint(path))
    merged = traj.evaluate(merge_state_dicts([path] * 3, method))
    assert merged["loss"] == pytest.approx(alone["loss"], rel=1e-5)
    assert merged["acc"] == alone["acc"]


def test_merged_needs_enough_stable_checkpoints(traj):
    with pytest.raises(ValueError, match="stable checkpoints"):
        traj.merged("sma", 3, 4)  # only steps 2 and 4 end at 4
    with pytest.raises(ValueError, match="stable checkpoints"):
        traj.merged("sma", 2, 10)  # step 10 is in the decay phase


def test_detect_spike():
    calm = [2.0 * 0.99**i for i in range(50)]
    assert pma_training.detect_spike(calm) is None
    spiky = calm[:30] + [5.0] + calm[31:]
    assert pma_training.detect_spike(spiky) == 30
    assert pma_training.spike_indices(spiky) == [30]
    assert pma_training.detect_spike(calm[:5] + [math.nan]) == 5


def test_schedule_warmup_then_ramp():
    assert pma_training.schedule(0, 10, 1e-3, warmup=2) == pytest.approx(5e-4)
    assert pma_training.schedule(5, 10, 1e-3, warmup=2) == pytest.approx(1e-3)
    assert pma_training.schedule(9, 10, 1e-3, warmup=2, ramp_to=1e-1) == pytest.approx(1e-1)


def test_equal_token_twin_shares_the_trajectory_until_its_decay(traj):
    twin = json.loads((traj.annealed_equal.parent / "config.json").read_text())
    assert twin["max_steps"] == traj.stable[-1] and twin["decay_steps"] == traj.config.decay_steps
    # same seed and data: the twin's first steps (before either decays) are the trajectory's, to the last bit
    rows = pma.read_rows(traj.annealed_equal.parent / "metrics.jsonl")
    assert [r["loss"] for r in rows[:4]] == [r["loss"] for r in traj.rows[:4]]


def test_pma_init_and_spike_recovery_are_cached(traj, monkeypatch):
    init = pma_training.pma_init(traj, progress=False)
    assert [len(init[k]) for k in ("merged", "last")] == [3, 3]
    assert {"loss", "grad_norm", "lr"} <= set(init["merged"][0]) and "heldout_loss" in init["merged"][-1]
    spike = pma_training.spike_recovery(traj, progress=False)
    assert spike["spike_step"] is not None and len(spike["spike_rows"]) == 8
    assert all(s < spike["spike_step"] for s in spike["pre_spike_steps"])
    monkeypatch.setattr(pma_training, "continue_training", lambda *a, **k: pytest.fail("recomputed"))
    assert pma_training.pma_init(traj, progress=False) == init and pma_training.spike_recovery(traj, progress=False) == spike


def test_config_rejects_unknown_settings():
    with pytest.raises(ValueError, match="unknown setting"):
        pma.chapter_config("smoke", nonsense=1)
    with pytest.raises(ValueError, match="methods"):
        pma.PMAConfig(methods=("sma", "median"))


def test_summary_and_merge_figure(traj):
    import matplotlib

    matplotlib.use("Agg")
    checkpoints = pma.evaluate_checkpoints(traj, progress=False)
    assert {"annealed", "annealed_equal", "2", "12"} <= set(checkpoints)
    grid, curve = pma.merge_grid(traj, progress=False), pma.merge_curve(traj, progress=False)
    inits = [pma_training.pma_init(traj, r, progress=False) for r in range(2)]
    spikes = [pma_training.spike_recovery(traj, r, progress=False) for r in range(2)]
    summary = pma_training.summarize(traj, checkpoints, grid, curve, inits, spikes)
    assert summary["merges"] == 6 and summary["curve_points"] == 3 and summary["repeats"] == 2
    assert 0 <= summary["merges_beating_last"] <= 6 and 0 <= summary["init_merge_wins"] <= 2
    fig = merge_figure(traj, checkpoints, "ema", 3, 0.5, 8)
    assert len(fig.axes) == 2 and "ema-N3-end8-a0.5" in json.loads((traj.results.path / "merges.json").read_text())
    figures = [pma_figures.trajectory_figure(traj, checkpoints), pma_figures.merge_grid_figure(traj, checkpoints, grid),
               pma_figures.merge_curve_figure(traj, checkpoints, curve), pma_figures.pma_init_figure(traj, inits),
               pma_figures.spike_figure(traj, checkpoints, spikes),
               pma_figures.loss_surface_figure(pma_surface.loss_surface(traj, progress=False))]
    assert [len(f.axes) for f in figures] == [3, 2, 2, 2, 3, 2]  # (spike: a twin axis; surface: a colour bar)
    assert all(f.legends for f in figures[:4])  # one legend under the panels
    explorer = pma_figures.merge_explorer(traj, checkpoints, grid)
    assert set(explorer.views) == {f"{m}|{n}" for m in ("sma", "ema", "wma") for n in (2, 3)}  # the stored grid
    assert len({json.dumps(v) for v in explorer.views.values()}) == 6 and "NaN" not in explorer._repr_html_()
    losses = [r["loss"] for r in [*checkpoints.values(), *grid.values()] if "loss" in r]
    ticks = next(iter(explorer.views.values()))["layout"]["yaxis2"]  # written in full, spanning every loss
    assert ticks["ticktext"] == [f"{t:g}" for t in ticks["tickvals"]] and len(ticks["tickvals"]) >= 3
    assert ticks["tickvals"][0] <= min(losses) * 1.05 and ticks["tickvals"][-1] >= max(losses) * 0.95
    new = explorer.view(method="ema", n=2, alpha=0.3, end=6)  # a widget's new choice: merged, evaluated, stored
    assert "ema-N2-end6-a0.3" in json.loads((traj.results.path / "merges.json").read_text())
    assert new["data"][-1]["y"] == [pma.run_merges(traj, [("ema", 2, 6)], 0.3, progress=False)["ema-N2-end6-a0.3"]
                                    ["loss"]]
    assert explorer.view(method="sma", n=3, alpha=0.2, end=4) is None  # fewer than 3 stable checkpoints end at 4


def test_reference_is_stored_without_weights_and_read_back(traj, tmp_path):
    import matplotlib

    from rlbook.chapters import merging_verdicts

    matplotlib.use("Agg")
    results = pma.reference_results(traj, progress=False)
    folder = pma.store_reference(traj, tmp_path)
    assert folder.parent == tmp_path / "05_merging" and folder.name.startswith("seed0-")
    assert "result.json" in {p.name for p in folder.iterdir()}
    assert all(p.suffix == ".json" and p.is_file() for p in folder.rglob("*"))  # never weights
    (ref,) = pma.load_references(tmp_path)
    assert ref.current and ref.config == traj.config and ref.end == traj.stable[-1] == 8
    assert ref.checkpoints == results["checkpoints"]
    assert all(ref.merges[k] == v for k, v in results["merges"].items())
    assert ref.meta["trajectory"]["complete"] and "environment" not in ref.merges
    rows = merging_verdicts.merging_signatures([ref])
    assert [r.verdict for r in rows] == ["within noise"] * 4  # one seed decides nothing
    assert len(pma_figures.reference_figure([ref]).axes) == 3


def test_superseded_and_incomplete_references(traj, tmp_path, monkeypatch):
    pma.reference_results(traj, progress=False)
    folder = pma.store_reference(traj, tmp_path)
    monkeypatch.setattr(pma, "RESULTS_VERSION", pma.RESULTS_VERSION + 1)  # results computed by other code
    assert pma.load_references(tmp_path) == [] and not pma.load_references(tmp_path, current_only=False)[0].current
    monkeypatch.undo()
    stored = json.loads((folder / "result.json").read_text())
    write_json(folder / "result.json", {**stored, "results": "made-by-older-code"})
    assert pma.load_references(tmp_path) == [] and len(pma.load_references(tmp_path, current_only=False)) == 1
    (folder / "merges.json").unlink()
    with pytest.raises(pma.CorruptRunError, match="lacks \\['merges.json'\\]"):
        pma.load_references(tmp_path)
    with pytest.raises(ValueError, match="run pma.reference_results"):
        pma.store_reference(pma.Trajectory(pma.PMAConfig(**{**TINY, "heldout_size": 8}), traj.store, progress=False),
                            tmp_path)
