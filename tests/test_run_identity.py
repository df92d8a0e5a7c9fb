"""Results know the code that made them: a run stored by another version of the code is never replayed as current."""
import pytest

import rlbook.config
import rlbook.trainer
from rlbook.config import RunConfig
from rlbook.obtain import run_or_load
from rlbook.runs import RunStore, SupersededRunWarning
from rlbook.versions import TRAINING_VERSION

TINY = dict(experiment="t", preset="nano-tiny", init="scratch", prompts_per_step=4, group_size=4, total_updates=2,
            eval_every=2, eval_size=8, max_new_tokens=6)


def stored_by_older_code(store, config, monkeypatch):
    """A finished run of config as the previous TRAINING_VERSION would have stored it."""
    with monkeypatch.context() as m:
        m.setattr(rlbook.config, "TRAINING_VERSION", TRAINING_VERSION - 1)
        run = store.create(config)
    run.append({"update": 0, "eval_greedy_acc": 0.5})
    run.update_meta(complete=True, training_version=TRAINING_VERSION - 1)
    return run


@pytest.fixture
def fake_train(monkeypatch):
    trained = []

    def train(config, run, progress=True):
        trained.append(run.path)
        run.update_meta(complete=True, training_version=TRAINING_VERSION)

    monkeypatch.setattr(rlbook.trainer, "train", train)
    return trained


def test_the_code_version_is_part_of_the_identity(monkeypatch):
    config = RunConfig(**TINY)
    now = config.hash()
    monkeypatch.setattr(rlbook.config, "TRAINING_VERSION", TRAINING_VERSION + 1)
    assert config.hash() != now
    assert config.identity()["training_version"] == TRAINING_VERSION + 1


def test_warm_start_version_only_counts_for_warm_started_runs(monkeypatch):
    warm, scratch = RunConfig(**{**TINY, "init": "warm"}), RunConfig(**TINY)
    before = warm.hash(), scratch.hash()
    monkeypatch.setattr(rlbook.config, "WARM_START_VERSION", 99)
    assert warm.hash() != before[0] and scratch.hash() == before[1]


def test_a_superseded_run_is_named_and_trained_anew(tmp_path, monkeypatch, fake_train):
    store, config = RunStore(tmp_path), RunConfig(**TINY)
    old = stored_by_older_code(store, config, monkeypatch)
    assert not old.current and old.training_version == TRAINING_VERSION - 1
    assert store.find(config) is None and store.superseded(config) == [old]
    with pytest.warns(SupersededRunWarning, match=f"made by training version {TRAINING_VERSION - 1}.*anew"):
        run = run_or_load(config, store, progress=False, references=False)
    assert run.path != old.path and fake_train == [run.path] and run.current
    assert store.runs(current_only=True) == [run] and len(store.runs()) == 2


def test_a_superseded_run_is_replayed_only_when_asked(tmp_path, monkeypatch, fake_train):
    store, config = RunStore(tmp_path), RunConfig(**TINY)
    old = stored_by_older_code(store, config, monkeypatch)
    with pytest.warns(SupersededRunWarning, match="replaying it as asked"):
        run = run_or_load(config, store, progress=False, references=False, keep_superseded=True)
    assert run.path == old.path and fake_train == []


def test_a_run_with_other_settings_is_not_superseded(tmp_path, monkeypatch):
    store, config = RunStore(tmp_path), RunConfig(**TINY)
    stored_by_older_code(store, config.replace(seed=1), monkeypatch)
    assert store.superseded(config) == []


def test_as_shown_prefers_this_codes_run_and_falls_back_to_an_older_one(tmp_path, monkeypatch):
    store, config = RunStore(tmp_path), RunConfig(**TINY)
    old_seed0 = stored_by_older_code(store, config, monkeypatch)
    old_seed1 = stored_by_older_code(store, config.replace(seed=1), monkeypatch)
    assert {r.path for r in store.as_shown("t")} == {old_seed0.path, old_seed1.path}
    new_seed0 = store.create(config)
    assert {r.path for r in store.as_shown("t")} == {old_seed0.path, old_seed1.path}  # unfinished: not shown
    new_seed0.update_meta(complete=True, training_version=TRAINING_VERSION)
    assert {r.path for r in store.as_shown("t")} == {new_seed0.path, old_seed1.path}


@pytest.mark.parametrize("profile", ["smoke", "cpu"])
def test_the_tau_sweep_reuses_the_staleness_sweeps_m2po_runs_at_the_default_tau(profile):
    from rlbook.experiments import DECISIVE_SEEDS, DEFAULT_TAU, STALENESS, TAUS, stale_run, staleness_sweep, tau_sweep

    largest = max(STALENESS[profile])
    stale = {stale_run(profile, "m2po", largest, seed).hash(): seed for seed in DECISIVE_SEEDS[profile]}
    assert {c.hash() for c in staleness_sweep(profile) if c.objective == "m2po" and c.staleness == largest} <= set(stale)
    taus = tau_sweep(profile)
    shared = [c for c in taus if c.hash() in stale]
    assert sorted(c.seed for c in shared) == DECISIVE_SEEDS[profile]
    assert all("tau" not in c.objective_params for c in shared)
    others = {c.objective_params["tau"] for c in taus if c.hash() not in stale}
    assert others == set(TAUS) - {DEFAULT_TAU} and len(taus) == len(TAUS) * len(DECISIVE_SEEDS[profile])


@pytest.mark.parametrize("profile", ["smoke", "cpu"])
@pytest.mark.parametrize("name", ["fast_drift", "slow_drift"])
def test_the_drift_sweeps_differ_from_the_staleness_sweep_only_in_learning_rate_and_staleness(name, profile):
    from rlbook import experiments as ex

    lr_factor, staleness, on_policy = {
        "fast_drift": (ex.FAST_DRIFT_LR_FACTOR, max(ex.STALENESS[profile]), ex.FAST_DRIFT_ON_POLICY),
        "slow_drift": (ex.SLOW_DRIFT_LR_FACTOR, ex.SLOW_DRIFT_STALENESS_FACTOR * max(ex.STALENESS[profile]),
                       ex.SLOW_DRIFT_ON_POLICY),
    }[name]
    runs = ex.sweep(name, profile)
    assert len(runs) == (len(on_policy) + len(ex.COMPARED_AT_LARGEST)) * len(ex.DECISIVE_SEEDS[profile])
    assert len({c.hash() for c in runs}) == len(runs) and {c.experiment for c in runs} == {f"02_{name}"}
    for config in runs:
        reference = ex.stale_run(profile, config.objective, config.staleness, config.seed)
        assert config.lr == pytest.approx(lr_factor * reference.lr)
        assert config.hash() == reference.replace(lr=config.lr).hash()  # nothing else differs
    assert {(c.objective, c.staleness) for c in runs} == ({(o, 0) for o in on_policy}
                                                          | {(o, staleness) for o in ex.COMPARED_AT_LARGEST})


def test_the_staleness_sweep_gives_the_compared_cells_every_decisive_seed():
    from collections import Counter

    from rlbook.experiments import DECISIVE_SEEDS, SEEDS, staleness_sweep

    seeds = Counter((c.objective, c.staleness) for c in staleness_sweep("cpu"))
    compared = {("grpo", 0), ("grpo", 48), ("no_clip", 48), ("m2po", 48)}
    assert {cell for cell, n in seeds.items() if n == len(DECISIVE_SEEDS["cpu"])} == compared
    assert all(n == len(SEEDS["cpu"]) for cell, n in seeds.items() if cell not in compared)


@pytest.mark.parametrize("profile", ["smoke", "cpu"])
def test_the_drift_ladder_keeps_lr_times_staleness_and_reuses_the_existing_sets(profile):
    from rlbook import experiments as ex

    runs = ex.sweep("drift_ladder", profile)
    rungs = ex.LADDER[profile]
    base = ex.stale_run(profile)
    assert len(runs) == len(rungs) * (1 + len(ex.COMPARED_AT_LARGEST)) * len(ex.DECISIVE_SEEDS[profile])
    assert len({c.hash() for c in runs}) == len(runs)
    lag_times_rate = {c.lr * c.staleness for c in runs if c.staleness}
    assert max(lag_times_rate) == pytest.approx(min(lag_times_rate))  # the same lr x lag on every rung
    for config in runs:
        factor = config.lr / base.lr
        assert factor == pytest.approx(min(rungs, key=lambda f: abs(f - factor)))
        assert config.total_updates == base.total_updates * rungs[min(rungs, key=lambda f: abs(f - factor))]
        assert config.hash() == ex.stale_run(profile, config.objective, config.staleness, config.seed, lr=config.lr,
                                             total_updates=config.total_updates).hash()  # nothing else differs
    reused = {c.hash() for c in ex.sweep("staleness", profile) + ex.sweep("slow_drift", profile)}
    shared = [c for c in runs if c.hash() in reused]
    assert {c.experiment for c in shared} == {"02_staleness", "02_slow_drift"} & {c.experiment for c in runs}
    assert len(shared) == sum(c.experiment != "02_drift_ladder" for c in runs)  # trained once, stored once


@pytest.mark.parametrize("profile", ["smoke", "cpu"])
def test_the_long_collapse_set_is_the_slow_rungs_no_trust_region_cell_longer_and_unclipped(profile):
    from rlbook import experiments as ex

    runs = ex.sweep("collapse_long", profile)
    slow = {c.seed: c for c in ex.sweep("slow_drift", profile) if c.objective == "no_clip" and c.staleness}
    assert len(runs) == len(ex.COLLAPSE_LONG_CELLS) * len(ex.DECISIVE_SEEDS[profile]) == len({c.hash() for c in runs})
    for config in runs:
        cell = slow[config.seed]
        like = cell.replace(total_updates=ex.COLLAPSE_LONG_UPDATES_FACTOR * cell.total_updates, finetune=config.finetune,
                            max_grad_norm=ex.UNCLIPPED_GRAD_NORM, lr=ex.COLLAPSE_LONG_CELLS[config.finetune] * cell.lr)
        assert config.hash() == like.hash()  # nothing else differs
    assert {c.finetune for c in runs} == {"lora", "full"} and {c.experiment for c in runs} == {"02_collapse_long"}


def test_the_m2po_variants_and_arithmetic_lopti_sweeps():
    from rlbook import experiments as ex

    variants = ex.sweep("m2po_variants", "cpu")
    slow = {(c.objective, c.staleness): c for c in ex.sweep("slow_drift", "cpu") if c.seed == 0}
    assert {c.objective for c in variants} == set(ex.M2PO_VARIANTS)
    for config in variants:
        if config.seed == 0:  # beside the slow-drift set's m2po: only the objective differs
            assert config.replace(objective="m2po").hash() == slow[("m2po", config.staleness)].hash()
    arithmetic = ex.sweep("lopti_arithmetic", "cpu")
    assert {c.task for c in arithmetic} == {"arithmetic"} and len(arithmetic) == 25
    assert {c.ar_alpha for c in arithmetic} == {0.0, ex.ARITHMETIC_AR_ALPHA}
    for config in arithmetic:  # the profile's base update and budget, where GRPO learns
        assert {k: getattr(config, k) for k in ex.BASE["cpu"]} == ex.BASE["cpu"]


def test_stored_reference_runs_keep_the_identity_of_the_version_that_made_them():
    """Every run shipped in data/runs is of training version 3 or later, loads, and its directory name ends in the
    hash its config.json has under the TRAINING_VERSION its meta.json records; the same hash recomputed from the raw
    JSON by the identity rule (the fields that differ from their defaults, the engine, the versions)."""
    import hashlib
    import json
    from dataclasses import asdict

    from rlbook.runs import reference_root
    from rlbook.versions import WARM_START_VERSION

    runs = RunStore(reference_root()).runs()
    assert len(runs) > 100 and {run.training_version for run in runs} <= set(range(3, TRAINING_VERSION + 1))
    default = asdict(RunConfig())
    for run in runs:
        assert run.path.name.endswith(f"-{run.config.hash(run.training_version)}"), run.path
        values = json.loads((run.path / "config.json").read_text())
        identity = {k: v for k, v in values.items() if k not in ("name", "experiment") and v != default[k]}
        identity.update(engine=run.config.resolved_engine.name, training_version=run.training_version,
                        **({"warm_start_version": WARM_START_VERSION} if values["init"] == "warm" else {}))
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
        assert run.path.name.endswith(f"-{digest}"), run.path


@pytest.mark.parametrize("profile", ["smoke", "cpu"])
def test_every_sweep_computes_its_cells_with_one_engine(profile):
    """A verdict compares cells of one sweep: a difference between them must not be partly the engine's."""
    from rlbook import experiments as ex

    for name in ex.SWEEPS:
        engines = {c.resolved_engine.name for c in ex.sweep(name, profile)}
        defined = profile in ex.SWEEP_PROFILES.get(name, (profile,))  # a sweep calibrated for other profiles is empty
        assert len(engines) == (1 if defined else 0), (name, engines)


def test_the_device_is_in_the_identity_only_when_it_is_a_gpu():
    from rlbook.pretrain import WarmStartConfig

    cpu, gpu = RunConfig(**TINY), RunConfig(**TINY, device="cuda")
    assert "device" not in cpu.identity() and cpu.hash() == RunConfig(**TINY, device="cpu").hash()
    assert gpu.identity()["device"] == "cuda" and gpu.hash() != cpu.hash()
    assert {k: v for k, v in gpu.identity().items() if k != "device"} == cpu.identity()
    assert WarmStartConfig().key() == "nano-small-arithmetic-5d06e9a4dc"  # as shipped in data/runs/warmstart
    assert WarmStartConfig(device="cuda").key() != WarmStartConfig().key()
    with pytest.raises(ValueError, match="device='mps' is not valid; choose one of: cpu, cuda"):
        RunConfig(**TINY, device="mps")


def test_every_stored_reference_run_is_made_on_a_cpu_and_found_by_its_config():
    from rlbook.runs import lookup, reference_root

    runs = [run for run in RunStore(reference_root()).runs() if run.complete and run.current]
    assert len(runs) > 100 and {run.config.device for run in runs} == {"cpu"}
    assert all(run.meta["device"].startswith("cpu") for run in runs)
    assert [found.path for found in lookup([run.config for run in runs])] == [run.path for run in runs]


def made_on_a_gpu(store, config, version=TRAINING_VERSION):
    run = store.create(config.replace(device="cuda"))
    run.append({"update": 0, "eval_greedy_acc": 0.9})
    run.update_meta(complete=True, updates=0, training_version=version, device="NVIDIA H100 80GB HBM3")
    return run


def test_a_gpu_made_run_is_never_shown_as_a_reference_run(tmp_path, monkeypatch):
    """The reference profile's configs say the CPU: a GPU-made run with their settings, stored among the reference
    runs, is not found for them (nor as an older code's run of the same settings), and is labelled as made on a GPU."""
    import rlbook.obtain
    from rlbook.obtain import obtain
    from rlbook.runs import lookup
    from rlbook.runset import provenance

    store, config = RunStore(tmp_path), RunConfig(**TINY)
    gpu_run = made_on_a_gpu(store, config)
    with monkeypatch.context() as m:
        m.setattr(rlbook.config, "TRAINING_VERSION", TRAINING_VERSION - 1)
        older_gpu_run = made_on_a_gpu(store, config.replace(seed=1), TRAINING_VERSION - 1)
    cpu_run = store.create(config.replace(seed=2))
    cpu_run.append({"update": 0, "eval_greedy_acc": 0.5})
    cpu_run.update_meta(complete=True, updates=0, training_version=TRAINING_VERSION, device="cpu (x86)")
    configs = [config, config.replace(seed=1), config.replace(seed=2)]
    assert lookup(configs, tmp_path) == [None, None, cpu_run]
    monkeypatch.setattr(rlbook.obtain, "reference_root", lambda: tmp_path)
    monkeypatch.setattr("rlbook.runs.reference_root", lambda: tmp_path)
    shown = obtain(configs, trains=False)
    assert list(shown) == [cpu_run] and shown.label().endswith("on a CPU; 2 settings with no stored run (shown as "
                                                               "missing)")
    assert provenance([gpu_run]).endswith("made by this code (training version "
                                          f"{TRAINING_VERSION}), on a GPU (NVIDIA H100 80GB HBM3)")
    assert "1 of 2 on a GPU (NVIDIA H100 80GB HBM3), the rest on a CPU" in provenance([gpu_run, cpu_run])
    assert older_gpu_run.config.device == "cuda"


def test_a_gpu_run_needs_a_gpu_and_trains_its_warm_start_there(monkeypatch):
    import rlbook.obtain
    from rlbook.obtain import check_runnable

    monkeypatch.setattr(rlbook.obtain.torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="device='cuda' needs a CUDA GPU and none is available"):
        check_runnable(RunConfig(**TINY, device="cuda"))
    warm = RunConfig(**{**TINY, "init": "warm"}, device="cuda")
    started = []
    monkeypatch.setattr(rlbook.trainer, "warm_start", lambda start, store, progress: started.append(start))
    rlbook.trainer.warm_start_of(warm)
    assert started[0].device == "cuda"
