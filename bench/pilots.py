"""Calibration pilots: short runs that look for settings where each chapter's effect can show (not a test).

    python bench/pilots.py ch1 [--part 0/2]      # two processes: --part 0/2 and --part 1/2
    python bench/pilots.py --list

Each pilot is a named change to a chapter's cpu-profile config, trained through the RunStore under
runs/pilots (a finished pilot replays, an interrupted one resumes). The summary (score = mean of the last 3
evaluations, gain over the base, wall time, drift and clip statistics) is printed and written to
bench/results/pilots/pilots-<set>-<commit>-<time>.json. What the pilots showed, and what was chosen, is in the README's
calibration note.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from record import save_result  # noqa: E402

from rlbook import stats  # noqa: E402
from rlbook.experiments import (KNIGHTS_KNAVES, drift_ladder_sweep, grpo_from_scratch, lopti_kk_run,  # noqa: E402
                               lopti_run, router_run, semi_online_run, stale_run)
from rlbook.obtain import run_or_load  # noqa: E402
from rlbook.runs import RunStore, default_root  # noqa: E402
from rlbook.chapters.lopti import load_trained_policy  # noqa: E402
from rlbook.evaluate import accuracy, validation_problems  # noqa: E402
from rlbook.tasks import make_task  # noqa: E402
from rlbook.trainer import init_policy, run_completion_budget, warm_start_of  # noqa: E402

PILOT_UPDATES = 400


def ch1(seed: int, **changes):
    """Chapter 1 pilots, from the update the first rounds searched around (16 prompts x 8, the reference engine)."""
    values = {"total_updates": PILOT_UPDATES, "prompts_per_step": 16, "engine": "reference", **changes}
    return grpo_from_scratch("cpu", seed, **values)


def ch2(objective: str, staleness: int, seed: int = 0, **changes):
    """Chapter 2 pilots: 64 prompts x 8 per rollout batch, 4 updates of 16 x 8 each (chapter 1's update size)."""
    values = {"total_updates": PILOT_UPDATES, "prompts_per_step": 64, "lr": 1e-3, **changes}
    return stale_run("cpu", objective, staleness, seed, **values)


def ch4(variant: str = "grpo", seed: int = 0, **changes):
    """Chapter 4 pilots: Knights and Knaves (2-3 people), nano-small warm start."""
    values = {"total_updates": 200, "eval_every": 25, "eval_samples": 2, **changes}
    return lopti_run("cpu", variant, seed, **values)


KK_FAST = dict(engine="fast")
KK2_WARM = dict(lr=5e-4, total_updates=400, eval_every=50, eval_samples=1, **KK_FAST,
                task_params={"num_people": 2, "scratchpad": True},
                warm_start={**KNIGHTS_KNAVES["warm_start"], "target_accuracy": 0.3})

# The 2-person sweep's settings before the pilots of kk-2people-select chose its warm start and budget: what the
# sets of rounds 7 and 8 change from (experiments.lopti_kk_run now has the chosen ones)
KK2_FIRST = dict(total_updates=250, warm_start=dict(KNIGHTS_KNAVES["warm_start"]))

# name -> list of (label, config)
SETS = {
    # Chapter 1: what learns fastest and furthest in 400 updates of nano-small on arithmetic?
    "ch1": lambda: [
        ("lora lr5e-4 16x8", ch1(0)),
        ("lora lr1e-3 32x8", ch1(0, lr=1e-3, prompts_per_step=32)),
        ("lora lr2e-3 32x8", ch1(0, lr=2e-3, prompts_per_step=32)),
        ("full lr1e-4 16x8", ch1(0, finetune="full", lr=1e-4)),
        ("full lr3e-4 16x8", ch1(0, finetune="full", lr=3e-4)),
        ("full lr3e-4 32x8", ch1(0, finetune="full", lr=3e-4, prompts_per_step=32)),
    ],
    # Chapter 1, round 2: the best of round 1 run twice as long (is +0.20 within reach in 5 minutes?)
    "ch1-long": lambda: [
        ("lora lr5e-4 16x8 800u", ch1(0, total_updates=800)),
        ("full lr1e-4 16x8 800u", ch1(0, finetune="full", lr=1e-4, total_updates=800)),
        ("lora lr1e-3 16x8 800u", ch1(0, lr=1e-3, total_updates=800)),
        ("full lr2e-4 16x8 800u", ch1(0, finetune="full", lr=2e-4, total_updates=800)),
    ],
    # Chapter 1, round 3: the sampling-graph trainer (one forward serves sampling and the update, 2.2x faster, issue
    # "learning per CPU-minute") buys twice the updates in the same 5 minutes. Does the gain reach +0.20?
    "ch1-graph": lambda: [
        ("lora lr5e-4 16x8 1600u graph", ch1(0, total_updates=1600, engine="graph")),
        ("lora lr1e-3 32x8 800u graph", ch1(0, lr=1e-3, prompts_per_step=32, total_updates=800, engine="graph")),
    ],
    # Round 4: 1,600 updates reached +0.197 in 145 s. Twice as long, or twice the batch, still within 5 minutes?
    "ch1-graph-long": lambda: [
        ("lora lr5e-4 16x8 3200u graph", ch1(0, total_updates=3200, engine="graph")),
        ("lora lr5e-4 32x8 1600u graph", ch1(0, prompts_per_step=32, total_updates=1600, engine="graph")),
    ],
    # Chapter 4: does GRPO itself learn K&K? (the comparison of AR / Lopti is only meaningful if it does)
    "kk": lambda: [
        ("kk lora lr5e-4", ch4()),
        ("kk lora lr1e-3", ch4(lr=1e-3)),
        ("kk full lr1e-4", ch4(finetune="full", lr=1e-4)),
        ("kk lora lr2e-3", ch4(lr=2e-3)),
    ],
    # Chapter 4, round 2: 200 updates were too few to see anything; 3x longer, cheaper evaluations, higher rates
    "kk-long": lambda: [
        ("kk lora lr1e-3 600u", ch4(lr=1e-3, total_updates=600, eval_every=50, eval_samples=1)),
        ("kk lora lr2e-3 600u", ch4(lr=2e-3, total_updates=600, eval_every=50, eval_samples=1)),
    ],
    # Chapter 4, round 3: the compact puzzles with the world-by-world scratchpad (a decision per person and world)
    "kk-scratchpad": lambda: [
        ("kk scratchpad lora lr1e-3", ch4(lr=1e-3, total_updates=300, eval_every=50, eval_samples=1,
                                          task_params={"num_people": [2, 3], "scratchpad": True})),
        ("kk scratchpad lora lr2e-3", ch4(lr=2e-3, total_updates=300, eval_every=50, eval_samples=1,
                                          task_params={"num_people": [2, 3], "scratchpad": True})),
    ],
    # Chapter 4, round 3: chapter 1 learned most from twice the prompts per update. Does GRPO on the K&K scratchpad
    # get past its plateau near 0.29 with 32 x 8 per update? (With the speed options that work for every variant:
    # shared prompt prefixes, sampling from the merged model, groups with equal rewards outside the gradient.)
    "kk-batch": lambda: [
        ("kk grpo lr5e-4 32x8 fast", ch4("grpo", lr=5e-4, prompts_per_step=32, total_updates=300, eval_every=50,
                                         eval_samples=1, **KK_FAST)),
        ("kk grpo lr1e-3 32x8 fast", ch4("grpo", lr=1e-3, prompts_per_step=32, total_updates=300, eval_every=50,
                                         eval_samples=1, **KK_FAST)),
    ],
    # Chapter 4, round 4: the scratchpad warm start goes from 0 to 0.32 on the validation split between steps 800
    # and 1,025; the reference runs start RL at its end, where GRPO mostly sharpens what the model already does.
    # Started mid-transition (the first evaluation at 15% or more), has GRPO more to learn?
    "kk-warm": lambda: [
        (f"kk grpo lr1e-3 warm0.15 seed{seed}", ch4("grpo", seed, lr=1e-3, eval_every=50, eval_samples=1, **KK_FAST,
                                                    warm_start={**KNIGHTS_KNAVES["warm_start"], "target_accuracy": 0.15}))
        for seed in (0, 1, 2)
    ],
    # Chapter 4, round 6 (issue 40: a K&K setting where GRPO gains >= 0.10). The chapter's warm start, broken down on the
    # evaluation set (kk-headroom.md): greedy 0.513 on 2-person puzzles and 0.033 on 3-person ones, where 231 of 270
    # answers are unparsable (a person's name miscopied) and 8 samples solve 11.5% of the puzzles at least once (2
    # people: 83%); 88% of 3-person groups have no reward spread. GRPO on 2-person puzzles only, from the same warm
    # start (the chapter's, shipped in data/runs/warmstart; the recorded pilot read a copy of it under runs/pilots):
    # does the gain reach 0.10 where the model has headroom and signal?
    "kk-2people": lambda: [
        (f"kk2 grpo lr5e-4 300u seed{seed}", ch4("grpo", seed, lr=5e-4, total_updates=300, eval_every=50,
                                                  eval_samples=1, init=str(warm_start_of(ch4())), **KK_FAST,
                                                  task_params={"num_people": 2, "scratchpad": True}))
        for seed in (0,)
    ],
    # ... from the chapter's warm start GRPO on 2-person puzzles gained +0.083 (0.526 -> 0.609; +0.098 at update 150),
    # sampled 0.324 -> 0.559: it sharpens toward its greedy answer, which stops near 0.62. A warm start of its own on
    # 2-person puzzles with the chapter's rule (stop at 30% on the validation split), more headroom below the same
    # ceiling, 400 updates; and the setting a sweep can name (a run's warm start is keyed by its puzzles; a checkpoint
    # path would put the machine's directory in the run's identity)
    "kk-2people-warm": lambda: [
        (f"kk2 grpo lr5e-4 400u warm2p0.3 seed{seed}", ch4("grpo", seed, **KK2_WARM)) for seed in (0,)
    ],
    # ... from its own warm start (greedy 0.418) GRPO rose to 0.546 at update 200 (+0.128), then fell (0.520, 0.510,
    # 0.482 at 300-400): score 0.504, +0.086. 250 updates end on the plateau (evaluations 0.538, 0.542, 0.546 at
    # 150-250 in that run). The budget is chosen from seed 0's curve, so seed 0 is in-sample: seeds 1 and 2 first
    # (the test), then seed 0 at 250 updates for the record (the same trajectory: no learning-rate schedule)
    "kk-2people-warm-250": lambda: [
        (f"kk2 grpo lr5e-4 250u warm2p0.3 seed{seed}", ch4("grpo", seed, **{**KK2_WARM, "total_updates": 250}))
        for seed in (1, 2, 0)
    ],
    # ... the sweep (04_lopti_kk) retrained that warm start with the same config and code: it stopped at step 775
    # (validation 0.43; the pilots' at 600, 0.42) and starts at 0.362 greedy on the evaluation set (the pilots' at
    # 0.418); from it GRPO gained 0.033 +- 0.009 (3 seeds). Its validation accuracy jumps 0.05 -> 0.21 -> 0.43 at
    # steps 725-775, so the 30% rule stops in the middle of a transition, and where exactly depends on the trajectory.
    # Does the gain depend on where the warm start stops? Stop at 20% (the same trajectory, 25 steps earlier), and
    # the 30% rule on another warm-start seed (another trajectory through the transition)
    "kk-2people-start": lambda: [
        ("kk2 grpo 250u warm2p0.2 seed0", ch4("grpo", 0, **{**KK2_WARM, "total_updates": 250, "warm_start": {
            **KK2_WARM["warm_start"], "target_accuracy": 0.2}})),
        ("kk2 grpo 250u warm2p0.3 wsseed1 seed0", ch4("grpo", 0, **{**KK2_WARM, "total_updates": 250, "warm_start": {
            **KK2_WARM["warm_start"], "seed": 1}})),
    ],
    # ... neither: +0.007 from the 20% stop (0.164 -> 0.171) and -0.007 from seed 1's warm start (600 steps, 0.30;
    # 0.270 -> 0.263, sampled 0.110 -> 0.180). From the sweep's own warm start (lopti_kk_run, seed 0): a faster rate,
    # twice the budget (its curve was still rising at 250), and groups of 16 (more puzzles with a right answer in the
    # group to learn from)
    "kk-2people-knobs": lambda: [
        ("kk2 grpo lr1e-3 250u seed0", lopti_kk_run("cpu", "grpo", 0, **{**KK2_FIRST, "lr": 1e-3})),
        ("kk2 grpo lr5e-4 500u seed0", lopti_kk_run("cpu", "grpo", 0, **{**KK2_FIRST, "total_updates": 500})),
        ("kk2 grpo lr5e-4 250u g16 seed0", lopti_kk_run("cpu", "grpo", 0, **KK2_FIRST, group_size=16)),
    ],
    # ... lr 1e-3 +0.002; 500 updates +0.057; groups of 16 +0.047 (seed 0 at 250 updates: +0.036). No knob tried
    # reaches +0.10 from this warm start; sampled accuracy rose 0.07-0.13 in each, greedy much less
    # (bench/results/pilots/kk-headroom.md, section 4)
    # ... a fair way to pick a warm start (issue 40): one GRPO pilot per candidate, read on the validation split (python
    # bench/pilots.py kk-2people-select --validation 500), never the evaluation set. Candidates: the 30% rule on
    # warm-start seeds 0 (the sweep's), 1, 2 and 3. The pilots train with RL seed 5, outside the sweep's seeds 0-4, so
    # the sweep on the chosen warm start is measured out of sample.
    "kk-2people-select": lambda: [
        (f"kk2 grpo 250u wsseed{ws} seed5", lopti_kk_run("cpu", "grpo", 5, **{
            **KK2_FIRST, "warm_start": {**KK2_FIRST["warm_start"], "seed": ws}})) for ws in (2, 3, 0, 1)
    ],
    # ... on the validation split (500 problems, greedy; start -> end of each pilot): warm-start seed 2 0.246 -> 0.290
    # (+0.044), seed 3 0.428 -> 0.512 (+0.084). The knobs that added most on the sweep's warm start (round 7: twice
    # the updates, groups of 16), on warm-start seed 3, chosen between with 250 updates on the validation split too
    "kk-2people-select-budget": lambda: [
        (f"kk2 grpo {label} wsseed3 seed5", lopti_kk_run("cpu", "grpo", 5, **{
            **KK2_FIRST, **changes, "warm_start": {**KK2_FIRST["warm_start"], "seed": 3}}))
        for label, changes in (("500u", dict(total_updates=500)), ("250u g16", dict(group_size=16)))
    ],
    # Chapter 7: does online DPO learn the arithmetic task at all (rate and beta), and does offline GRPO fall behind?
    "semi-online": lambda: [
        ("dpo online lr5e-4 b0.1", semi_online_run("cpu", "dpo", 1, total_updates=200)),
        ("dpo online lr1e-4 b0.1", semi_online_run("cpu", "dpo", 1, total_updates=200, lr=1e-4)),
        ("grpo offline lr5e-4", semi_online_run("cpu", "grpo", 0, total_updates=200)),
        ("dpo online lr5e-4 b0.5", semi_online_run("cpu", "dpo", 1, total_updates=200,
                                                   objective_params={"beta": 0.5})),
    ],
    # Chapter 2: how far does the policy drift (M2 of stale data) per update of lag, and does staleness hurt?
    "stale": lambda: [
        ("grpo s0", ch2("grpo", 0)),
        ("grpo s48", ch2("grpo", 48)),
        ("grpo s8", ch2("grpo", 8)),
        ("no_clip s48", ch2("no_clip", 48)),
        ("grpo s24", ch2("grpo", 24)),
        ("m2po s48", ch2("m2po", 48)),
    ],
    # Chapter 4, round 2: Lopti ends at the warm start at lr 1e-3 in the reference runs (two Adam steps per batch).
    # Does it keep GRPO's gain at half the learning rate, where each batch moves the policy about as far as GRPO's?
    "kk-lopti-lr": lambda: [
        ("lopti lr5e-4", ch4("lopti", lr=5e-4, eval_every=50, eval_samples=1)),
        ("grpo lr5e-4", ch4("grpo", lr=5e-4, eval_every=50, eval_samples=1)),
    ],
    # ... and with seeds 1 and 2 beside seed 0 (same settings), is the hint more than one seed's noise?
    "kk-lopti-lr-seeds": lambda: [
        (f"{variant} lr5e-4 seed{seed}", ch4(variant, seed, lr=5e-4, eval_every=50, eval_samples=1))
        for seed in (1, 2) for variant in ("lopti", "grpo")
    ],
    # ... and the rest of chapter 4's grid at lr 5e-4 (GRPO and Lopti are the two sets above), 3 seeds each: the
    # whole comparison at a rate where Lopti's second step does not double a step GRPO already takes at 1e-3
    "kk-variants-lr5e-4": lambda: [
        (f"{variant} lr5e-4 seed{seed}", ch4(variant, seed, lr=5e-4, eval_every=50, eval_samples=1))
        for seed in (0, 1, 2) for variant in ("ar", "ar+lopti", "lopti_reversed")
    ],
    # Chapter 4, round 5: on arithmetic, half chapter 2's rate learned more in the same updates (0.645 against 0.622,
    # m2po-slow). On K&K GRPO gained 0.029 at 1e-3 and 0.043 at 5e-4: does 2.5e-4 gain more, and does Lopti, whose
    # two steps per batch cost it the gain at 1e-3, beat GRPO at a rate where two steps are still small?
    "kk-lr2.5e-4": lambda: [
        (f"{variant} lr2.5e-4 seed{seed}", ch4(variant, seed, lr=2.5e-4, eval_every=50, eval_samples=1, **KK_FAST))
        for seed in (0, 1, 2) for variant in ("grpo", "lopti")
    ],
    # ... at 2.5e-4 GRPO gained 0.049 +- 0.004 and Lopti 0.056 +- 0.001 (Lopti minus GRPO +0.006 +- 0.004: within
    # noise, after -0.030 at 1e-3 and -0.006 at 5e-4). Seeds 3 and 4 of both, for five seeds, reported as they come.
    "kk-lr2.5e-4-seeds": lambda: [
        (f"{variant} lr2.5e-4 seed{seed}", ch4(variant, seed, lr=2.5e-4, eval_every=50, eval_samples=1, **KK_FAST))
        for seed in (3, 4) for variant in ("grpo", "lopti")
    ],
    # Chapter 2, round 2: the reference runs (lr 5e-4, s <= 48, 800 updates) never collapse without a trust region.
    # Does a larger dose of staleness or learning rate make no_clip collapse, and do the clip and M2PO hold where it
    # does? (s=96 and 192 at lr 5e-4 did not collapse, so GRPO and M2PO are run beside it at lr 2e-3 only.)
    "collapse": lambda: [
        ("no_clip s96 lr5e-4", ch2("no_clip", 96, total_updates=800, lr=5e-4)),
        ("no_clip s192 lr5e-4", ch2("no_clip", 192, total_updates=800, lr=5e-4)),
        ("no_clip s48 lr2e-3", ch2("no_clip", 48, total_updates=800, lr=2e-3)),
        ("grpo s48 lr2e-3", ch2("grpo", 48, total_updates=800, lr=2e-3)),
        ("m2po s48 lr2e-3", ch2("m2po", 48, total_updates=800, lr=2e-3)),
    ],
    # Chapter 2, round 3: between lr 5e-4 (nothing collapses) and 2e-3 (everything does). At lr 1e-3 over 400
    # updates no_clip s=48 swung between 0.35 and 0.50 (pilot `stale`): does a rate in between give the paper's
    # rise-then-collapse without a trust region while the clip and M2PO hold?
    "collapse-lr": lambda: [
        ("no_clip s48 lr1e-3", ch2("no_clip", 48, total_updates=800)),
        ("no_clip s48 lr1.4e-3", ch2("no_clip", 48, total_updates=800, lr=1.4e-3)),
        ("grpo s48 lr1.4e-3", ch2("grpo", 48, total_updates=800, lr=1.4e-3)),
        ("m2po s48 lr1.4e-3", ch2("m2po", 48, total_updates=800, lr=1.4e-3)),
        ("grpo s0 lr1.4e-3", ch2("grpo", 0, total_updates=800, lr=1.4e-3)),
    ],
    # ... lr 1e-3 swings around the base, 1.4e-3 falls straight to 0: is there a prosperity phase in between?
    "collapse-lr-mid": lambda: [
        ("no_clip s48 lr7e-4", ch2("no_clip", 48, total_updates=800, lr=7e-4)),
        ("no_clip s48 lr8.5e-4", ch2("no_clip", 48, total_updates=800, lr=8.5e-4)),
    ],
    # ... and at 1.4e-3, where no_clip fell to 0 and GRPO and M2PO held near 0.4, seeds 1 and 2 beside seed 0
    "collapse-lr-seeds": lambda: [
        (f"{objective} s48 lr1.4e-3 seed{seed}", ch2(objective, 48, seed, total_updates=800, lr=1.4e-3))
        for seed in (1, 2) for objective in ("no_clip", "grpo", "m2po")
    ],
    # ... is the collapse at 1.4e-3 staleness at all? no_clip on-policy (s=0) at that rate, and GRPO s=0 seeds 1, 2
    "collapse-lr-control": lambda: [
        ("no_clip s0 lr1.4e-3", ch2("no_clip", 0, total_updates=800, lr=1.4e-3)),
        *[(f"grpo s0 lr1.4e-3 seed{seed}", ch2("grpo", 0, seed, total_updates=800, lr=1.4e-3)) for seed in (1, 2)],
    ],
    # Chapter 2, round 4: at lr 5e-4 staleness costs GRPO 0.036 and M2PO recovers none of it (+0.005 +- 0.005); at
    # 1.4e-3 it costs 0.117 but M2PO's mask lets two of five seeds fall late. Does the rate in between give a cost
    # large enough to recover, with M2PO holding, so that M2PO at s=48 beats GRPO at s=48 as in the paper?
    "m2po-lr": lambda: [
        (f"{objective} s{staleness} lr1e-3 seed{seed}", ch2(objective, staleness, seed, total_updates=800))
        for seed in (0, 1, 2) for objective, staleness in (("grpo", 0), ("grpo", 48), ("m2po", 48))
    ],
    # ... and the rule of the authors' released code (objective m2po_cap: one cap on |log r| and a clip, not
    # Algorithm 1's mask) at s=48, at the reference rate and at 1e-3: does it beat GRPO where Algorithm 1 does not?
    "m2po-cap": lambda: [
        (f"m2po_cap s48 lr{lr:g} seed{seed}", ch2("m2po_cap", 48, seed, total_updates=800, lr=lr))
        for lr in (5e-4, 1e-3) for seed in (0, 1, 2)
    ],
    # Chapter 3, round 2: the paper's on-policy GRPO clips 0.07% and its M2PO at s=256 masks 0.02%; ours, 0.72% and
    # 3.50%, because our policy drifts far more per update (M2 of the s=48 batch 3.4 x tau). At half the reference
    # rate M2 per lag falls about 4-fold (M2 ~ (lr x lag)^2): does M2PO then mask no more than on-policy GRPO clips,
    # while GRPO's clip at the largest s stays >= 3x on-policy? s=96 at half the rate drifts as s=48 does at 5e-4.
    "m2po-slow": lambda: [
        (f"{objective} s{staleness} lr2.5e-4 seed{seed}", ch2(objective, staleness, seed, total_updates=800, lr=2.5e-4))
        for seed in (0, 1, 2) for objective, staleness in (("grpo", 0), ("grpo", 48), ("m2po", 48), ("grpo", 96),
                                                            ("m2po", 96))
    ],
    # ... at s=96 M2PO beat GRPO by 0.011 +- 0.004 (seeds 0-2), and the 5-seed reference runs (02_slow_drift) put it at
    # 0.0116 +- 0.0056, 2.07 s.e.: a verdict on the edge. Five more seeds of the two cells, reported whatever they show.
    "m2po-slow-more": lambda: [
        (f"{objective} s96 lr2.5e-4 seed{seed}", ch2(objective, 96, seed, total_updates=800, lr=2.5e-4))
        for seed in (5, 6, 7, 8, 9) for objective in ("grpo", "m2po")
    ],
    # Chapter 6, round 2: in the reference runs (router noise 0.2, lr 1e-4) GRPO without R3 never collapses, so R3 has
    # nothing to prevent. With more mismatch (noise 0.5: 44% of routing decisions flipped, F(2) 4.9% on the warm
    # start) or a 3x larger step, does GRPO without R3 fall from its peak while GRPO with R3 holds, as in the paper?
    "r3-collapse": lambda: [
        (f"{variant} noise{noise} lr{lr:g} seed{seed}", router_run("cpu", variant, seed, router_noise=noise, lr=lr))
        for seed in (0, 1) for noise, lr in ((0.5, 1e-4), (0.2, 3e-4)) for variant in ("grpo", "grpo+r3")
    ],
    # ... at noise 0.5 R3 ended above GRPO in seeds 0 and 1 (3x the step collapsed both alike): seeds 2-4 of the two,
    # and TIS beside them (the variant that beat R3 at noise 0.2), 5 seeds
    "r3-noise-seeds": lambda: [
        *[(f"{variant} noise0.5 seed{seed}", router_run("cpu", variant, seed, router_noise=0.5))
          for seed in (2, 3, 4) for variant in ("grpo", "grpo+r3")],
        *[(f"tis noise0.5 seed{seed}", router_run("cpu", "tis", seed, router_noise=0.5)) for seed in range(5)],
    ],
    # Chapter 7, round 2: at lr 5e-4 DPO trained on one generator's pairs for 100 updates falls to 0.15-0.3 within
    # the first 50 (reference runs, sync every 100 and offline). At lr 1e-4 each update moves the policy a fifth as
    # far: does semi-online DPO at sync 100 then stay with online, as the paper found?
    "dpo-lr": lambda: [
        (f"dpo {label} lr1e-4", semi_online_run("cpu", "dpo", sync, lr=1e-4))
        for label, sync in (("online", 1), ("sync100", 100), ("offline", 0), ("sync10", 10))
    ],
    # ... a larger beta saturates DPO's sigmoid at a smaller log-ratio margin, so the loss stops pulling sooner: does
    # it keep DPO on a stale generator's pairs from walking away (lr 5e-4, as the reference runs)?
    "dpo-beta": lambda: [
        (f"dpo {label} beta{beta}", semi_online_run("cpu", "dpo", sync, objective_params={"beta": beta}))
        for beta in (0.5, 1.0) for label, sync in (("sync100", 100), ("offline", 0), ("online", 1))
    ],
    # Issue 24, the drift ladder (training version 3): rungs below lr 2.5e-4, each with the staleness and the update
    # count scaled by 1 / lr (so the stale data's drift and on-policy GRPO's learning stay comparable): does
    # on-policy GRPO still learn in the budget, and what M2 does the largest staleness give? (seed 0; the fast
    # knobs: within the equivalence tolerances of the reference path)
    "ladder-slow": lambda: [
        (f"grpo s{s} lr{lr:g}", ch2("grpo", s, lr=lr, total_updates=updates, **KK_FAST))
        for lr, s, updates in ((1.25e-4, 0, 1600), (1.25e-4, 192, 1600), (6.25e-5, 0, 3200), (6.25e-5, 384, 3200))
    ],
    # The ladder's slowest rung (lr 6.25e-5, staleness 384) was queued at 4x the reference budget (3200 updates, about
    # 10-13 min a run, over the 8 min a run the issue allows) without a pilot: how much does on-policy GRPO gain at
    # 1600, 2400 and 3200 updates (its evaluation curve), against the other rungs' on-policy gains? (seed 0; the
    # rung's own config, from experiments.drift_ladder_sweep)
    "ladder-slowest": lambda: [
        ("grpo s0 lr6.25e-05 3200", next(c for c in drift_ladder_sweep("cpu")
                                         if c.lr == 6.25e-5 and c.staleness == 0 and c.seed == 0))
    ],
    # Issue 24, prosperity before collapse: no trust region at the slow rung's largest staleness, three times longer
    # than the reference runs (which rose +0.16 and levelled off), with no gradient-norm clipping (does a collapse
    # here need steps the clip at norm 1 would bound?); LoRA and full fine-tuning (full: a fifth of LoRA's rate,
    # chapter 1's pilots found full fine-tuning at >= 2e-4 unstable)
    "collapse-long": lambda: [
        ("no_clip s96 lr2.5e-4 lora 2400 noclipnorm", ch2("no_clip", 96, lr=2.5e-4, total_updates=2400,
                                                         max_grad_norm=1e9, **KK_FAST)),
        ("no_clip s96 lr5e-5 full 2400 noclipnorm", ch2("no_clip", 96, lr=5e-5, total_updates=2400, finetune="full",
                                                       max_grad_norm=1e9)),
    ],
}


def summarize(label: str, run) -> dict:
    rows = [r for r in run.metrics if r["update"] > 0]
    mean = lambda key: statistics.fmean(r[key] for r in rows if r.get(key) is not None) if rows else float("nan")
    c = run.config
    return {"label": label, "run": run.path.name, "seed": c.seed, "objective": c.objective, "staleness": c.staleness, "sync_every": c.sync_every,
            "objective_params": c.objective_params,
            "finetune": c.finetune, "lr": c.lr, "prompts_per_step": c.prompts_per_step,
            "updates_per_step": c.updates_per_step, "total_updates": c.total_updates,
            "base": stats.base_score(run), "score": stats.score(run), "gain": stats.score(run) - stats.base_score(run),
            "sampled_base": stats.base_score(run, "eval_sampled_acc"), "sampled_score": stats.score(run, "eval_sampled_acc"),
            "greedy_curve": stats.evaluations(run)[1], "wall_time_s": run.meta.get("wall_time_s"),
            "m2": mean("m2"), "clip_frac": mean("clip_frac_low") + mean("clip_frac_high"), "mask_frac": mean("mask_frac"),
            "zero_std_frac": mean("zero_std_frac"), "device": run.meta.get("device")}


def validation_gain(run, n: int) -> dict:
    """Greedy accuracy on n problems of the validation split of the run's starting policy and of its final one: what
    a choice among pilots reads (the evaluation set only reports)."""
    config = run.config
    task = make_task(config.task, **config.task_params)
    problems = validation_problems(config.task, config.task_params, n)
    start, tokenizer = init_policy(config, run.store, progress=False)
    budget = run_completion_budget(config, task, tokenizer)
    base = accuracy(start, tokenizer, task, problems, budget)
    final = accuracy(load_trained_policy(run)[0], tokenizer, task, problems, budget)
    return {"validation_size": n, "val_base": base, "val_final": final, "val_gain": final - base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("set", nargs="?", choices=sorted(SETS))
    parser.add_argument("--part", default="0/1", help="i/n: run every n-th pilot starting at i (share two cores)")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--validation", type=int, default=0, metavar="N",
                        help="also read each pilot's start and end on N validation-split problems (greedy)")
    args = parser.parse_args()
    if args.list or args.set is None:
        for name, make in SETS.items():
            print(name, [label for label, _ in make()])
        return
    index, parts = map(int, args.part.split("/"))
    store = RunStore(default_root() / "pilots")
    pilots = SETS[args.set]()[index::parts]
    results = []
    for label, config in pilots:
        run = run_or_load(config.replace(experiment=f"pilots-{args.set}"), store, references=False)
        results.append(summarize(label, run))
        if args.validation:
            results[-1].update(validation_gain(run, args.validation))
        r = results[-1]
        print(f"{label:<28} base {r['base']:.3f} -> {r['score']:.3f} (gain {r['gain']:+.3f}; sampled "
              f"{r['sampled_base']:.3f} -> {r['sampled_score']:.3f})  {r['wall_time_s']:.0f} s  m2 {r['m2']:.4f}  "
              f"clip {100 * r['clip_frac']:.2f}%  mask {100 * r['mask_frac']:.2f}%" + (
                  f"  validation {r['val_base']:.3f} -> {r['val_final']:.3f} ({r['val_gain']:+.3f})"
                  if args.validation else ""), flush=True)
    save_result("pilots", f"{args.set}-part{index}of{parts}", {"pilots": results})


if __name__ == "__main__":
    main()
