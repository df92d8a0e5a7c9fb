"""Chapter 6 calibration (R3, arXiv 2510.11370): how much routing mismatch each source makes, and short training
pilots on nano-moe that look for a setting where the mismatch is clearly present and a run fits ~3 minutes.

    python bench/router_pilots.py dose [--profile cpu]       # mismatch against router noise, bf16 and fp32 engines
    python bench/router_pilots.py train <set>                # short training pilots (runs/pilots), see --list
    python bench/router_pilots.py --list

`dose` samples one rollout batch (16 prompts x 8) from the cached warm start of the profile's model per engine precision and
noise level and measures, against the float32 training forward, the routing mismatch, the k3 KL and F(2), without
and with replay (`rlbook.chapters.router_replay.mismatch`). Results: bench/results/router_pilots/.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from record import save_result  # noqa: E402
from pilots import summarize  # noqa: E402

from rlbook.chapters.router_replay import mismatch  # noqa: E402
from rlbook.evaluate import completion_budget  # noqa: E402
from rlbook.experiments import router_run  # noqa: E402
from rlbook.obtain import run_or_load  # noqa: E402
from rlbook.runs import RunStore, default_root  # noqa: E402
from rlbook.tasks import make_task  # noqa: E402
from rlbook.trainer import init_policy  # noqa: E402

NOISES = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)
SETS = {
    # How long does an update take, and does the mismatch (bf16 engine + noise 0.2) show in 150 updates?
    "speed": lambda: [("grpo noise0.2 150u", router_run("cpu", "grpo", 0, total_updates=150, eval_every=50)),
                      ("grpo+r3 noise0.2 150u", router_run("cpu", "grpo+r3", 0, total_updates=150, eval_every=50))],
    # The dose: does a larger mismatch hurt GRPO, and does R3 recover it?
    "dose": lambda: [("grpo noise0.5", router_run("cpu", "grpo", 0, total_updates=300, router_noise=0.5)),
                     ("grpo+r3 noise0.5", router_run("cpu", "grpo+r3", 0, total_updates=300, router_noise=0.5)),
                     ("grpo noise0 bf16", router_run("cpu", "grpo", 0, total_updates=300, router_noise=0.0))],
}
MISMATCH_KEYS = ("routing_mismatch", "kl_k3", "f2", "clip_frac", "grad_norm")


def dose(profile: str) -> dict:
    config = router_run(profile)
    model, tokenizer = init_policy(config, progress=False)
    task = make_task(config.task, **config.task_params)
    problems, rows = task.generate(16, seed=123), []
    for dtype in ("float32", "bfloat16"):
        for noise in NOISES:
            tic = time.time()
            out, _ = mismatch(model, tokenizer, task, problems, 8, completion_budget(task, tokenizer), noise, dtype)
            rows.append({"dtype": dtype, **out, "seconds": time.time() - tic})
            print({k: round(v, 5) if isinstance(v, float) else v for k, v in rows[-1].items()
                   if k != "routing_mismatch_layers"}, flush=True)
    return {"profile": profile, "preset": config.preset, "problems": 16, "group_size": 8, "rows": rows}


def train(name: str) -> dict:
    store, out = RunStore(default_root() / "pilots"), []
    for label, config in SETS[name]():
        run = run_or_load(config, store, progress=False, references=False)
        rows = [r for r in run.metrics if r["update"] > 0]
        extra = {key: statistics.fmean(r[key] for r in rows if r.get(key) is not None) for key in MISMATCH_KEYS}
        out.append({**summarize(label, run), **extra, "router_noise": config.router_noise,
                    "router_replay": config.router_replay, "s_per_update": run.meta["wall_time_s"] / len(rows)})
        print({k: out[-1][k] for k in ("label", "base", "score", "wall_time_s", "s_per_update", *MISMATCH_KEYS)},
              flush=True)
    return {"set": name, "pilots": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", choices=("dose", "train"))
    parser.add_argument("set", nargs="?", choices=sorted(SETS))
    parser.add_argument("--profile", default="cpu", choices=("smoke", "cpu"))
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.list or args.what is None:
        for name, make in SETS.items():
            print(name, [label for label, _ in make()])
        return
    torch.set_num_threads(1)
    if args.what == "dose":
        save_result("router_pilots", f"dose-{args.profile}", dose(args.profile))
    else:
        save_result("router_pilots", f"train-{args.set}", train(args.set))


if __name__ == "__main__":
    main()
