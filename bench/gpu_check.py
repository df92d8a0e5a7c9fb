"""Every check only a GPU can make, strict and in 7 minutes: `make gpu-check OUT=<folder>` (bench/gpu_check.py).

On a bare machine with one NVIDIA GPU, Python 3.12, torch and Triton, and no network (no venv step there):

    here:   bash bench/gpu_wheels.sh      # transformers, peft and the rest as wheels, into .cache/gpu-wheels
    there:  pip install --no-index --find-links .cache/gpu-wheels -r .cache/gpu-wheels/requirements.txt && make gpu-check OUT=gpu-results

  kernel_agreement  the compiled, autotuned Triton kernels against the PyTorch reference at the tests' tolerances:
                    every fused objective, fp32 and bf16, V = 151,936 and a small ragged V, temperature, the in-place
                    gradient, and bf16 logits of N x V = 14,200 x 151,936 > 2^31 elements (bench/ratio_op_agreement.py)
  fused_ratio_op    the fused op at N = 8192, V = 151,936, bf16: its time and share of the HBM floor (bench/ratio_op.py)
  static_rollout    the static engine's CUDA-graph rollout draws the lean sampler's tokens (bench/static_sampling.py)
  train_1.7b_<e>    the 1.7B LoRA GRPO path through train() at Qwen3-1.7B's true shape (random weights saved once as
                    a checkpoint directory, --init): padded prompts, rollouts, 4 updates, evaluation, checkpoints, a
                    run interrupted after update 3 and resumed from its checkpoint; for each engine engine='auto'
                    picks for such a run: graph (on-policy), fast (stale), reference (the paper profile's chunked loss
                    path, micro-batches). Records seconds per update and peak GPU memory beside rlbook.memory's
                    estimate
  chapter_1         chapter 1's notebook under papermill in the standard profile on CUDA, one seed, its budget shrunk
                    to minutes by an IPython startup file (the same code path; its numbers are not results)

Optional (--only): lora_step_1.7b (bench/lora_step.py, about 200 s), standard_update (the standard profile's update on
each engine: seconds and peak memory).

Each step runs in its own process group, killed with everything it started when it runs past its limit (STEPS, 420 s
in all). Exit status 1 when any step fails, runs out of time, or its result shows a problem (a kernel case outside
its tolerance, `same tokens: false`, an out-of-memory row), 2 without a CUDA device, 0 otherwise. Everything goes to
OUT (a GPU machine's copy of the tree may not come back): each step's log and result, and gpu_check.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from record import RESULTS  # noqa: E402

N_TOKENS = 8192


@dataclass(frozen=True)
class Step:
    """One check: `python` with these arguments, within limit_s; its result is the newest file of bench/results/<folder>
    (a benchmark's record) or, folder None, OUT/<name>.json (written by this script's own worker)."""
    argv: tuple
    limit_s: int
    folder: str | None = None


def worker(name: str) -> tuple:
    return str(Path(__file__).resolve()), "--worker", name


TRAIN_CASES = {  # engine auto picks: the config changes that make it pick it, on a 1.7B LoRA run
    "graph": {},
    "fast": dict(updates_per_step=2, staleness=2),
    "reference": dict(updates_per_step=2, fused_ratio="chunked", micro_batch_size=4),
}
STEPS = {  # limits: 420 s in all (on an H100, 2026-11-26, the first three took 23 s without the 2^31 case, 10 s, 19 s)
    "kernel_agreement": Step((str(BENCH / "ratio_op_agreement.py"),), 60, "ratio_op_agreement"),
    "fused_ratio_op": Step((str(BENCH / "ratio_op.py"), "--tokens", str(N_TOKENS)), 40, "ratio_op"),
    "static_rollout": Step((str(BENCH / "static_sampling.py"),), 40, "static_sampling"),
    "train_1.7b_graph": Step(worker("train_1.7b_graph"), 70),  # builds and saves the checkpoint the others load
    "train_1.7b_fast": Step(worker("train_1.7b_fast"), 50),
    "train_1.7b_reference": Step(worker("train_1.7b_reference"), 50),
    "chapter_1": Step(worker("chapter_1"), 110),
}
OPTIONAL = {
    "lora_step_1.7b": Step((str(BENCH / "lora_step.py"), "--paths", "none", "chunked"), 300, "lora_step"),
    "standard_update": Step(worker("standard_update"), 100),
}
STANDARD_UPDATES = 4  # per engine; the first is not timed (CUDA and Triton warm-up)
CHAPTER_1_BUDGET = """# bench/gpu_check.py: chapter 1's standard profile at a budget of minutes (not a result)
from rlbook import experiments

experiments.BASE["standard"].update(total_updates=8, eval_every=4, eval_size=64, prompts_per_step=16, warm_start=dict(
    lr=5e-4, validation_size=16, max_steps=4, target_accuracy=None, eval_every=2))
"""


def spread_advantages(rewards, group_size, normalize_std):
    """Advantages -1 .. 1 within every group: a random model's tokens decode to nothing the task can score, so every
    reward would be equal, every advantage 0 and no gradient computed."""
    return torch.linspace(-1, 1, group_size).repeat(len(rewards) // group_size)


def train_check(engine: str, out: Path, preset: str = "qwen3-1.7b-random", device: str = "cuda",
                **shape) -> dict:
    """Train 4 updates of a LoRA GRPO run that engine='auto' computes on `engine`, from a checkpoint directory of
    `preset` (random weights, saved under out once), interrupting it after update 3 and resuming it; the run's
    engine, loss path, rows, seconds per update and peak memory beside rlbook.memory's estimate. `shape` overrides
    the preset's config (the CPU test's small model)."""
    import rlbook.trainer
    from rlbook.config import RunConfig
    from rlbook.memory import estimate, shape_of
    from rlbook.models import build_model
    from rlbook.obtain import run_or_load
    from rlbook.runs import Run, RunStore

    checkpoint = out / f"{preset}-checkpoint"
    if not (checkpoint / "config.json").exists():
        with torch.device(device):  # random weights made on the device: seconds, not minutes of CPU
            model, tokenizer = build_model(preset, **shape)
        model.save_pretrained(checkpoint)
        tokenizer.save_pretrained(checkpoint)
        del model
    config = RunConfig(experiment="gpu_check", name=engine, preset=preset, init=str(checkpoint), device=device,
                       prompts_per_step=4, group_size=8, total_updates=4, eval_every=4, eval_size=16, eval_samples=1,
                       checkpoint_every=2, lr=1e-5, **TRAIN_CASES[engine])
    assert config.resolved_engine.name == engine, f"engine auto picks {config.resolved_engine.name}, not {engine}"
    group_advantages, append, interrupted = rlbook.trainer.group_advantages, Run.append, []

    def interrupt_once(run, row):  # Ctrl-C after update 3's row: the run resumes from its checkpoint at update 2
        append(run, row)
        if row["update"] == 3 and not interrupted:
            interrupted.append(row)
            raise KeyboardInterrupt

    store, cuda = RunStore(out / "runs"), device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    rlbook.trainer.group_advantages, Run.append = spread_advantages, interrupt_once
    try:
        try:
            run_or_load(config, store, progress=False, references=False)
        except KeyboardInterrupt:
            pass
        finally:
            Run.append = append
        run = run_or_load(config, store, progress=False, references=False)
    finally:  # a caller in the same process (the tests) trains with the real advantages afterwards
        rlbook.trainer.group_advantages = group_advantages
    rows = run.metrics
    assert interrupted and run.complete and [r["update"] for r in rows] == [0, 1, 2, 3, 4], [r["update"] for r in rows]
    assert run.meta["resumed_at"] == 2 and all(r["grad_norm"] > 0 for r in rows[1:]), rows
    assert "eval_greedy_acc" in rows[-1] and max(r["response_len"] for r in rows[1:]) > 0
    result = {"engine": run.meta["engine"], "loss_path": run.meta["loss_path"], "updates": len(rows) - 1,
              "resumed_at": run.meta["resumed_at"],
              "s_per_update": statistics.median(r["update_s"] + r["sample_s"] for r in rows[2:]),
              "estimate_gib": estimate(config, shape_of(config)).device_bytes / 2**30,
              "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
    print(json.dumps(result))
    return result


def chapter_one(out: Path) -> dict:
    """Chapter 1 under papermill in the standard profile (on CUDA), one seed, at the budget of CHAPTER_1_BUDGET."""
    import papermill

    startup = out / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-budget.py").write_text(CHAPTER_1_BUDGET)
    os.environ.update(IPYTHONDIR=str(out / "ipython"), RLBOOK_RUNS=str(out / "runs"), TQDM_DISABLE="1",
                      RLBOOK_FIGURES=str(out / "figures"),
                      PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    tic = time.time()
    papermill.execute_notebook(str(ROOT / "notebooks" / "01_grpo_from_scratch.ipynb"),
                               str(out / "01_grpo_from_scratch.ipynb"), parameters={"PROFILE": "standard",
                                                                                      "SEEDS": [0]},
                               cwd=str(ROOT / "notebooks"), kernel_name="python3", progress_bar=False)
    return {"seconds": time.time() - tic, "executed": str(out / "01_grpo_from_scratch.ipynb")}


def standard_update(updates: int = STANDARD_UPDATES, **changes) -> dict:
    """Seconds per update (median of all but the first) and peak GPU memory of the standard profile on each engine
    (`changes` shrink it for the CPU test)."""
    from rlbook.engines import ENGINES
    from rlbook.experiments import BASE, grpo_from_scratch
    from rlbook.obtain import run_or_load
    from rlbook.runs import RunStore

    warm = {**BASE["standard"]["warm_start"], "max_steps": 2, "target_accuracy": None, "eval_every": 2,
            "validation_size": 8}
    out = {}
    with tempfile.TemporaryDirectory() as root:
        for engine in ENGINES:
            config = grpo_from_scratch("standard", **{"engine": engine, "total_updates": updates, "eval_size": 64,
                                                      "eval_samples": 1, "warm_start": warm,
                                                      "name": f"gpu-check-{engine}", **changes})
            cuda = config.device == "cuda"
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            run = run_or_load(config, RunStore(root), progress=False, references=False)
            rows = [r for r in run.metrics if r["update"] > 1]
            out[engine] = {"s_per_update": statistics.median(r["update_s"] + r["sample_s"] for r in rows),
                           "sample_s": statistics.median(r["sample_s"] for r in rows),
                           "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
                           "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
                           "loss_path": run.meta["loss_path"], "engine": run.meta["engine"]}
    return out


WORKERS = {**{f"train_1.7b_{engine}": (lambda out, engine=engine: train_check(engine, out)) for engine in TRAIN_CASES},
           "chapter_1": chapter_one, "standard_update": lambda out: standard_update()}


def headline(name: str, result: dict) -> dict:
    """The numbers of one measurement that the summary shows."""
    if name == "kernel_agreement":
        return {"cases within the tests' tolerances": f"{result['agree']} of {result['total']}",
                "disagreeing": [row["case"] for row in result["cases"] if not row["within"]]}
    if name == "fused_ratio_op":
        rows = {row["label"]: row for row in result["results"][0]["rows"]}
        keys = ("eager logprobs+entropy", "fused logprobs+entropy", "eager loss fwd+bwd",
                "fused loss fwd+bwd (in place)")
        return {**{f"{k} ms": rows[k].get("ms") for k in keys},
                **{f"{k} share of HBM floor": rows[k].get("frac_of_peak") for k in keys if "fused" in k}}
    if name == "lora_step_1.7b":
        return {f"{row['path']} {k}": row.get(k) for row in result["rows"]
                for k in ("peak_gib", "seconds_per_update", "added_by_loss_path_gib") if k in row}
    if name == "static_rollout":
        return {**{f"{path} ms": r["ms_per_rollout"] for path, r in result["paths"].items()},
                "same tokens": result["same_tokens"]}
    if name == "standard_update":
        return {f"{engine} {k}": v for engine, r in result.items() for k, v in r.items()
                if k in ("s_per_update", "peak_gib")}
    return result


def problems(name: str, result: dict) -> list[str]:
    """What in a step's result fails the check: kernel cases outside their tolerance, a static rollout that drew other
    tokens, any out-of-memory row."""
    found = [f"kernel case outside its tolerance: {row['case']}" for row in result.get("cases", [])
             if not row.get("within", True)]
    if result.get("same_tokens") is False:
        found.append("same tokens: false (the static rollout drew other tokens than the lean sampler)")

    def out_of_memory(value):
        if isinstance(value, dict):
            if value.get("oom"):
                yield value.get("label", value.get("path", "a row"))
            for item in value.values():
                yield from out_of_memory(item)
        elif isinstance(value, list):
            for item in value:
                yield from out_of_memory(item)

    return found + [f"out of memory: {label}" for label in out_of_memory(result)]


def stop_group(process: subprocess.Popen) -> None:
    """End every process of the step's group (its own session): SIGTERM, then SIGKILL 5 s later."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + grace
        while time.time() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
    process.wait()


def run_step(name: str, step: Step, out: Path) -> dict:
    """Run one step in its own process group within its limit; its summary, the problems its result shows, or why it
    has none."""
    log, own = out / f"{name}.log", out / f"{name}.json"
    before = set((RESULTS / step.folder).glob("*.json")) if step.folder else set()
    tic = time.time()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with open(log, "w") as output:
        process = subprocess.Popen([sys.executable, *step.argv, *(() if step.folder else ("--out", str(out)))],
                                   stdout=output, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT, env=env)
        try:
            process.wait(timeout=step.limit_s)
        except subprocess.TimeoutExpired:
            stop_group(process)
            return {"error": f"ran past its limit of {step.limit_s} s (its process group was killed; log {log})",
                    "seconds": time.time() - tic}
        finally:
            stop_group(process)  # what the step started and left behind (a notebook kernel) ends with it
    seconds = time.time() - tic
    if process.returncode:
        return {"error": f"exit status {process.returncode}: {log.read_text()[-1500:]}", "seconds": seconds}
    if step.folder:
        new = sorted(set((RESULTS / step.folder).glob("*.json")) - before)
        if not new:
            return {"error": f"wrote no result to bench/results/{step.folder}/ (log {log})", "seconds": seconds}
        shutil.copy(new[-1], own)
    if not own.exists():
        return {"error": f"wrote no result to {own} (log {log})", "seconds": seconds}
    result = json.loads(own.read_text())
    return {"seconds": seconds, "result": str(own), **headline(name, result), "problems": problems(name, result)}


def failed(measurements: dict) -> bool:
    return any("error" in m or m.get("problems") for m in measurements.values())


def run_steps(steps: dict, out: Path) -> dict:
    """Every step in turn (one failing does not stop the others), printed as it ends."""
    out.mkdir(parents=True, exist_ok=True)
    measurements = {}
    for name, step in steps.items():
        print(f"{name} (at most {step.limit_s} s) ...", flush=True)
        measurements[name] = run_step(name, step, out)
        print(json.dumps(measurements[name], indent=1), flush=True)
    return measurements


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="gpu-results", help="folder for every log and result (default: gpu-results)")
    parser.add_argument("--only", nargs="+", choices=[*STEPS, *OPTIONAL], help="run only these steps")
    parser.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)  # one step of this script's own
    args = parser.parse_args()
    out = Path(args.out).resolve()
    if not torch.cuda.is_available():
        print("gpu-check checks what only a CUDA GPU can (the compiled kernels, the 1.7B path through train(), "
              "CUDA-graph rollouts, chapter 1 on CUDA), and torch sees no CUDA device here: nothing was measured",
              file=sys.stderr)
        return 2
    if args.worker:
        result = WORKERS[args.worker](out)
        (out / f"{args.worker}.json").write_text(json.dumps(result, indent=1))
        return 0
    from rlbook.storage import environment, write_json

    steps = {name: {**STEPS, **OPTIONAL}[name] for name in args.only} if args.only else STEPS
    tic = time.time()
    measurements = run_steps(steps, out)
    write_json(out / "gpu_check.json", {"command": " ".join(sys.argv), "environment": environment("cuda"),
                                        "seconds": time.time() - tic, "measurements": measurements})
    bad = [name for name, m in measurements.items() if "error" in m or m.get("problems")]
    print(f"{len(steps) - len(bad)} of {len(steps)} steps passed in {time.time() - tic:.0f} s"
          + (f"; FAILED: {', '.join(bad)}" if bad else "") + f"; results in {out}")
    return 1 if failed(measurements) else 0


if __name__ == "__main__":
    sys.exit(main())
