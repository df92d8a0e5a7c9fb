"""Named experiments: the configs of each chapter per profile, shared by notebooks, the CLI and the benchmarks."""
from __future__ import annotations

from .config import RunConfig
from .engines import ENGINES
from .profiles import resolve_profile

# Per profile: model, task size, warm start, GRPO budget and device (the GPU profiles train on one GPU, device
# 'cuda'). The cpu profile's settings come from the calibration pilots (bench/pilots.py, results in
# bench/results/pilots/, summary in the README's calibration note): LoRA lr 5e-4 on 16 x 8 completions per update
# gained the most greedy accuracy per CPU-minute; lr 1e-3 and full fine-tuning at 2e-4 or more learned less or
# collapsed; 800 updates take about 4 minutes on one core.
BASE = {
    "smoke": dict(preset="nano-tiny", task_params={"digits": [1, 2]}, prompts_per_step=16, group_size=8,
                  total_updates=150, eval_every=25, eval_size=200, eval_samples=1, lr=2e-3,
                  warm_start=dict(lr=3e-3, batch_size=64, validation_size=100)),
    "cpu": dict(preset="nano-small", prompts_per_step=16, group_size=8, total_updates=800, eval_every=50,
                eval_size=500, lr=5e-4, warm_start=dict(validation_size=200)),
    "standard": dict(preset="nano-base", prompts_per_step=64, group_size=8, total_updates=800, eval_every=50,
                     eval_size=500, lr=5e-4, warm_start=dict(lr=5e-4, validation_size=300), device="cuda"),
    "paper": dict(preset="qwen3-1.7b", prompts_per_step=256, group_size=8, updates_per_step=4, total_updates=4000,
                  eval_every=100, eval_size=500, lr=1e-6, lora_rank=64, lora_alpha=128.0, micro_batch_size=8,
                  rollout_batch_size=64, fused_ratio="chunked", device="cuda"),
}


# Chapter 1's cpu budget (pilots ch1-graph and ch1-graph-long): the graph engine, which the default engine picks for
# this on-policy config (one forward pass serves sampling and the update), makes an update about twice as cheap, and
# spent on twice the prompts per update and twice the updates it took seed 0 from 0.460 to 0.721 greedy in 221 s,
# where 800 updates of 16 x 8 reached about 0.62.
GRPO_BUDGET = {"cpu": dict(prompts_per_step=32, total_updates=1600)}


def grpo_from_scratch(profile: str = "auto", seed: int = 0, **changes) -> RunConfig:
    """Chapter 1: one GRPO run from the warm-started model on arithmetic."""
    profile = resolve_profile(profile)
    values = {**BASE[profile], **GRPO_BUDGET.get(profile, {}), "experiment": "01_grpo",
              "name": f"grpo-{profile}-seed{seed}", "seed": seed}
    return RunConfig.from_dict({**values, **changes})


# Chapter 2's rollout batch feeds 4 updates (as in M2PO), each on chapter 1's update size: 64 prompts x 8 per batch in
# the cpu profile, 800 updates. The staleness grid is scaled by what staleness does, not copied: the paper's s=256
# is 6% of a 4,000-update run; our largest s=48 is 6% of 800 updates, and the pilots measured the M2 of stale data
# a few times above tau = 0.04 at s = 8 to 48 (bench/results/pilots/pilots-stale-*.json).
STALE_BUDGET = {"smoke": dict(total_updates=100),  # CI time: the largest staleness (64) still lags 64 updates
                "cpu": dict(total_updates=800, prompts_per_step=64)}


def stale_run(profile: str = "auto", objective: str = "grpo", staleness: int = 0, seed: int = 0,
              **changes) -> RunConfig:
    """Chapter 2 / 3: one run of an objective at a staleness (4 updates per rollout batch, as in M2PO)."""
    profile = resolve_profile(profile)
    values = {**BASE[profile], **STALE_BUDGET.get(profile, {}), "experiment": "02_staleness", "updates_per_step": 4,
              "objective": objective,
              "staleness": staleness, "seed": seed, "name": f"{objective}-s{staleness}-{profile}-seed{seed}"}
    return RunConfig.from_dict({**values, **changes})


# Cells that a verdict compares run on one engine. Where `auto` would give some cells the sampling-graph engine
# (on-policy, one update per batch) and others the fast one (Lopti's two stages, a lagging generator), the
# difference between two cells would be partly the engine's: those chapters pin the engine every cell allows, fast,
# or the reference engine in a profile whose loss path the fast engine's shared prompts cannot run (paper: chunked).
def compared_alike(profile: str) -> dict:
    """{"engine": ...}: the engine every cell of a compared sweep runs in this profile."""
    fast = RunConfig.from_dict({**BASE[profile], "engine": "reference"}).engine_refusal(ENGINES["fast"]) is None
    return {"engine": "fast" if fast else "reference"}


# Chapters 2-4: what each profile sweeps (the smoke profile: fewer, smaller; reference runs: the cpu profile).
STALENESS = {"smoke": [0, 16, 64], "cpu": [0, 8, 24, 48], "standard": [0, 4, 16, 64, 256],
             "paper": [0, 4, 16, 32, 64, 128, 256]}
SWEEP_OBJECTIVES = ("grpo", "no_clip", "m2po")
AT_LARGEST_STALENESS = ("gspo", "tis")
TAUS = (0.005, 0.02, 0.04, 0.08, 0.16)
DEFAULT_TAU = 0.04  # M2PO's tau in every run of the paper (objectives.m2po)
SEEDS = {"smoke": [0], "cpu": [0, 1, 2], "standard": [0, 1, 2], "paper": [0]}
# Cells a verdict rests on get 5 seeds in the cpu profile (chapter 1; chapter 2's on-policy and largest-staleness runs;
# chapters 6 and 7, whose every cell is one side of a verdict: with 3 seeds "R3 beats GSPO" stood at 2.2 s.e., and
# "semi-online GRPO (sync every 10) matches online" missed the equivalence bound by 0.002)
DECISIVE_SEEDS = {**SEEDS, "cpu": [0, 1, 2, 3, 4]}
# Lopti / AR variants (arXiv 2505.12929): name -> (ar_alpha, lopti_eta)
LOPTI_VARIANTS = {"grpo": (0.0, 0.0), "ar": (0.3, 0.0), "lopti": (0.0, 0.5), "ar+lopti": (0.3, 0.5),
                  "lopti_reversed": (0.0, -0.5)}
# K&K completions are long for a character model: the smoke profile runs only a few updates per variant (CI time).
# The cpu profile's puzzles carry the world-by-world scratchpad, at lr 1e-3: without it GRPO left nano-small's greedy
# accuracy where it was (0.268 -> 0.271 in 200 updates at lr 5e-4, none at 1e-3 or 2e-3 either); with it the first
# 140 updates of a pilot took greedy 0.254 -> 0.287 and sampled 0.164 -> 0.231 (bench/results/pilots/pilots-kk-*.json).
SMOKE_LOPTI = dict(total_updates=10, eval_every=5, eval_size=64)  # three evaluations, the fewest a score averages
LOPTI_BUDGET = {"smoke": SMOKE_LOPTI,
                "cpu": dict(total_updates=200, eval_every=50, eval_samples=1, lr=1e-3,
                            task_params={"num_people": [2, 3], "scratchpad": True})}
KNIGHTS_KNAVES = {"task": "knights_knaves", "task_params": {"num_people": [2, 3]},
                  "warm_start": dict(lr=2e-3, batch_size=64, validation_size=100, max_steps=2000)}


COMPARED_AT_LARGEST = ("grpo", "no_clip", "m2po")  # chapter 2's verdicts compare these at the largest staleness


def staleness_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 2: objectives x staleness, plus gspo and tis at the largest staleness, for every seed; the cells the
    verdicts compare (on-policy GRPO; GRPO, no_clip and M2PO at the largest staleness) for every decisive seed."""
    profile = resolve_profile(profile)
    largest = max(STALENESS[profile])
    grid = [(o, s) for s in STALENESS[profile] for o in SWEEP_OBJECTIVES]
    grid += [(o, largest) for o in AT_LARGEST_STALENESS]
    decisive = {("grpo", 0)} | {(o, largest) for o in COMPARED_AT_LARGEST}
    return [stale_run(profile, o, s, seed) for o, s in grid
            for seed in (DECISIVE_SEEDS if (o, s) in decisive else SEEDS)[profile]]


# Chapter 2 at a faster drift: the profile's learning rate times 2.8 (cpu: 5e-4 -> 1.4e-3). At the cpu profile's rate
# no objective collapses, even with no trust region at s = 192; at 4x (2e-3) every objective does. Between them
# (pilots collapse-lr*, bench/results/), 2.8x is where no_clip at s = 48 fell to 0 while GRPO's clip and M2PO's mask
# held every seed near 0.4: the trust region's job made visible.
FAST_DRIFT_LR_FACTOR = 2.8
FAST_DRIFT_ON_POLICY = ("grpo", "no_clip")  # at s = 0: is a collapse staleness, or the rate alone?


def drift_sweep(profile: str, lr_factor: float, staleness: int, on_policy: tuple[str, ...],
                experiment: str) -> list[RunConfig]:
    """Chapter 2 at another drift per update: the objectives in `on_policy` at s = 0 and COMPARED_AT_LARGEST at
    `staleness`, at lr_factor times the profile's learning rate, every seed that decides a verdict."""
    lr = lr_factor * BASE[profile]["lr"]
    cells = [(o, 0) for o in on_policy] + [(o, staleness) for o in COMPARED_AT_LARGEST]
    return [stale_run(profile, o, s, seed, lr=lr, experiment=experiment,
                      name=f"{o}-s{s}-lr{lr:.3g}-{profile}-seed{seed}")
            for o, s in cells for seed in DECISIVE_SEEDS[profile]]


def fast_drift_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 2: on-policy and the largest staleness at FAST_DRIFT_LR_FACTOR times the learning rate, with and
    without a trust region (experiment 02_fast_drift)."""
    profile = resolve_profile(profile)
    return drift_sweep(profile, FAST_DRIFT_LR_FACTOR, max(STALENESS[profile]), FAST_DRIFT_ON_POLICY, "02_fast_drift")


# Chapter 2 at a slower drift: half the profile's learning rate (cpu: 2.5e-4) and twice its largest staleness (cpu:
# 96, 12% of the run). The M2 of a batch lagging L updates grows about as (lr x L)^2, which predicts the drift of the
# reference rate at s = 48; measured, the stale batches drift about half as far (GRPO's M2 0.059 against 0.135) and
# on-policy GRPO clips a third as many tokens (0.25%, nearer the paper's 0.07%). In the pilot that chose it
# (m2po-slow, seeds 0-2, bench/results/) M2PO at s = 96 ended above GRPO at s = 96, the paper's central claim, which
# no other rate we tried showed.
SLOW_DRIFT_LR_FACTOR = 0.5
SLOW_DRIFT_STALENESS_FACTOR = 2
SLOW_DRIFT_ON_POLICY = ("grpo",)


def slow_drift_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 2: on-policy GRPO, and GRPO, no_clip and M2PO at twice the largest staleness, at half the learning
    rate (experiment 02_slow_drift)."""
    profile = resolve_profile(profile)
    return drift_sweep(profile, SLOW_DRIFT_LR_FACTOR, SLOW_DRIFT_STALENESS_FACTOR * max(STALENESS[profile]),
                       SLOW_DRIFT_ON_POLICY, "02_slow_drift")


# Prosperity before collapse over a long horizon (chapter 2): no trust region at the slow-drift rung's staleness and
# rate, three times the budget, with no gradient-norm clipping (every other run clips at norm 1; chapter 2 glues how
# often that binds; does a collapse at our scale need the unbounded step?). Two
# cells: LoRA, and full fine-tuning at a fifth of the rate (chapter 1's pilots found full fine-tuning at >= 2e-4
# unstable). Pilots collapse-long (bench/results/pilots/), seed 0: LoRA rose 0.46 -> 0.62 and fell to 0.42 when one
# gradient spiked and the stale batches' M2 jumped, then recovered; full fine-tuning rose to 0.66 and fell to 0.22.
COLLAPSE_LONG_UPDATES_FACTOR = 3
COLLAPSE_LONG_CELLS = {"lora": 1.0, "full": 0.2}  # finetune: learning rate as a factor of the slow-drift rung's
# full fine-tuning trains the lm_head, whose gradient the chunked loss path (the paper profile's) does not compute
FULL_FINETUNE_LOSS = {"fused_ratio": "auto"}
UNCLIPPED_GRAD_NORM = 1e9


def collapse_long_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 2: no trust region at the slow-drift rung, 3x longer, no gradient-norm clipping, with LoRA and with
    full fine-tuning (02_collapse_long)."""
    profile = resolve_profile(profile)
    slow_lr = SLOW_DRIFT_LR_FACTOR * BASE[profile]["lr"]
    staleness = SLOW_DRIFT_STALENESS_FACTOR * max(STALENESS[profile])
    updates = COLLAPSE_LONG_UPDATES_FACTOR * {**BASE[profile], **STALE_BUDGET.get(profile, {})}["total_updates"]
    return [stale_run(profile, "no_clip", staleness, seed, lr=slow_lr * factor, finetune=finetune,
                      **(FULL_FINETUNE_LOSS if finetune == "full" else {}),
                      total_updates=updates, max_grad_norm=UNCLIPPED_GRAD_NORM, experiment="02_collapse_long",
                      name=f"no_clip-s{staleness}-lr{slow_lr * factor:.3g}-u{updates}-noclipnorm"
                           f"{'' if finetune == 'lora' else '-' + finetune}-{profile}-seed{seed}")
            for finetune, factor in COLLAPSE_LONG_CELLS.items() for seed in DECISIVE_SEEDS[profile]]


# The drift ladder (chapters 2-3): rungs of drift per update, set by the learning rate as a factor of the profile's.
# At each rung the staleness is the profile's largest times 1 / factor (the same lr x lag on every rung); the two
# slowest rungs run 1600 updates, so that the largest staleness is at most a quarter of the run (on-policy GRPO learns
# about as much per update at every rate below the reference: pilots ladder-slow and ladder-slowest,
# bench/results/pilots/). Rung 1 is the staleness sweep's decisive cells and rung 1/2 the slow-drift set, so those
# runs are trained once. Per rung: on-policy GRPO, and COMPARED_AT_LARGEST at the rung's staleness, 5 seeds.
LADDER = {"smoke": {1.0: 1, 0.5: 1}, "cpu": {2.0: 1, 1.0: 1, 0.5: 1, 0.25: 2, 0.125: 2}}  # lr factor: updates factor
LADDER_EXPERIMENTS = {1.0: "02_staleness", SLOW_DRIFT_LR_FACTOR: "02_slow_drift"}


def drift_ladder_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapters 2-3: every rung of the drift ladder (experiments 02_staleness, 02_slow_drift, 02_drift_ladder)."""
    profile = resolve_profile(profile)
    rungs = LADDER.get(profile, LADDER["cpu"])
    base_updates = {**BASE[profile], **STALE_BUDGET.get(profile, {})}["total_updates"]
    return [config.replace(total_updates=base_updates * updates) if updates != 1 else config
            for factor, updates in rungs.items()
            for config in drift_sweep(profile, factor, round(max(STALENESS[profile]) / factor), ("grpo",),
                                      LADDER_EXPERIMENTS.get(factor, "02_drift_ladder"))]


# Three M2PO variants on the slow-drift rung (issue: no public code compares them): Algorithm 1's mask (m2po, in the
# slow-drift set), the released code's cap (m2po_cap) and AReaL's mask (m2po_areal); every run also records what
# each variant would remove from its own batches (rlbook.token_stats), so they are compared on the same batches too.
M2PO_VARIANTS = ("m2po_cap", "m2po_areal")


def m2po_variants_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 3: m2po_cap and m2po_areal beside the slow-drift set's m2po at its staleness (02_slow_drift)."""
    profile = resolve_profile(profile)
    lr = SLOW_DRIFT_LR_FACTOR * BASE[profile]["lr"]
    staleness = SLOW_DRIFT_STALENESS_FACTOR * max(STALENESS[profile])
    return [stale_run(profile, o, staleness, seed, lr=lr, experiment="02_slow_drift",
                      name=f"{o}-s{staleness}-lr{lr:.3g}-{profile}-seed{seed}")
            for o in M2PO_VARIANTS for seed in DECISIVE_SEEDS[profile]]


# Chapter 3's test of why AReaL's rule drifts further than Algorithm 1's: AReaL's rule with its masked tokens kept
# in the loss's denominator (objectives.m2po_areal, masked_in_denominator), the only change, beside the variants.
AREAL_DENOMINATOR_TEST = {"masked_in_denominator": True}


def areal_denominator_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 3: m2po_areal with the masked tokens in the denominator, at the M2PO variants' rung and seeds."""
    profile = resolve_profile(profile)
    lr = SLOW_DRIFT_LR_FACTOR * BASE[profile]["lr"]
    staleness = SLOW_DRIFT_STALENESS_FACTOR * max(STALENESS[profile])
    return [stale_run(profile, "m2po_areal", staleness, seed, lr=lr, experiment="02_slow_drift",
                      objective_params=dict(AREAL_DENOMINATOR_TEST),
                      name=f"m2po_areal-masked-in-denominator-s{staleness}-lr{lr:.3g}-{profile}-seed{seed}")
            for seed in DECISIVE_SEEDS[profile]]


def tau_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 3: M2PO's threshold tau at the largest staleness (the paper's Fig. 8), every seed that decides a verdict
    (signature f compares taus). At the default tau the runs are the staleness sweep's own M2PO runs (same config,
    so they are trained once)."""
    profile = resolve_profile(profile)
    largest = max(STALENESS[profile])
    return [stale_run(profile, "m2po", largest, seed) if tau == DEFAULT_TAU else
            stale_run(profile, "m2po", largest, seed, objective_params={"tau": tau},
                      name=f"m2po-tau{tau}-s{largest}-{profile}-seed{seed}")
            for tau in TAUS for seed in DECISIVE_SEEDS[profile]]


def lopti_run(profile: str = "auto", variant: str = "grpo", seed: int = 0, **changes) -> RunConfig:
    """Chapter 4: GRPO with Advantage Reweighting and / or Lopti on Knights and Knaves puzzles."""
    profile = resolve_profile(profile)
    if variant not in LOPTI_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of: {', '.join(LOPTI_VARIANTS)}")
    alpha, eta = LOPTI_VARIANTS[variant]
    values = {**BASE[profile], **KNIGHTS_KNAVES, **LOPTI_BUDGET.get(profile, {}), **compared_alike(profile),
              "experiment": "04_lopti",
              "ar_alpha": alpha, "lopti_eta": eta,
              "seed": seed, "name": f"{variant}-{profile}-seed{seed}"}
    return RunConfig.from_dict({**values, **changes})


# Chapter 4 where GRPO learns: the same variants on arithmetic with chapter 1's update (the profile's base budget,
# where GRPO gains about +0.16 greedy in 800 updates), AR's alpha at the paper's value for math (0.1; 0.3 is K&K's).
ARITHMETIC_AR_ALPHA = 0.1
LOPTI_ARITHMETIC_BUDGET = {"smoke": SMOKE_LOPTI}  # CI time: five short runs


def lopti_arithmetic_run(profile: str = "auto", variant: str = "grpo", seed: int = 0, **changes) -> RunConfig:
    """Chapter 4: GRPO with Advantage Reweighting and / or Lopti on arithmetic (experiment 04_lopti_arithmetic)."""
    profile = resolve_profile(profile)
    if variant not in LOPTI_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of: {', '.join(LOPTI_VARIANTS)}")
    alpha, eta = LOPTI_VARIANTS[variant]
    values = {**BASE[profile], **LOPTI_ARITHMETIC_BUDGET.get(profile, {}), **compared_alike(profile),
              "experiment": "04_lopti_arithmetic",
              "ar_alpha": ARITHMETIC_AR_ALPHA if alpha else 0.0,
              "lopti_eta": eta, "seed": seed, "name": f"{variant}-arithmetic-{profile}-seed{seed}"}
    return RunConfig.from_dict({**values, **changes})


def lopti_arithmetic_sweep(profile: str = "auto") -> list[RunConfig]:
    profile = resolve_profile(profile)
    return [lopti_arithmetic_run(profile, v, seed) for seed in DECISIVE_SEEDS[profile] for v in LOPTI_VARIANTS]


# Chapter 4's test of why Lopti costs accuracy on arithmetic: AdamW moves the weights by about the learning rate a
# step whatever the gradient's size, so Lopti's two steps a batch move them about twice as far as GRPO's one. The test
# trains Lopti at half the learning rate, the only change, and GRPO there as the control (does the lower rate alone
# raise the score?).
LOPTI_TEST_LR_FACTOR = 0.5


def lopti_half_rate_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 4: Lopti and GRPO on arithmetic at LOPTI_TEST_LR_FACTOR times the rate, the variants' seeds."""
    profile = resolve_profile(profile)
    lr = LOPTI_TEST_LR_FACTOR * BASE[profile]["lr"]
    return [lopti_arithmetic_run(profile, v, seed, lr=lr, name=f"{v}-lr{lr:g}-arithmetic-{profile}-seed{seed}")
            for v in ("lopti", "grpo") for seed in DECISIVE_SEEDS[profile]]


def lopti_sweep(profile: str = "auto") -> list[RunConfig]:
    profile = resolve_profile(profile)
    return [lopti_run(profile, v, seed) for v in LOPTI_VARIANTS for seed in DECISIVE_SEEDS[profile]]


# Chapter 6 (R3, arXiv 2510.11370): GRPO on a mixture of experts whose rollouts come from a bfloat16 engine copy of
# the policy with noise on its router logits (the dose of mismatch), with and without router replay, TIS and GSPO
# beside it. R3's point is that the router keeps learning through the replayed gate weights: the nano models train
# in full; the GPU profiles train OLMoE-1B-7B (a real mixture of experts that fits one GPU: why this one, in
# book/calibration_06_router_replay.md) with LoRA on its attention and its routers in full (rlbook.models.add_lora:
# LoRA has no adapter for the experts' 3-D weights), at the profile's sizes, none of them calibrated.
ROUTER_BASE = {
    "smoke": dict(preset="nano-moe-tiny", finetune="full", lr=3e-4, total_updates=20, eval_every=10, eval_size=100),
    "cpu": dict(preset="nano-moe", finetune="full", lr=1e-4),
    "standard": dict(preset="olmoe-1b-7b", micro_batch_size=8, rollout_batch_size=64, fused_ratio="chunked"),
    "paper": dict(preset="olmoe-1b-7b"),
}
# The noise of each profile flips about a fifth of the routing decisions of its warm start (bench/router_pilots.py
# dose: nano-moe 21% at 0.2; nano-moe-tiny's router margins are wider, 22% at 1.0); the bfloat16 engine alone flips
# 0.1-0.4%. The paper profile keeps the engine's own mismatch only.
ROUTER_NOISE = {"smoke": 1.0, "cpu": 0.2, "standard": 0.2, "paper": 0.0}
ROUTER_VARIANTS = {"grpo": ("grpo", False), "grpo+r3": ("grpo", True), "tis": ("tis", False), "gspo": ("gspo", False)}


def router_run(profile: str = "auto", variant: str = "grpo", seed: int = 0, **changes) -> RunConfig:
    """Chapter 6: one run of a variant (objective, router replay) on the MoE model with a mismatched rollout engine."""
    profile = resolve_profile(profile)
    if variant not in ROUTER_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of: {', '.join(ROUTER_VARIANTS)}")
    objective, replay = ROUTER_VARIANTS[variant]
    values = {**BASE[profile], **ROUTER_BASE.get(profile, {}), "experiment": "06_router_replay",
              "objective": objective, "router_replay": replay, "rollout_dtype": "bfloat16",
              "router_noise": ROUTER_NOISE[profile], "seed": seed, "name": f"{variant}-{profile}-seed{seed}"}
    return RunConfig.from_dict({**values, **changes})


def router_replay_sweep(profile: str = "auto") -> list[RunConfig]:
    profile = resolve_profile(profile)
    return [router_run(profile, v, seed) for seed in DECISIVE_SEEDS[profile] for v in ROUTER_VARIANTS]  # seed by seed


# Chapter 7 (semi-online RL, arXiv 2506.21495): chapter 1's GRPO, and online DPO on the same rollouts, with the
# generator synced every k updates (1: online; 0: never, offline from the warm start). The paper's semi-online DPO
# syncs every 10 and 100 steps; our policy drifts faster per update (chapter 2), so k = 10 already lags like a large
# staleness there and k = 100 (a quarter of the cpu run) is the strong dose.
SYNC_EVERY = {"smoke": [1, 10, 0], "cpu": [1, 10, 100, 0], "standard": [1, 10, 100, 0], "paper": [1, 10, 100, 0]}
SEMI_ONLINE_OBJECTIVES = ("grpo", "dpo")
# The paper profile's update (a quarter of its 256 prompts per rollout batch) is one rollout batch here, so the
# intervals of 10 and 100 updates are whole batches; online DPO pairs whole groups in one pass (no micro-batches).
SEMI_ONLINE_BUDGET = {"smoke": dict(total_updates=20, eval_every=10), "cpu": dict(total_updates=400),
                      "paper": dict(prompts_per_step=64, updates_per_step=1)}
DPO_PASS = {"micro_batch_size": 0}


def semi_online_run(profile: str = "auto", objective: str = "grpo", sync_every: int = 1, seed: int = 0,
                    **changes) -> RunConfig:
    """Chapter 7: one run of GRPO or online DPO whose rollouts come from a copy of the policy synced every
    `sync_every` updates (0: never)."""
    profile = resolve_profile(profile)
    if objective not in SEMI_ONLINE_OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r} for chapter 7; choose one of: "
                         f"{', '.join(SEMI_ONLINE_OBJECTIVES)}")
    label = "offline" if sync_every == 0 else f"sync{sync_every}"
    values = {**BASE[profile], **SEMI_ONLINE_BUDGET.get(profile, {}), "experiment": "07_semi_online",
              **compared_alike(profile), **(DPO_PASS if objective == "dpo" else {}),
              "objective": objective, "sync_every": sync_every, "seed": seed,
              "name": f"{objective}-{label}-{profile}-seed{seed}"}
    return RunConfig.from_dict({**values, **changes})


def semi_online_sweep(profile: str = "auto") -> list[RunConfig]:
    profile = resolve_profile(profile)
    return [semi_online_run(profile, o, k, seed) for seed in DECISIVE_SEEDS[profile] for o in SEMI_ONLINE_OBJECTIVES
            for k in SYNC_EVERY[profile]]  # whole seeds first


SWEEPS = {"grpo": lambda p: [grpo_from_scratch(p, s) for s in DECISIVE_SEEDS[resolve_profile(p)]],
          "staleness": staleness_sweep, "fast_drift": fast_drift_sweep, "slow_drift": slow_drift_sweep,
          "drift_ladder": drift_ladder_sweep, "m2po_variants": m2po_variants_sweep,
          "areal_denominator": areal_denominator_sweep,
          "collapse_long": collapse_long_sweep,
          "lopti_arithmetic": lopti_arithmetic_sweep, "lopti_half_rate": lopti_half_rate_sweep,
          "tau": tau_sweep, "lopti": lopti_sweep, "router_replay": router_replay_sweep,
          "semi_online": semi_online_sweep}


def sweep(name: str, profile: str = "auto") -> list[RunConfig]:
    if name not in SWEEPS:
        raise ValueError(f"unknown sweep {name!r}; choose one of: {', '.join(SWEEPS)}")
    return SWEEPS[name](profile)


# Chapter 3 at one fixed learning rate (issue 40): the drift ladder holds lr x lag constant, so every rung's stale
# batches drift above tau; here the rate is the ladder's quarter rung (cpu: 1.25e-4, 1600 updates), where on-policy
# GRPO clips about the paper's 0.07% of tokens, and the staleness walks up from s = 4. GRPO and M2PO at each s, 5
# seeds (10 at s = 8, the predicted cell, its last five trained last); the s = 0 and s = 192 cells are the ladder's
# stored runs (same identity). Order is priority: the cheapest pilot (seed 0, s = 8) first.
FIXED_RATE_LR_FACTOR = 0.25
FIXED_RATE_STALENESS = (8, 32, 4, 16)  # in training order; the ladder supplies s = 0 and s = 192
FIXED_RATE_OBJECTIVES = ("grpo", "m2po")
FIXED_RATE_EXTRA_SEEDS = {8: [5, 6, 7, 8, 9]}  # s = 8 decides the prediction: 10 seeds (cpu profile)
# The bfloat16-rollout arm (the paper's inference/training mismatch): on-policy GRPO, and GRPO and M2PO at s = 8, with
# rollouts in bfloat16 and, as its control, in float32, all on the reference engine (the fast engine's lean sampler
# is its own float32 rollout engine), so that the two precisions differ in nothing else.
FIXED_RATE_BF16_CELLS = (("grpo", 0), ("grpo", 8), ("m2po", 8))


def fixed_rate_run(profile: str, objective: str, staleness: int, seed: int, **changes) -> RunConfig:
    """One run of the fixed-rate sweep (lr = FIXED_RATE_LR_FACTOR x the profile's, the ladder's quarter rung)."""
    profile = resolve_profile(profile)
    lr = FIXED_RATE_LR_FACTOR * BASE[profile]["lr"]
    budget = {**BASE[profile], **STALE_BUDGET.get(profile, {})}["total_updates"]
    updates = budget * LADDER["cpu"][FIXED_RATE_LR_FACTOR]
    tag = "" if changes.get("rollout_dtype", "float32") == "float32" else "-bf16"
    tag += "-ref" if changes.get("engine") == "reference" else ""
    return stale_run(profile, objective, staleness, seed, lr=lr, total_updates=updates, experiment="03_fixed_rate",
                     name=f"{objective}-s{staleness}-lr{lr:.3g}{tag}-{profile}-seed{seed}", **changes)


def fixed_rate_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 3: GRPO and M2PO at s in FIXED_RATE_STALENESS at one learning rate, in priority order
    (03_fixed_rate). The ladder's on-policy and s = 192 runs at this rate complete the axis."""
    profile = resolve_profile(profile)
    seeds = DECISIVE_SEEDS[profile]
    extra = FIXED_RATE_EXTRA_SEEDS if profile == "cpu" else {}
    cells = [(8, seeds[:1]), (8, seeds[1:])] + [(s, seeds) for s in FIXED_RATE_STALENESS[1:]] + list(extra.items())
    return [fixed_rate_run(profile, o, s, seed) for s, group in cells for seed in group for o in FIXED_RATE_OBJECTIVES]


def fixed_rate_bf16_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 3: FIXED_RATE_BF16_CELLS with bfloat16 and float32 rollouts on the reference engine. The verdicts' runs
    first, seed by seed (every bfloat16 cell and the float32 on-policy control: rlbook.chapters.rollout_precision),
    then the float32 controls of the stale cells, which only its table shows."""
    profile = resolve_profile(profile)
    cells = [(o, s, dtype) for o, s in FIXED_RATE_BF16_CELLS for dtype in ("bfloat16", "float32")]
    verdicts = [(o, s, dtype) for o, s, dtype in cells if dtype == "bfloat16" or s == 0]
    order = [(seed, cell) for seed in DECISIVE_SEEDS[profile] for cell in verdicts]
    order += [(seed, cell) for seed in DECISIVE_SEEDS[profile] for cell in cells if cell not in verdicts]
    return [fixed_rate_run(profile, o, s, seed, rollout_dtype=dtype, engine="reference")
            for seed, (o, s, dtype) in order]


def fixed_rate_axis(profile: str = "auto") -> list[RunConfig]:
    """Chapter 3's whole axis at the fixed rate: the drift ladder's runs at that rate (on-policy GRPO, and GRPO, M2PO
    and no trust region at the rung's staleness, stored under 02_drift_ladder) and the fixed-rate sweep."""
    profile = resolve_profile(profile)
    lr = FIXED_RATE_LR_FACTOR * BASE[profile]["lr"]
    return [c for c in drift_ladder_sweep(profile) if abs(c.lr - lr) <= 1e-9 * lr] + fixed_rate_sweep(profile)


SWEEPS.update(fixed_rate=fixed_rate_sweep, fixed_rate_bf16=fixed_rate_bf16_sweep, fixed_rate_axis=fixed_rate_axis)


# The long horizon's trust region (chapter 2, issue 40): prosperity compares no trust region with GRPO and M2PO at the
# same staleness, so each cell of 02_collapse_long gets on-policy GRPO, GRPO and M2PO at its staleness, with the same
# rate, horizon, unclipped gradients and fine-tuning. 30 runs (bench/reference_runs.py --sweep collapse_long_trust): the
# set's no-trust-region runs took 383-471 s each on a quiet core, its trust-region runs 20-30 min each on 2 cores shared
# by 3-4 processes.
COLLAPSE_LONG_TRUST = (("grpo", 0), ("grpo", None), ("m2po", None))  # None: the set's staleness


def collapse_long_trust_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 2: the trust-region objectives beside every run of collapse_long_sweep (02_collapse_long)."""
    return [c.replace(objective=o, staleness=c.staleness if s is None else s,
                      name=c.name.replace(f"no_clip-s{c.staleness}", f"{o}-s{c.staleness if s is None else s}"))
            for c in collapse_long_sweep(profile) for o, s in COLLAPSE_LONG_TRUST]


SWEEPS.update(collapse_long_trust=collapse_long_trust_sweep)


# Chapter 7 at the paper's share of the run (issue 40). Our sync intervals of 10 and 100 updates are 2.5% and 25% of
# a 400-update run. The paper's run length (arXiv 2506.21495) is not in any source we could read, so its share rests
# on a stated proxy: a run of 1,000 steps, the length of the one comparable LLM RL run in our notes (M2PO, arXiv
# 2510.01161, 1,000 steps), which puts the paper's s = 100 at 10% of its run (bench/results/pilots/
# semi-online-share.md). The matched interval is that share of the profile's run (cpu: 40 of 400 updates); DPO's
# seeds first (its verdict is the question), then GRPO's.
PAPER_RUN_STEPS_PROXY = 1000
PAPER_SEMI_ONLINE_SYNC = 100
MATCHED_OBJECTIVES = ("dpo", "grpo")  # in training order


def matched_sync_every(profile: str = "auto") -> int:
    """The sync interval that is the paper's s = 100 share of the profile's run (cpu: 40 of 400 updates)."""
    updates = semi_online_run(profile).total_updates
    return max(2, round(updates * PAPER_SEMI_ONLINE_SYNC / PAPER_RUN_STEPS_PROXY))


def semi_online_matched_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 7: DPO, then GRPO, synced at the paper's share of the run (matched_sync_every), every decisive seed."""
    profile = resolve_profile(profile)
    k = matched_sync_every(profile)
    return [semi_online_run(profile, o, k, seed) for o in MATCHED_OBJECTIVES for seed in DECISIVE_SEEDS[profile]]


SWEEPS.update(semi_online_matched=semi_online_matched_sweep)


# Chapter 4 where GRPO learns Knights and Knaves (issue 40). On the 2-3-person puzzles GRPO gains about 0.04: the
# warm start solves 51% of the 2-person puzzles and 3% of the 3-person ones, where 88% of the groups of 8 hold no
# correct answer to learn from (bench/results/pilots/kk-headroom.md). So 2-person puzzles, from a warm start of their
# own by the chapter's rule (stopped at 30% on the validation split). How much GRPO gains there depends on the warm
# start (from 0.112 +- 0.009 to -0.007 over warm starts made by that rule, kk-headroom.md section 4), so the warm
# start and the budget were chosen by pilots read on the validation split, never the evaluation set (section 5): one
# 250-update GRPO pilot per warm-start seed 0-3 (RL seed 5, outside the sweep's seeds) gained +0.060, -0.026, +0.044
# and +0.084 there; on seed 3, 500 updates gained +0.140 and groups of 16 +0.100. The five variants there, 5 seeds,
# seed by seed (04_lopti_kk). The set exists where pilots chose its budget (LOPTI_KK_BUDGET, the cpu profile):
# another profile's sweep is empty (the smoke profile's 2-person puzzles would need a warm start of their own,
# minutes of CI for a code path the mixed set already runs).
LOPTI_KK_PEOPLE = 2
LOPTI_KK_WARM_START_SEED = 3
LOPTI_KK_BUDGET = {"cpu": dict(total_updates=500, lr=5e-4)}


def lopti_kk_run(profile: str = "auto", variant: str = "grpo", seed: int = 0, **changes) -> RunConfig:
    """Chapter 4 on Knights and Knaves of LOPTI_KK_PEOPLE people (04_lopti_kk): lopti_run's settings, the cpu
    profile's budget from the pilots that found GRPO's gain there."""
    profile = resolve_profile(profile)
    config = lopti_run(profile, variant, seed)
    values = {"task_params": {**config.task_params, "num_people": LOPTI_KK_PEOPLE}, **LOPTI_KK_BUDGET.get(profile, {}),
              "warm_start": {**config.warm_start, "seed": LOPTI_KK_WARM_START_SEED}, "experiment": "04_lopti_kk",
              "name": f"{variant}-kk{LOPTI_KK_PEOPLE}-{profile}-seed{seed}"}
    return config.replace(**{**values, **changes})


def lopti_kk_sweep(profile: str = "auto") -> list[RunConfig]:
    """Chapter 4: the five variants on LOPTI_KK_PEOPLE-person puzzles, every decisive seed, seed by seed; empty for a
    profile without a budget in LOPTI_KK_BUDGET."""
    profile = resolve_profile(profile)
    if profile not in LOPTI_KK_BUDGET:
        return []
    return [lopti_kk_run(profile, v, seed) for seed in DECISIVE_SEEDS[profile] for v in LOPTI_VARIANTS]


SWEEPS.update(lopti_kk=lopti_kk_sweep)
SWEEP_PROFILES = {"lopti_kk": tuple(LOPTI_KK_BUDGET)}  # sweeps defined only in some profiles: where, by name
