"""Chapter 4 analysis (arXiv 2505.12929, "Do Not Let Low-Probability Tokens Over-Dominate in RL for LLMs").

Accuracy by number of people of trained runs (cached in each run directory) and the paper's per-token analysis on
one rollout batch (section 3). The figures and the closing "paper vs. us" table are in `lopti_figures`.
"""
from __future__ import annotations

import json
import statistics
from collections import defaultdict

import torch

from .. import stats
from ..checkpoint import location, read_weights
from ..advantages import group_advantages
from ..config import RunConfig
from ..evaluate import accuracy, evaluation_problems
from ..experiments import (ARITHMETIC_AR_ALPHA, LOPTI_VARIANTS, lopti_arithmetic_run, lopti_arithmetic_sweep,
                           lopti_kk_run, lopti_kk_sweep, lopti_run, lopti_sweep)
from ..objectives import advantage_reweight, policy_loss
from ..profiles import resolve_profile
from ..rollout import rollout
from ..runs import write_json
from ..tasks import make_task
from ..losspath import response_logits, token_logprobs
from ..trainer import init_policy, run_completion_budget
from . import mechanism

CACHE = "accuracy_by_people.json"
ANALYSIS_SEED = 777_000  # puzzles of the per-token analysis: apart from training (>= 1e6) and evaluation streams


# The chapter's settings: Knights and Knaves of 2-3 people (the first runs), of 2 people (where GRPO gains about 0.1,
# experiments.lopti_kk_sweep) and arithmetic. {setting: (sweep, run)}.
SETTINGS = {"knights_knaves": (lopti_sweep, lopti_run), "knights_knaves_2people": (lopti_kk_sweep, lopti_kk_run),
            "arithmetic": (lopti_arithmetic_sweep, lopti_arithmetic_run)}


def sweep_configs(profile: str = "auto", seeds=None, total_updates=None,
                  setting: str = "knights_knaves") -> list[RunConfig]:
    """The chapter's sweep of a setting (SETTINGS), optionally with other seeds or a shorter budget; empty where the
    profile does not define the setting (experiments.lopti_kk_sweep)."""
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r} for chapter 4; choose one of: {', '.join(SETTINGS)}")
    profile = resolve_profile(profile)
    make_sweep, make_run = SETTINGS[setting]
    configs = make_sweep(profile)
    if seeds is not None and configs:
        configs = [make_run(profile, v, s) for v in LOPTI_VARIANTS for s in seeds]
    return [c if total_updates is None else c.replace(total_updates=total_updates) for c in configs]


def variant_of(config: RunConfig) -> str:
    """The LOPTI_VARIANTS name of a config's (ar_alpha, lopti_eta), else a description. On arithmetic AR's alpha is
    the paper's value for math (`experiments.ARITHMETIC_AR_ALPHA`)."""
    names = {values: name for name, values in LOPTI_VARIANTS.items()}
    if config.task == "arithmetic":
        names = {(ARITHMETIC_AR_ALPHA if alpha else 0.0, eta): name for (alpha, eta), name in names.items()}
    return names.get((config.ar_alpha, config.lopti_eta), f"alpha={config.ar_alpha}, eta={config.lopti_eta}")


# ---- accuracy by number of people ----

def load_trained_policy(run):
    """The run's final policy: its config's starting policy plus the trainable (LoRA) weights of its checkpoint."""
    model, tokenizer = init_policy(run.config, run.store, progress=False)
    result = model.load_state_dict(read_weights(run.path), strict=False)  # the frozen base weights are not stored
    if result.unexpected_keys:
        raise ValueError(f"{location(run.path)} has weights this model lacks: {result.unexpected_keys[:3]}")
    return model, tokenizer


def accuracy_by_people(model, tokenizer, task, problems, max_new_tokens: int) -> dict[int, float]:
    """Greedy accuracy per puzzle size, {num_people: accuracy} (arXiv 2505.12929 Table 1 reports K&K this way)."""
    groups = defaultdict(list)
    for problem in problems:
        groups[problem["num_people"]].append(problem)
    return {n: accuracy(model, tokenizer, task, groups[n], max_new_tokens) for n in sorted(groups)}


def _people(config: RunConfig, model, tokenizer) -> dict[int, float]:
    task = make_task(config.task, **config.task_params)
    problems = evaluation_problems(config.task, config.task_params, config.eval_size)
    budget = run_completion_budget(config, task, tokenizer)
    return accuracy_by_people(model, tokenizer, task, problems, budget)


def start_accuracy_by_people(config: RunConfig) -> dict[int, float]:
    """Accuracy by number of people of the starting (warm-started) policy, on the config's evaluation set."""
    return _people(config, *init_policy(config, progress=False))


def run_accuracy_by_people(run, compute: bool = True) -> dict:
    """{"by_people": {n: acc} or None, "overall", "source", "note"}, cached as JSON in the run directory (a
    reference run's cache is written when it is shipped, bench/reference_runs.py). A run without state.pt (made by
    older code), or without a cache when `compute` is False (the book replays, and evaluating every run would take
    minutes), falls back to its final overall accuracy."""
    path, updates = run.path / CACHE, run.meta.get("updates")
    if path.exists() and json.loads(path.read_text()).get("updates") == updates:
        cached = json.loads(path.read_text())
        return {**cached, "by_people": {int(n): a for n, a in cached["by_people"].items()}}
    greedy = run.series("eval_greedy_acc")[1]
    overall = greedy[-1] if greedy else float("nan")
    if location(run.path) is None:
        return {"by_people": None, "overall": overall, "source": "metrics",
                "note": "no state.pt (a reference run): final overall accuracy only"}
    if not compute:
        return {"by_people": None, "overall": overall, "source": "metrics",
                "note": f"no {CACHE} (not evaluated by puzzle size yet): final overall accuracy only"}
    result = {"by_people": _people(run.config, *load_trained_policy(run)), "overall": overall, "source": "state.pt",
              "note": f"{run.config.eval_size} evaluation puzzles, greedy", "updates": updates}
    write_json(path, result)
    return result


# ---- the per-token analysis (arXiv 2505.12929, section 3) ----

def token_gradient_norms(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """||d log p(o) / d logits|| = ||onehot(o) - softmax|| = sqrt((1 - p_o)^2 + sum_{v != o} p_v^2), per token."""
    # arXiv 2505.12929 section 3: between (1 - p_o) and sqrt(2) (1 - p_o): low-probability tokens pull hardest
    others = torch.softmax(logits.double(), dim=-1).scatter(-1, ids[..., None], 0.0)  # 1 - p_o = sum of the others
    return torch.sqrt(others.sum(-1).square() + others.square().sum(-1)).float()  # no cancellation when p_o ~ 1


def analysis_batch(config: RunConfig, seed: int = 0, prompts: int = 16):
    """(starting policy of `config`, one rollout batch of it, per-token group advantages [B, T])."""
    torch.manual_seed(seed)
    model, tokenizer = init_policy(config, progress=False)
    task = make_task(config.task, **config.task_params)
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    batch = rollout(model, tokenizer, task, task.generate(prompts, seed=ANALYSIS_SEED + seed), config.group_size,
                    run_completion_budget(config, task, tokenizer), config.temperature, generator, 0)
    advantages = group_advantages(batch.rewards, config.group_size, config.normalize_adv_std)
    return model, batch, advantages[:, None] * batch.response_mask


def gradient_share(model, batch, advantages, temperature: float = 1.0, eta: float = 0.5) -> dict:
    """Share of the GRPO gradient from tokens with p_old < eta: at the logits (exact per-token norms |A_t| ||onehot -
    softmax||) and at the trainable weights (autograd of the loss restricted to low- vs to high-p tokens)."""
    # arXiv 2505.12929 section 3: a few low-probability tokens carry most of the gradient
    mask, resp = batch.response_mask, batch.response_mask != 0
    low = resp & (torch.exp(batch.behavior_logp) < eta)
    logits = response_logits(model, batch, temperature)
    raw = token_gradient_norms(logits.detach(), batch.response_ids)
    weighted = raw * advantages.abs()  # token t's gradient at its logits, times the number of tokens
    logp = torch.log_softmax(logits.float(), -1).gather(-1, batch.response_ids[..., None])[..., 0]
    params = [p for p in model.parameters() if p.requires_grad]
    g_low, g_high = (torch.cat([g.flatten() for g in torch.autograd.grad(policy_loss(
        "grpo", logp, batch.behavior_logp, advantages * sel.float(), mask)[0], params, retain_graph=True)])
        for sel in (low, resp & ~low))
    return {"token_share_low": (low.sum() / resp.sum()).item(),
            "logit_grad_share_low": (weighted[low].sum() / weighted[resp].sum()).item(),
            "mean_norm_low": raw[low].mean().item(), "mean_norm_high": raw[resp & ~low].mean().item(),
            "param_grad_norm_low": g_low.norm().item(), "param_grad_norm_high": g_high.norm().item(),
            "param_grad_share_low": (g_low.norm() / (g_low.norm() + g_high.norm())).item(),
            "param_grad_cosine": torch.nn.functional.cosine_similarity(g_low, g_high, dim=0).item()}


def net_advantages(batch, advantages):
    """(summed advantage of all occurrences of each token's (prompt, response prefix, token), mask of the first
    occurrence). Identical tokens in one context cannot move two ways: their net advantage is what the gradient sees."""
    keys, net = [], defaultdict(float)
    for b in range(len(batch)):
        prompt, ids = tuple(batch.prompt_ids[b][batch.prompt_mask[b] != 0].tolist()), batch.response_ids[b].tolist()
        keys.append([(prompt, tuple(ids[:t + 1])) for t in range(int(batch.response_mask[b].sum()))])
        for t, key in enumerate(keys[-1]):
            net[key] += advantages[b, t].item()
    out, first, seen = torch.zeros_like(advantages), torch.zeros_like(advantages, dtype=torch.bool), set()
    for b, row in enumerate(keys):
        for t, key in enumerate(row):
            out[b, t], first[b, t] = net[key], key not in seen
            seen.add(key)
    return out, first


def wrong_direction(old_logp, new_logp, advantages, select) -> float:
    """Fraction of the selected tokens with A != 0 whose log-prob moved against the sign of A (nan if none)."""
    # arXiv 2505.12929 section 3: high-p tokens move as the low-p tokens' gradient drives them, not by their own A
    chosen = select.bool() & (advantages != 0)
    moved = new_logp - old_logp
    wrong = chosen & (((advantages > 0) & (moved < 0)) | ((advantages < 0) & (moved > 0)))
    return (wrong.sum() / chosen.sum()).item() if chosen.any() else float("nan")


@torch.no_grad()
def _logp64(model, batch, temperature):
    """Chosen-token log-probs in float64: a small step changes log p of p ~ 1 tokens below float32's resolution."""
    logits = response_logits(model, batch, temperature).double()
    return logits.log_softmax(-1).gather(-1, batch.response_ids[..., None])[..., 0]


def one_update_effects(model, batch, advantages, config: RunConfig, eta: float = 0.5, alpha: float = 0.3,
                       step: float = 0.03) -> dict:
    """One GRPO gradient step of fixed length `step` (L2, trainable weights) from low-p tokens only, all tokens,
    high-p tokens only, or all tokens with AR. Per step, over distinct tokens: the share moving against their net
    advantage (high-p, low-p) and the share of high-p tokens moving the same way as under the low-p-only step.
    A plain step keeps the gradient's direction (a fresh Adam step is sign(g)); the weights are restored."""
    # arXiv 2505.12929 section 3: does the full update move high-p tokens as the low-p tokens alone would?
    params = [p for p in model.parameters() if p.requires_grad]
    start, mask, blogp = [p.detach().clone() for p in params], batch.response_mask, batch.behavior_logp
    old, (net, first) = _logp64(model, batch, config.temperature), net_advantages(batch, advantages)
    low = (torch.exp(blogp) < eta) & (mask != 0)
    high = (mask != 0) & ~low
    modes = {"low-p only": (low, 0.0), "all tokens": (mask, 0.0), "high-p only": (high, 0.0),
             f"all + AR ({alpha})": (mask, alpha)}
    logp = token_logprobs(model, batch, config.temperature)[0]  # one graph at the start weights serves every step
    grads = {name: torch.autograd.grad(policy_loss("grpo", logp, blogp, select.float() * (
        advantage_reweight(advantages, blogp, a) if a else advantages), mask)[0], params, retain_graph=True)
        for name, (select, a) in modes.items()}
    results, moved_low = {}, None
    for name, grad in grads.items():
        norm = torch.sqrt(sum(g.square().sum() for g in grad)).clamp(min=1e-30)
        with torch.no_grad():
            for p, g in zip(params, grad):
                p.sub_(step * g / norm)
            new = _logp64(model, batch, config.temperature)
            moved_low = new - old if moved_low is None else moved_low
            same = ((new - old) * moved_low)[high & first] > 0
            results[name] = {"wrong_high": wrong_direction(old, new, net, high & first),
                             "wrong_low": wrong_direction(old, new, net, low & first),
                             "same_as_low_only_high": same.double().mean().item()}
            for p, value in zip(params, start):
                p.copy_(value)
    return results


def per_token_analysis(config: RunConfig, seed: int = 0, prompts: int = 16, eta: float = 0.5) -> dict:
    """Both analyses on one rollout batch of the starting (warm-started) policy; the same numbers for a seed."""
    model, batch, advantages = analysis_batch(config, seed, prompts)
    return {"gradient": gradient_share(model, batch, advantages, config.temperature, eta),
            "update": one_update_effects(model, batch, advantages, config, eta),
            "tokens": int(batch.response_mask.sum()), "reward": batch.rewards.mean().item(), "eta": eta}


# The test of chapter 4's explanation of Lopti's cost on arithmetic: AdamW moves the weights by about the learning
# rate a step whatever the gradient's size, so Lopti's two steps a batch move them about twice as far as GRPO's one.
# At half the rate (experiments.lopti_half_rate_sweep) Lopti's two steps move them about as far as GRPO's one; where
# that is the cause, Lopti's score rises from its value at the full rate to GRPO's. GRPO at half the rate is the
# control: the lower rate must help Lopti more than it helps GRPO (their rises' difference beyond 2 s.e.), or the
# test cannot tell the second step from the rate itself.
SECOND_STEP_CONCLUSIONS = {
    mechanism.SUPPORTED: "supports it: at half the rate Lopti no longer falls behind GRPO, and the lower rate helps "
                         "Lopti more than it helps GRPO",
    mechanism.PARTLY: "supports it in part: at half the rate Lopti scores above its full-rate runs, but still below "
                      "GRPO",
    mechanism.NOT_SUPPORTED: "does not support it: at half the rate Lopti scores no better and still below GRPO, so "
                             "its cost lies elsewhere",
    mechanism.UNDECIDED: "cannot decide it at this noise"}
CONFOUNDED = "cannot separate it from the rate itself: the lower rate helps GRPO about as much as Lopti"


def low_probability_share(runs, part: float = 0.1) -> tuple[float, float] | None:
    """How many sampled tokens AR and Lopti act on: `low_prob_frac` (the share of response tokens sampled with
    p_old < 0.5, Lopti's first stage and AR's strongest scaling), averaged over each run's first and last `part` of
    its logged updates, then over the runs: (start, end), or None without runs that logged it."""
    shares = []
    for run in runs:
        _, values = run.series("low_prob_frac")
        if values:
            k = max(1, int(len(values) * part))
            shares.append((statistics.fmean(values[:k]), statistics.fmean(values[-k:])))
    if not shares:
        return None
    return statistics.fmean(s for s, _ in shares), statistics.fmean(e for _, e in shares)


def second_step_texts(grpo, lopti, lopti_half_rate, grpo_half_rate) -> dict[str, str]:
    """What chapter 4's prose quotes of the test (glued as second_step_<name>), each difference with its reading:
    Lopti at half the rate minus Lopti at the full rate (moved) and minus GRPO at the full rate (apart), GRPO at half
    the rate minus GRPO (control), Lopti's rise minus GRPO's (rise_gap); and the conclusion (CONFOUNDED where Lopti
    rose but not beyond 2 s.e. more than GRPO did)."""
    test = mechanism.mechanism_test(lopti_half_rate, lopti, grpo, stats.score, +1,
                                    whose=("Lopti's at the full rate", "GRPO's"))
    control = (mechanism.seed_difference(grpo_half_rate, grpo, stats.score)
               if test is not None and len(grpo_half_rate) >= stats.MIN_SEEDS else None)
    rise_gap = None if control is None else test.moved - control
    if test is None:
        conclusion = mechanism.NO_TEST
    elif test.outcome in (mechanism.SUPPORTED, mechanism.PARTLY) and (
            rise_gap is None or stats.verdict(rise_gap, +1) != stats.REPRODUCED):
        conclusion = CONFOUNDED
    else:
        conclusion = SECOND_STEP_CONCLUSIONS[test.outcome]

    def text(d):
        return "–" if d is None else str(d)
    return {**mechanism.texts(test), "control": text(control), "rise_gap": text(rise_gap),
            "control_reading": mechanism.FEW_SEEDS if control is None else
            mechanism.reading(control, "GRPO's at the full rate"),
            "rise_gap_reading": mechanism.FEW_SEEDS if rise_gap is None else mechanism.reading(rise_gap, "zero"),
            "conclusion": conclusion}
