"""Where an update's time goes: generation (sampling + behaviour log-probs + scoring), forward + loss, backward,
optimizer, evaluation (a benchmark).

    python bench/profile_trainer.py [--profile cpu] [--updates 30] [--cprofile 25] [--store runs]
                                    [--set engine=fast] [--set engine=graph]

Runs the trainer's own pieces (rlbook.rollout.rollout, losspath.loss_and_tokens, backward, clip + AdamW, and one
evaluation as the trainer makes it every eval_every updates: greedy + sampled accuracy) on chapter 1's config at
the vs-TRL benchmark's update (vs_trl.COMPARED_UPDATE: 16 prompts x 8, the reference engine; GRPO, no staleness, one
rollout batch per update) for `--updates` updates (`--set` changes config fields, e.g. the engine, which the
pieces honour as the trainer does) and prints wall and CPU seconds per update of each phase (the
evaluation's per update of eval_every), with the machine load; `--cprofile N` also prints the N functions with the
most cumulative time. Timings are noisy on a shared machine: compare runs of one invocation, and CPU seconds rather
than wall. Writes bench/results/profile_trainer/.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from rlbook.advantages import group_advantages
from rlbook.evaluate import accuracy, evaluation_problems, sampled_eval_seed
from rlbook.experiments import grpo_from_scratch
from rlbook.losspath import loss_and_tokens
from rlbook.lean_decoder import LeanDecoder
from rlbook.models import set_cpu_threads
from rlbook.rollout import rollout
from rlbook.runs import RunStore
from rlbook.seeds import stream_seed
from rlbook.tasks import make_task
from rlbook.trainer import init_policy, resolve, run_completion_budget

sys.path.insert(0, str(Path(__file__).parent))
from vs_trl import COMPARED_UPDATE  # noqa: E402

PHASES = ("generation", "forward+loss", "backward", "optimizer", "evaluation")


class Clock:
    """Wall and process-CPU seconds per named phase."""

    def __init__(self):
        self.wall = dict.fromkeys(PHASES, 0.0)
        self.cpu = dict.fromkeys(PHASES, 0.0)

    @contextmanager
    def phase(self, name: str):
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.wall[name] += time.perf_counter() - wall
        self.cpu[name] += time.process_time() - cpu


def profile_updates(config, store: RunStore, updates: int, clock: Clock) -> int:
    """`updates` GRPO updates of config's policy with each phase timed; returns the generated (response) tokens."""
    torch.manual_seed(stream_seed("init", config.seed))
    model, tokenizer = init_policy(config, store, progress=False)
    task = make_task(config.task, **config.task_params)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(stream_seed("rollout", config.seed))
    max_new, tokens = run_completion_budget(config, task, tokenizer), 0
    objective, path = resolve(config, torch.device("cpu"))
    engine = config.resolved_engine
    sampler = LeanDecoder(model, merged=engine.merged_sampling) if engine.lean_sampler else None
    for step in range(updates):
        with clock.phase("generation"):
            problems = task.generate(config.prompts_per_step, seed=stream_seed("rl_prompts", config.seed, step))
            policy = sampler.refresh(model) if sampler is not None else model
            batch = rollout(policy, tokenizer, task, problems, config.group_size, max_new, config.temperature,
                            generator, policy_version=step, graph=engine.sampling_graph)
        tokens += int(batch.response_mask.sum())
        advantages = group_advantages(batch.rewards, config.group_size, config.normalize_adv_std)
        with clock.phase("forward+loss"):
            loss, *_ = loss_and_tokens(model, batch, advantages[:, None] * batch.response_mask, None, objective, path)
        with clock.phase("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with clock.phase("optimizer"):
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            optimizer.step()
    with clock.phase("evaluation"):  # one evaluation, as the trainer makes every eval_every updates
        eval_set = evaluation_problems(config.task, config.task_params, config.eval_size)
        accuracy(model, tokenizer, task, eval_set, max_new)
        accuracy(model, tokenizer, task, eval_set, max_new, config.temperature,
                 seed=sampled_eval_seed(config.seed, updates), samples=config.eval_samples)
    return tokens


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cprofile", type=int, default=0, help="print the top N functions by cumulative time")
    parser.add_argument("--store", default=None, help="RunStore root holding the warm start (default: runs/)")
    parser.add_argument("--set", nargs="*", default=[], help="config overrides key=value (JSON values)")
    args = parser.parse_args()
    set_cpu_threads()
    changes = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    config = grpo_from_scratch(args.profile, args.seed, **{**COMPARED_UPDATE, **changes})
    clock = Clock()
    store = RunStore(args.store) if args.store else RunStore()
    profiler = cProfile.Profile() if args.cprofile else None
    load = os.getloadavg()
    if profiler:
        profiler.enable()
    tokens = profile_updates(config, store, args.updates, clock)
    if profiler:
        profiler.disable()
    per = {name: args.updates if name != "evaluation" else config.eval_every for name in PHASES}
    wall = {name: clock.wall[name] / per[name] for name in PHASES}
    cpu = {name: clock.cpu[name] / per[name] for name in PHASES}
    load_after = os.getloadavg()[0]
    print(f"{args.updates} updates of {config.preset}, {torch.get_num_threads()} thread(s); load average "
          f"{load[0]:.1f} -> {load_after:.1f}; evaluation: one, per update of eval_every={config.eval_every}")
    for name in PHASES:
        print(f"{name:<13} {wall[name]:7.4f} s/update wall  {cpu[name]:7.4f} s/update cpu  "
              f"({cpu[name] / sum(cpu.values()):5.1%} of cpu)")
    print(f"{'total':<13} {sum(wall.values()):7.4f} s/update wall  {sum(cpu.values()):7.4f} s/update cpu; "
          f"{tokens / clock.wall['generation']:.0f} generated tokens/s while generating")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.cprofile)
    from record import save_result
    from rlbook.runs import environment

    save_result("profile_trainer", environment()["device"].split()[0],
                {"profile": args.profile, "changes": changes, "updates": args.updates,
                 "threads": torch.get_num_threads(),
                 "cprofile": bool(profiler), "load_before": load[0], "load_after": load_after,
                 "eval_every": config.eval_every, "wall_s_per_update": wall, "cpu_s_per_update": cpu,
                 "generated_tokens": tokens})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
