"""`make gpu-check` (bench/gpu_check.py) without CUDA says so and exits 2; on a GPU its pieces read the benchmarks'
results and train the standard profile on every engine, which these tests run on the CPU at a tiny size."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU answer")
def test_without_cuda_it_says_so_and_exits_2():
    before = set((ROOT / "bench" / "results").glob("gpu_check*/*.json"))
    for command in ([sys.executable, "bench/gpu_check.py"], ["make", "--no-print-directory", "gpu-check"]):
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 2 and "no CUDA device" in out.stderr and "nothing was measured" in out.stderr
    assert set((ROOT / "bench" / "results").glob("gpu_check*/*.json")) == before  # nothing written


def test_headlines_read_the_benchmarks_results():
    results = ROOT / "bench" / "results"
    static = json.loads(next((results / "static_sampling").glob("*.json")).read_text())
    assert set(gpu_check.headline("static_rollout", static)) == {"model ms", "merged ms", "static ms", "same tokens"}
    lora = json.loads(next((results / "lora_step").glob("*.json")).read_text())
    assert gpu_check.headline("lora_step_1.7b", lora)["chunked peak_gib"] > 0
    out = subprocess.run([sys.executable, "bench/ratio_op.py", "--cpu-smoke"], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    smoke = json.loads(Path(out.stdout.split("wrote ")[-1].strip()).read_text())
    ratio = gpu_check.headline("fused_ratio_op", smoke)
    assert ratio["fused logprobs+entropy ms"] > 0 and "fused loss fwd+bwd (in place) share of HBM floor" in ratio


@pytest.mark.usefixtures("one_thread")
def test_the_standard_update_runs_on_every_engine():
    result = gpu_check.standard_update(updates=2, prompts_per_step=2, eval_size=4, device="cpu")
    assert {engine: r["engine"] for engine, r in result.items()} == {e: e for e in ("reference", "fast", "graph",
                                                                                    "static")}
    assert all(r["s_per_update"] > 0 for r in result.values()) and result["fast"]["loss_path"] == "shared"
    assert set(gpu_check.headline("standard_update", result)) == {f"{e} {k}" for e in result
                                                                  for k in ("s_per_update", "peak_gib")}


def test_the_kernel_agreement_check_runs_through_the_interpreter_and_can_disagree():
    out = subprocess.run([sys.executable, "bench/ratio_op_agreement.py", "--cpu-smoke"], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={**os.environ, "TRITON_INTERPRET": "1"})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["agree"] == result["total"] == len(result["cases"]) >= 10
    assert gpu_check.headline("kernel_agreement", result) == {
        "cases within the tests' tolerances": f"{result['total']} of {result['total']}", "disagreeing": []}
    import ratio_op_agreement
    off = ratio_op_agreement.difference(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.001]),
                                        ratio_op_agreement.STATS_TOL)
    assert off == {"max_abs": pytest.approx(0.001, rel=1e-3), "within": False}
    without = subprocess.run([sys.executable, "bench/ratio_op_agreement.py", "--cpu-smoke"], cwd=ROOT,
                             capture_output=True, text=True, env={**os.environ, "TRITON_INTERPRET": "0"})
    assert without.returncode == 2 and "TRITON_INTERPRET=1" in without.stderr
