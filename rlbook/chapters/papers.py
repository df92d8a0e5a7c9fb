"""The numbers the papers report, each with its paper (title, arXiv id) and where in the paper it comes from.

The one place the book writes a number it did not measure: verdict rows quote `Reported.text`, and code that computes
with a paper's numbers reads `Reported.values`. Every number here is the paper's, never one of our runs.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Paper:
    title: str
    arxiv: str | None  # None: a public reference point that is not a paper

    def __str__(self) -> str:
        return f'"{self.title}"' + (f" (arXiv {self.arxiv})" if self.arxiv else "")


@dataclass(frozen=True)
class Reported:
    """One thing a paper reports: its words and numbers as a verdict row quotes them (`text`), where in the paper
    (`where`), and the numbers themselves where code computes with them (`values`)."""
    paper: Paper
    where: str
    text: str
    values: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return self.text


GRPO_WALKTHROUGH = Paper("a public from-scratch reasoning walkthrough (Qwen3-0.6B-Base, GRPO without KL)", None)
M2PO = Paper("Prosperity before Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs?", "2510.01161")
LOPTI = Paper("Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs", "2505.12929")
PMA = Paper("Model Merging in Pre-training of Large Language Models", "2505.12082")
R3 = Paper("Stabilizing MoE Reinforcement Learning by Aligning Training and Inference Routers", "2510.11370")
SEMI_ONLINE = Paper("Bridging Offline and Online Reinforcement Learning for LLMs", "2506.21495")

# Chapter 1: how much GRPO improves a small base model
GRPO_GAIN = Reported(GRPO_WALKTHROUGH, "its MATH-500 evaluation after 50 GRPO steps",
                     "Qwen3-0.6B-Base, GRPO without KL: MATH-500 15.2% -> 47.4% after 50 steps (a public from-scratch "
                     "walkthrough, not a paper: see References)", {"before": 0.152, "after": 0.474})

# Chapters 2 and 3 (M2PO), Qwen3-Base-1.7B unless said otherwise
M2PO_SCORES = Reported(M2PO, "Table 1 (Qwen3-Base-1.7B, 8-benchmark average accuracy, %)",
                       "8-benchmark average GRPO 33.0 (s=0), 30.4 (s=256); GSPO 30.1 (s=256); M2PO 36.6 (s=256)",
                       {"grpo_s0": 33.0, "grpo_s256": 30.4, "gspo_s256": 30.1, "m2po_s256": 36.6})
M2PO_STALENESS_COST = Reported(M2PO, "Table 1", "8-benchmark average 33.0 (s=0) vs 30.4 (s=256)",
                               {k: M2PO_SCORES.values[k] for k in ("grpo_s0", "grpo_s256")})
M2PO_BEATS_STALE_GRPO = Reported(M2PO, "Table 1", "36.6 vs 30.4",
                                 {k: M2PO_SCORES.values[k] for k in ("m2po_s256", "grpo_s256")})
M2PO_MATCHES_ON_POLICY = Reported(M2PO, "Table 1", "36.6 vs 33.0 (on-policy): at least a match, 3.6 points above",
                                  {k: M2PO_SCORES.values[k] for k in ("m2po_s256", "grpo_s0")})
M2PO_PROSPERITY = Reported(M2PO, "Figs. 1-2 (no trust region at s=256)", "rises fast, then collapses")
M2PO_REMOVED_TOKENS = Reported(M2PO, "Fig. 5 (share of response tokens clipped or masked)",
                               "Qwen3-Base-1.7B: GRPO clips 0.07% (s=0), 0.66% (s=256); M2PO masks 0.02% (s=256)",
                               {"grpo_s0": 0.0007, "grpo_s256": 0.0066, "m2po_s256": 0.0002})
M2PO_ENTROPY = Reported(M2PO, "Fig. 4 (token entropy against |r - 1|)",
                        "about 0.2 near r = 1, about 1.0 at |r-1| = 0.7",
                        {"near": 0.2, "far": 1.0, "far_deviation": 0.7})
M2PO_TAU = Reported(M2PO, "Fig. 8 (accuracy against tau)",
                    "accuracy insensitive to tau between about 0.02 and 0.08; very small or very large values hurt",
                    {"flat_from": 0.02, "flat_to": 0.08})

# Chapter 4 (Lopti, Advantage Reweighting): Qwen2.5-3B on Knights and Knaves, average accuracy over 3-7 people
LOPTI_ACCURACY = Reported(LOPTI, "Table 1 (Qwen2.5-3B, K&K average accuracy over 3-7 people)",
                          "GRPO 0.39, +AR 0.53, +Lopti 0.54, both 0.57",
                          {"grpo": 0.39, "ar": 0.53, "lopti": 0.54, "ar+lopti": 0.57})
LOPTI_REVERSED = Reported(LOPTI, "its ablation of the order (eta < 0)", "the reversed order fails")
LOPTI_MATH_AR = Reported(LOPTI, "its math experiments", "math: AR gains about +1 point over GRPO")
LOPTI_MATH_LOPTI = Reported(LOPTI, "its math experiments", "math: Lopti adds nothing")

# Chapter 5 (PMA)
PMA_SCALE = "dense and MoE models from millions to over 100B parameters, WSD schedule, N = 10 by default"
PMA_BEATS_LAST = Reported(PMA, "abstract and its merging experiments in the stable (constant-LR) phase",
                          "merging stable-phase checkpoints (SMA, EMA, WMA) clearly improves on the latest checkpoint "
                          f"({PMA_SCALE})")
PMA_NEARS_ANNEALED = Reported(PMA, "abstract and its comparison of merges with annealed models",
                              f"merged stable-phase checkpoints match or beat the annealed model ({PMA_SCALE})")

# Chapter 6 (R3), Qwen3-30B-A3B
R3_KL = Reported(R3, "Fig. 1 and section 4 (Qwen3-30B-A3B)",
                 "Qwen3-30B-A3B: train-inference KL 1.5e-3 without R3, 7.5e-4 with it",
                 {"without": 1.5e-3, "with": 7.5e-4})
R3_EXTREME_TOKENS = Reported(R3, "Fig. 1", "fewer tokens with max(rho, 1/rho) > 2 with R3")
R3_STABILITY = Reported(R3, "section 4 (training curves and final scores)",
                        "R3 stable and best; GRPO without it collapses; R3 beats GSPO, TIS")

# Chapter 7 (semi-online RL)
SEMI_ONLINE_ORDERING = Reported(SEMI_ONLINE, "abstract and its main results (Llama-3.1-8B-Instruct, math and "
                                "instruction following)",
                                "semi-online DPO and GRPO (sync every 10 or 100 steps) about as good as online; "
                                "offline much worse", {"sync_every": (10, 100)})
