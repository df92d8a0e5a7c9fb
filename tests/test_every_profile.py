"""Every profile builds every chapter: each sweep's configs and their plan in smoke, cpu, standard and paper, and each
notebook's parameter and setup cells in every profile, without training anything.

On f6e21c1 six sweeps of the paper profile did not build (collapse_long, lopti, lopti_arithmetic, lopti_half_rate,
semi_online, router_replay) and chapter 6 did not build in the standard profile.
"""
import contextlib
import dataclasses
import io
import json
import math
from pathlib import Path

import pytest
import torch

import rlbook.trainer
from rlbook import experiments
from rlbook.models import OLMOE_1B_7B, PRESETS
from rlbook.obtain import plan
from rlbook.profiles import PROFILES
from rlbook.runs import RunStore

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
GPU_PROFILES = ("standard", "paper")


@pytest.mark.parametrize("profile", PROFILES)
def test_every_sweep_builds_and_plans(profile, tmp_path):
    for name in experiments.SWEEPS:
        configs = experiments.sweep(name, profile)
        if profile not in experiments.SWEEP_PROFILES.get(name, PROFILES):  # a sweep calibrated for other profiles
            assert configs == [], name
            continue
        assert configs and {c.device for c in configs} == {"cuda" if profile in GPU_PROFILES else "cpu"}, name
        text = plan(configs, RunStore(tmp_path))
        assert text.startswith(f"{len(configs)} runs of "), (name, text)
        assert ("GPU-hours on one H100" in text) == (profile in GPU_PROFILES), (name, text)


def setup_cells(notebook: Path) -> list[str]:
    """The parameter cell and the setup cell after it: the first two code cells."""
    cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    assert "parameters" in cells[0]["metadata"].get("tags", []), notebook.name
    return ["".join(cell["source"]) for cell in cells[:2]]


@pytest.mark.parametrize("profile", ["reference", "auto", *PROFILES])
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_every_notebook_sets_up_in_every_profile(notebook, profile, tmp_path, monkeypatch):
    """The parameter cell with PROFILE set, then the setup cell, run as the kernel would; nothing trains (the
    trainer would fail the test) and an uncalibrated profile says so."""
    monkeypatch.setenv("RLBOOK_RUNS", str(tmp_path))
    monkeypatch.setattr(rlbook.trainer, "train", lambda *a, **k: pytest.fail("a setup cell trained"))
    parameters, setup = setup_cells(notebook)
    namespace, printed = {"__name__": "__main__"}, io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(parameters, f"{notebook.name}[parameters]", "exec"), namespace)
        namespace["PROFILE"] = profile
        exec(compile(setup, f"{notebook.name}[setup]", "exec"), namespace)
    assert ("UNCALIBRATED" in printed.getvalue()) == (profile in GPU_PROFILES), printed.getvalue()


def test_the_gpu_profiles_train_on_a_gpu_and_auto_on_the_cpu():
    for profile, device in (("auto", "cpu"), ("smoke", "cpu"), ("cpu", "cpu"), ("standard", "cuda"),
                            ("paper", "cuda")):
        assert experiments.grpo_from_scratch(profile).device == device
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "| `standard` | UNCALIBRATED" in readme  # until a pilot has chosen its settings


@pytest.fixture
def shallow_olmoe(monkeypatch):
    """olmoe-1b-7b-random with one of its 16 layers and experts 64 wide instead of 1024 (its width, 64 experts,
    top-8, attention and vocabulary: seconds to build instead of a minute), and advantages -1 .. 1 in every group (a
    random model's rewards are all equal)."""
    monkeypatch.setitem(PRESETS, "olmoe-1b-7b-random", dataclasses.replace(
        PRESETS["olmoe-1b-7b-random"], config={**OLMOE_1B_7B, "num_hidden_layers": 1, "intermediate_size": 64}))
    monkeypatch.setattr(rlbook.trainer, "group_advantages", lambda rewards, group_size, normalize_std: torch.linspace(
        -1, 1, group_size).repeat(len(rewards) // group_size))


@pytest.mark.usefixtures("one_thread", "shallow_olmoe")
def test_chapter_6_gpu_config_trains_on_olmoes_shape(tmp_path):
    """The paper profile's R3 run (LoRA on the attention, routers in full, chunked loss path, micro-batches,
    bfloat16 rollouts) for two updates on OLMoE-1B-7B's shape with random weights, on the CPU."""
    config = experiments.router_run("paper", "grpo+r3", preset="olmoe-1b-7b-random", init="scratch", device="cpu",
                                    prompts_per_step=2, group_size=4, updates_per_step=2, micro_batch_size=2,
                                    rollout_batch_size=4, total_updates=2, max_new_tokens=3, eval_every=2,
                                    eval_size=2, eval_samples=1, router_noise=0.5)
    assert config.finetune == "lora" and config.fused_ratio == "chunked" and config.router_replay
    run = rlbook.obtain.run_or_load(config, RunStore(tmp_path), progress=False, references=False)
    rows = run.metrics
    assert run.complete and [r["update"] for r in rows] == [0, 1, 2] and run.meta["loss_path"] == "chunked"
    for row in rows[1:]:
        assert math.isfinite(row["loss"]) and row["grad_norm"] > 0 and 0 <= row["routing_mismatch"] <= 1


def test_the_gpu_hours_model_gives_back_the_measurements_it_is_based_on():
    from rlbook import gpu_hours

    assert gpu_hours.parameters("qwen3-1.7b") == (pytest.approx(1.72e9, rel=0.01),) * 2  # its model card: 1.7B
    active, total = gpu_hours.parameters("olmoe-1b-7b")
    assert active == pytest.approx(1.3e9, rel=0.03) and total == pytest.approx(6.9e9, rel=0.01)  # 1.3B of 6.9B
    assert 9216 * 1.72e9 * gpu_hours.TRAIN_S == pytest.approx(0.95)  # the 1.7B LoRA update on an H100
    standard = experiments.grpo_from_scratch("standard")
    per_update = gpu_hours.run_seconds(standard) / standard.total_updates
    assert 0.19 / 2 < per_update < 0.28 * 2  # measured: 0.19-0.28 s per update on the four engines
