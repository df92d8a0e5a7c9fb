"""Every default works at every size: `python -m rlbook train --preset qwen3-1.7b-random` with the defaults (engine
auto, bfloat16 weights with a float32 LoRA adapter, gradient checkpointing) trains on the CPU, at Qwen3-1.7B's width
(2048) and vocabulary (151,936) with 2 of its 28 layers (the same code path, seconds instead of minutes per update),
and so does every engine that can compute it (static, which only a GPU makes faster, is marked slow: `pytest -m slow`).
Only the budget is shrunk (updates, prompts, completion length, evaluation)."""
import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch

import rlbook.trainer
from rlbook.cli import main
from rlbook.models import PRESETS, QWEN3_1_7B
from rlbook.runs import RunStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from gpu_check import spread_advantages  # noqa: E402  (the GPU check's 1.7B step trains the same way)

BUDGET = ["--total-updates", "2", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4",
          "--eval-size", "2", "--eval-samples", "1"]


@pytest.fixture
def shallow_1_7b(monkeypatch):
    """qwen3-1.7b-random with 2 layers, and advantages -1 .. 1 in every group (the random model's tokens decode to
    nothing the task can score, so every reward would be equal and every update's gradient 0)."""
    spec = PRESETS["qwen3-1.7b-random"]
    monkeypatch.setitem(PRESETS, "qwen3-1.7b-random",
                        dataclasses.replace(spec, config={**QWEN3_1_7B, "num_hidden_layers": 2}))
    monkeypatch.setattr(rlbook.trainer, "group_advantages", spread_advantages)


@pytest.mark.usefixtures("one_thread", "shallow_1_7b")
@pytest.mark.parametrize("engine, updates_per_step", [("auto", 1), ("fast", 2),
                                                     pytest.param("static", 1, marks=pytest.mark.slow)])
def test_the_1_7b_defaults_train_two_updates_on_the_cpu(tmp_path, capsys, engine, updates_per_step):
    argv = ["train", "--preset", "qwen3-1.7b-random", "--runs-dir", str(tmp_path), *BUDGET]
    if engine != "auto":
        argv += ["--engine", engine, "--updates-per-step", str(updates_per_step)]
    assert main(argv) == 0, capsys.readouterr().err
    run, = RunStore(tmp_path).runs()
    rows = run.metrics
    assert run.complete and [r["update"] for r in rows] == [0, 1, 2]
    assert run.meta["engine"] == ("graph" if engine == "auto" else engine)
    assert all(math.isfinite(r["loss"]) and r["grad_norm"] > 0 for r in rows[1:]), rows
    assert "eval_greedy_acc" in rows[-1]


@pytest.mark.parametrize("preset", ["nano-small", "nano-moe", "qwen3-1.7b-random", "olmoe-1b-7b-random"])
def test_the_memory_model_counts_the_parameters_of_every_size(preset):
    """rlbook.memory's shape, read from the preset alone, counts the model's parameters (OLMoE's norms differ)."""
    from rlbook.config import RunConfig
    from rlbook.memory import shape_of
    from rlbook.models import build_model, count_parameters

    with torch.device("meta"):  # allocates nothing
        model, _ = build_model(preset)
    counted, total = shape_of(RunConfig(preset=preset, init="scratch")).parameters, count_parameters(model)[1]
    assert abs(counted - total) / total < 1e-3, (counted, total)
