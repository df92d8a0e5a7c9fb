"""`make gpu-check` (bench/gpu_check.py) without CUDA says so and exits 2, writing nothing; with one, every step runs in
its own process group within its limit and the check fails (exit 1) on any error, time-out, disagreeing kernel case,
`same tokens: false` or out-of-memory row. What a CPU can run of it runs here: the strictness and the process-group
handling with fake steps, the kernel-agreement script through Triton's interpreter, and the 1.7B train() step and
the standard-profile update at a tiny size."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU answer")
def test_without_cuda_it_says_so_and_exits_2(tmp_path):
    for command in ([sys.executable, "bench/gpu_check.py", "--out", str(tmp_path / "a")],
                    ["make", "--no-print-directory", "gpu-check", f"OUT={tmp_path / 'b'}"]):
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 2 and "no CUDA device" in out.stderr and "nothing was measured" in out.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def fake(code: str, limit_s: int = 30) -> gpu_check.Step:
    """A step running `code` in python; its result folder is sys.argv[-1] (the --out that run_step passes)."""
    return gpu_check.Step(("-c", f"import json, os, sys, time\nout = sys.argv[-1]\n{code}"), limit_s)


def writes(name: str, result: dict) -> str:
    return f"open(os.path.join(out, {name + '.json'!r}), 'w').write({json.dumps(json.dumps(result))})"


def test_every_failure_fails_the_check(tmp_path):
    steps = {"fine": fake(writes("fine", {"agree": 3, "total": 3, "cases": [{"case": "a", "within": True}]})),
             "disagrees": fake(writes("disagrees", {"cases": [{"case": "grpo bf16", "within": False}]})),
             "other_tokens": fake(writes("other_tokens", {"same_tokens": False})),
             "oom": fake(writes("oom", {"results": [{"rows": [{"label": "fused loss", "oom": True}]}]})),
             "crashes": fake("sys.exit(3)"), "silent": fake("pass")}
    results = gpu_check.run_steps(steps, tmp_path)
    assert results["fine"]["problems"] == [] and not gpu_check.failed({"fine": results["fine"]})
    assert results["disagrees"]["problems"] == ["kernel case outside its tolerance: grpo bf16"]
    assert "same tokens: false" in results["other_tokens"]["problems"][0]
    assert results["oom"]["problems"] == ["out of memory: fused loss"]
    assert results["crashes"]["error"].startswith("exit status 3")
    assert results["silent"]["error"].startswith("wrote no result")
    for name in steps:
        assert (tmp_path / f"{name}.log").exists()
        if name != "fine":
            assert gpu_check.failed({name: results[name]}), name


def test_a_step_past_its_limit_is_killed_with_its_process_group(tmp_path):
    """The worker and what it started (a notebook kernel, say) end at the limit: none keeps the GPU."""
    code = ("import subprocess\nchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            "open(os.path.join(out, 'pids'), 'w').write(f'{os.getpid()} {child.pid}')\ntime.sleep(600)")
    tic = time.time()
    result = gpu_check.run_steps({"hangs": fake(code, limit_s=3)}, tmp_path)["hangs"]
    assert result["error"].startswith("ran past its limit of 3 s") and time.time() - tic < 30
    for pid in map(int, (tmp_path / "pids").read_text().split()):
        deadline = time.time() + 10
        while Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text() \
                and time.time() < deadline:
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text(), pid


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("engine", list(gpu_check.TRAIN_CASES))
def test_the_train_step_trains_resumes_and_picks_its_engine(tmp_path, engine):
    """train_1.7b_<engine> at nano-tiny's size on the CPU: the engine auto picks, an interrupted run resumed."""
    import rlbook.trainer

    advantages = rlbook.trainer.group_advantages
    result = gpu_check.train_check(engine, tmp_path, preset="nano-tiny", device="cpu")
    assert rlbook.trainer.group_advantages is advantages  # the spread stand-in stays inside the check
    assert result["engine"] == engine and result["resumed_at"] == 2 and result["updates"] == 4
    assert result["loss_path"] == {"graph": "reference", "fast": "shared", "reference": "chunked"}[engine]
    assert result["s_per_update"] > 0 and result["estimate_gib"] > 0


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


def test_the_kernel_agreement_check_runs_through_the_interpreter_and_can_disagree(monkeypatch, capsys):
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
    # a disagreement is exit status 1 (it was 0 on f6e21c1)
    monkeypatch.setattr(ratio_op_agreement, "difference", lambda got, want, tol: {"max_abs": 1.0, "within": False})
    monkeypatch.setattr(sys, "argv", ["ratio_op_agreement.py", "--cpu-smoke"])
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert ratio_op_agreement.main() == 1 and "DISAGREES" in capsys.readouterr().out
