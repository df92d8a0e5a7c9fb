"""Policy objectives: one short function per paper equation, plus the AR and Lopti helpers.

M2PO's mask is written twice: `m2po_algorithm1`, the loop of the paper's Algorithm 1, and `_m2po_keep`, the same
mask in one sort, which the objective runs. Input checks are rlbook.objective_inputs.

Tensors are [B, T]: `logp` = log pi_theta of the chosen tokens (with grad), `blogp` = behavior log-prob recorded
at sampling, `advantages` broadcast per token, `mask` = 1 on response tokens; log r = logp - blogp.
`policy_loss(name, ...)` checks its inputs, zeroes every padding position (so garbage or -inf there never reaches
the loss or its gradient), runs the named objective and returns `(loss, flags)`: `flags` holds detached bool
[B, T] tensors "clipped_low", "clipped_high", "masked" (False on padding and where an objective has no such
notion) and possibly detached float scalars: "dual_clip_frac" (grpo with dual_clip: fraction of response tokens
with A<0 and r > dual_clip) and "m2po_cap_c" (m2po_cap: the cap c on |log r|, inf when no cap is needed).
"""
import inspect
import math

import torch

from .objective_inputs import PARAM_RULES, check_number, check_params, check_same_shape, keyword_params, prepare

FLAG_KEYS = ("clipped_low", "clipped_high", "masked")
AR_ALPHA = (lambda v: 0 <= v <= 1, "in [0, 1]")  # Advantage Reweighting's alpha: (valid, what valid is)
LOPTI_ETA = (lambda v: -1 < v < 1, "in (-1, 1)")  # Lopti's eta


def _token_mean(values, resp):
    return (values * resp).sum() / resp.sum()


def _clipped_surrogate(ratio, adv, low, high):
    """min(r A, clip(r, low, high) A) and, per side, where the clip branch is the active minimum."""
    term = torch.minimum(ratio * adv, torch.clamp(ratio, low, high) * adv)
    return term, {"clipped_low": (adv < 0) & (ratio < low), "clipped_high": (adv > 0) & (ratio > high)}


def trust_region(log_ratio, adv, resp):
    """Tokens whose update moves the ratio further in the advantage's direction: (A>0 & r>1) | (A<0 & r<1)."""
    return resp & (((adv > 0) & (log_ratio > 0)) | ((adv < 0) & (log_ratio < 0)))


def grpo(logp, blogp, advantages, resp, *, eps_low=0.2, eps_high=0.2, dual_clip=None):
    # PPO clipped surrogate (arXiv 1707.06347, Eq. 7), token mean; dual clip for A<0 (arXiv 1912.09729, Eq. 5)
    ratio = torch.exp(logp - blogp)
    term, flags = _clipped_surrogate(ratio, advantages, 1 - eps_low, 1 + eps_high)
    if dual_clip is not None:
        term = torch.where(advantages < 0, torch.maximum(term, dual_clip * advantages), term)
        flags["dual_clip_frac"] = ((advantages < 0) & (ratio > dual_clip) & resp).sum() / resp.sum()
    return -_token_mean(term, resp), flags


def no_clip(logp, blogp, advantages, resp):
    # The same surrogate without a trust region (eps = infinity)
    return -_token_mean(torch.exp(logp - blogp) * advantages, resp), {}


def m2po(logp, blogp, advantages, resp, *, tau=0.04):
    """M2PO with the mask of Algorithm 1, computed over the whole batch passed in (the trainer passes one
    update's mini-batch; the authors' released code works per micro-batch). Masked tokens stay in the
    denominator; no eps clip."""
    # M2PO (arXiv 2510.01161) Algorithm 1: L = -sum(M r A) / (number of response tokens)
    log_ratio = logp - blogp
    keep = _m2po_keep(log_ratio.detach(), advantages, resp, tau)
    return -_token_mean(keep * torch.exp(log_ratio) * advantages, resp), {"masked": ~keep}


@torch.no_grad()
def m2po_algorithm1(log_ratio, advantages, resp, tau):
    """M2PO's mask M as Algorithm 1 writes it: the candidates are the trust-region tokens; while the second moment
    M2 = mean (log r)^2 of the candidates still kept exceeds tau, mask the kept one with the largest (log r)^2.
    Returns the keep mask [B, T] (False on the masked tokens). One token per pass: m2po uses `_m2po_keep`, the same
    mask from one sort (tests/test_objectives.py holds the two equal)."""
    sq, kept = log_ratio.double().square().flatten(), trust_region(log_ratio, advantages, resp).flatten()
    masked = torch.zeros_like(kept)
    while kept.any() and sq[kept].mean() > tau:
        largest = torch.where(kept, sq, -1.0).argmax()  # the first, among equal ones
        kept[largest], masked[largest] = False, True
    return ~masked.view_as(resp)


def m2po_cap(logp, blogp, advantages, resp, *, tau=0.04):
    """The rule of the authors' released code (Infini-AI-Lab/M2PO, verl fork), not Algorithm 1: instead of
    masking the largest-(log r)^2 tokens it caps |log r| of every trust-region token at one c and PPO-clips
    at exp(-c), exp(c), so the tokens beyond the cap keep their value but lose their gradient. Here c is the
    exact largest cap meeting the budget over the whole batch; the released code works per micro-batch,
    rounds c down to a data point, and by its function's defaults never clips tighter than [0.7, 1.5]."""
    # Infini-AI-Lab/M2PO core_algos: c = max{c : sum min(d^2, c^2) / n_TR <= tau}, then clip(r, e^-c, e^c)
    log_ratio = logp - blogp
    cap = _m2po_cap(log_ratio.detach(), advantages, resp, tau).to(logp.dtype)
    term, flags = _clipped_surrogate(torch.exp(log_ratio), advantages, torch.exp(-cap), torch.exp(cap))
    flags["m2po_cap_c"] = cap
    return -_token_mean(term, resp), flags


def m2po_areal(logp, blogp, advantages, resp, *, prox_logp, tau=0.04, eps_low=0.2, eps_high=0.2,
               masked_in_denominator=False):
    """AReaL's M2PO (inclusionAI/AReaL, areal/trainer/ppo/actor.py `_apply_m2po_masking`, PR 480), not Algorithm
    1: the drift is measured between the behaviour policy and the proximal one (the policy at the start of the
    step); every response token is a candidate, not only the trust-region tokens; the largest (log r)^2 are
    masked until the mean of the rest is below tau, keeping at least one token; masked tokens leave the loss and
    its denominator; the kept tokens get AReaL's decoupled PPO loss (eps clip on pi / pi_prox).
    `masked_in_denominator=True` is not AReaL's: the masked tokens stay in the denominator, as in Algorithm 1 (the
    loss is AReaL's times n_kept / n_response), to test whether the denominator is what sets the two apart."""
    # keep = M2 mask of d = prox_logp - blogp over all tokens;
    # L = -sum_kept (pi_prox / pi_behav) min(u A, clip(u) A) / n_kept   (n_response with masked_in_denominator)
    keep = _m2po_areal_keep(prox_logp - blogp, resp, tau)
    term, flags = _clipped_surrogate(torch.exp(logp - prox_logp), advantages, 1 - eps_low, 1 + eps_high)
    kept_term = torch.exp(prox_logp - blogp) * term
    loss = -(_token_mean(keep * kept_term, resp) if masked_in_denominator else _token_mean(kept_term, keep))
    return loss, {"clipped_low": flags["clipped_low"] & keep, "clipped_high": flags["clipped_high"] & keep,
                  "masked": resp & ~keep}


@torch.no_grad()
def m2po_variant_removals(log_ratio, advantages, resp, tau=0.04):
    """The tokens each M2PO variant would take out of this batch's gradient, as bool [B, T]: m2po (Algorithm 1's
    mask), m2po_cap (the released code's cap: the clip branch active at exp(-c), exp(c)), m2po_areal (AReaL's
    mask). log_ratio is log pi - log pi_behav; AReaL measures it against the proximal policy, which is the current
    one at a step's first update, so there the three act on the same numbers."""
    cap = _m2po_cap(log_ratio, advantages, resp, tau)
    _, capped = _clipped_surrogate(torch.exp(log_ratio), advantages, torch.exp(-cap), torch.exp(cap))
    return {"m2po": resp & ~_m2po_keep(log_ratio, advantages, resp, tau),
            "m2po_cap": resp & (capped["clipped_low"] | capped["clipped_high"]),
            "m2po_areal": resp & ~_m2po_areal_keep(log_ratio, resp, tau)}


def tis(logp, blogp, advantages, resp, *, prox_logp, eps_low=0.2, eps_high=0.2, tis_cap=2.0):
    # Truncated importance sampling (Yao et al. 2025, a blog post): w = min(pi_prox / pi_behav, C), detached
    weight = torch.exp(prox_logp - blogp).clamp(max=tis_cap)
    return _weighted_prox_surrogate(logp, prox_logp, advantages, resp, weight, eps_low, eps_high)


def decoupled(logp, blogp, advantages, resp, *, prox_logp, eps_low=0.2, eps_high=0.2):
    # AReaL decoupled PPO (arXiv 2505.24298): (pi_prox / pi_behav) * min(u A, clip(u) A), u = pi / pi_prox
    weight = torch.exp(prox_logp - blogp)
    return _weighted_prox_surrogate(logp, prox_logp, advantages, resp, weight, eps_low, eps_high)


def _weighted_prox_surrogate(logp, prox_logp, advantages, resp, weight, eps_low, eps_high):
    term, flags = _clipped_surrogate(torch.exp(logp - prox_logp), advantages, 1 - eps_low, 1 + eps_high)
    return -_token_mean(weight.detach() * term, resp), flags


def gspo(logp, blogp, advantages, resp, *, eps_low=3e-4, eps_high=4e-4):
    # GSPO (arXiv 2507.18071, eps of section 5.1): s_i = exp(mean_t log r), L = -mean_i min(s_i A_i, clip(s_i) A_i)
    lengths = resp.sum(dim=1)
    seq_ratio = torch.exp((logp - blogp).sum(dim=1) / lengths.clamp(min=1))
    seq_adv = advantages.sum(dim=1) / lengths.clamp(min=1)
    term, seq_flags = _clipped_surrogate(seq_ratio, seq_adv, 1 - eps_low, 1 + eps_high)
    has_tokens = lengths > 0
    loss = -(term * has_tokens).sum() / has_tokens.sum()
    return loss, {key: flag[:, None].expand_as(resp) for key, flag in seq_flags.items()}


OBJECTIVES = {f.__name__: f for f in (grpo, no_clip, m2po, m2po_cap, m2po_areal, tis, decoupled, gspo)}


def needs_proximal(name):
    """Whether objective `name` takes prox_logp, the log-probs under the policy at the start of the step (False for a
    loss that is not one of OBJECTIVES, such as dpo)."""
    return name in OBJECTIVES and any(p.name == "prox_logp" for p in keyword_params(OBJECTIVES[name]))


@torch.no_grad()
def _m2po_keep(log_ratio, advantages, resp, tau):
    """m2po_algorithm1 in one pass: sort the candidates by (log r)^2 descending (stable: among equal ones the first
    comes first, as argmax picks) and mask the top k, for the smallest k after which the mean over the remaining
    candidates is <= tau."""
    candidate = trust_region(log_ratio, advantages, resp).flatten()
    sq = log_ratio.double().square().flatten()
    order = torch.argsort(torch.where(candidate, sq, -1.0), descending=True, stable=True)  # candidates first
    cand_sorted = candidate[order]
    rest_sum = torch.where(cand_sorted, sq[order], 0.0).flip(0).cumsum(0).flip(0)
    rest_count = cand_sorted.flip(0).cumsum(0).flip(0)
    within = rest_sum / rest_count.clamp(min=1) <= tau  # mean of the candidates kept after dropping k
    n_drop = torch.argmax(torch.cat([within, within.new_ones(1)]).int())  # first k that satisfies it
    drop_sorted = torch.arange(order.numel(), device=order.device) < n_drop  # only candidates come first
    return ~torch.empty_like(candidate).scatter_(0, order, drop_sorted).view_as(resp)


@torch.no_grad()
def _m2po_areal_keep(log_ratio, resp, tau):
    """AReaL's mask: every response token a candidate, sorted by (log r)^2 descending; drop the top k for the
    smallest k after which the mean of the rest is strictly below tau (none: keep only the smallest one)."""
    sq = torch.where(resp, log_ratio.double().square(), -1.0).flatten()  # padding sorts last
    order = torch.argsort(sq, descending=True, stable=True)
    n = int(resp.sum())
    rest_mean = sq[order][:n].flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, device=sq.device)
    below = rest_mean < tau
    n_drop = int(torch.argmax(below.int())) if bool(below.any()) else n - 1
    keep = torch.zeros_like(sq, dtype=torch.bool)
    keep[order[n_drop:n]] = True
    return keep.view_as(resp)


@torch.no_grad()
def _m2po_cap(log_ratio, advantages, resp, tau):
    """Largest c >= 0 with sum over trust-region tokens of min(d^2, c^2) <= tau * n_TR (inf: no cap needed)."""
    candidate = trust_region(log_ratio, advantages, resp).flatten()
    sq = torch.where(candidate, log_ratio.double().square().flatten(), math.inf).sort().values  # ascending
    n_tr = candidate.sum()
    budget = tau * n_tr.double()  # in float64, like the squares (tau * an integer tensor would be float32)
    position = torch.arange(sq.numel(), device=sq.device)
    finite_sq = torch.where(position < n_tr, sq, 0.0)
    below = finite_sq.cumsum(0) - finite_sq  # sum of the values before each position
    capped_sum = torch.where(position < n_tr, below + (n_tr - position) * sq, math.inf)  # with c^2 = sq[k]
    n_uncapped = (capped_sum <= budget).sum()
    at = n_uncapped.clamp(max=sq.numel() - 1)
    c_squared = (budget - below[at]) / (n_tr - n_uncapped).clamp(min=1)
    return torch.where(n_uncapped >= n_tr, math.inf, c_squared.clamp(min=0).sqrt())


def m2po_keep_mask(log_ratio, advantages, mask, tau=0.04):
    """M2PO Algorithm 1 mask over the whole batch: False on the dropped tokens (the largest-(log r)^2
    trust-region candidates), True on kept candidates, non-candidates and padding."""
    check_number("tau", tau, *PARAM_RULES["tau"])
    resp, clean = prepare({"log_ratio": log_ratio, "advantages": advantages}, mask)
    return _m2po_keep(clean["log_ratio"], clean["advantages"], resp, tau)


def advantage_reweight(advantages, old_logp, alpha):
    """Advantage Reweighting (arXiv 2505.12929): A_t = (alpha * p_old(o_t) + 1 - alpha) * A, p_old detached.
    alpha = 0 returns the advantages unchanged. old_logp must be finite wherever advantages are (any finite
    value on padding)."""
    check_number("alpha", alpha, *AR_ALPHA)
    check_same_shape({"advantages": advantages, "old_logp": old_logp})
    prob = torch.exp(old_logp.detach())
    if not bool(torch.isfinite(prob).all()):
        raise ValueError("advantage_reweight: old_logp has NaN or overflowing values")
    return (alpha * prob + (1 - alpha)) * advantages


def lopti_low_mask(old_logp, eta):
    """Lopti (arXiv 2505.12929): True where p_old = exp(old_logp) < eta (literal: a negative eta selects nothing)."""
    check_number("eta", eta, *LOPTI_ETA)
    return torch.exp(old_logp) < eta


def lopti_stages(old_logp, eta, mask):
    """Lopti's two stages as float token masks [B, T], in update order.

    eta > 0: [p_old < eta, p_old >= eta] (low-probability tokens first); eta < 0: the reversed order with
    threshold |eta| (the ablation that fails); eta = 0: the first stage selects nothing. The trainer runs one
    optimizer update per stage with the advantages multiplied by the stage mask, does NOT recompute blogp
    between the stages (stage 2's ratio carries stage 1's drift), and passes the full response mask, so the
    token-mean denominator still counts every response token.
    """
    check_number("eta", eta, *LOPTI_ETA)
    resp, clean = prepare({"old_logp": old_logp}, mask)
    low = lopti_low_mask(clean["old_logp"], abs(eta)) & resp
    stages = [low, resp & ~low] if eta >= 0 else [resp & ~low, low]
    return [stage.to(old_logp.dtype) for stage in stages]


def objective_defaults(name):
    """The tunable parameters of objective `name` with their defaults (prox_logp, a tensor, is not one)."""
    return {p.name: p.default for p in keyword_params(_lookup(name)) if p.default is not inspect.Parameter.empty}


def policy_loss(name, logp, blogp, advantages, mask, **params):
    """Loss (scalar, differentiable w.r.t. logp) and flags of objective `name`; see the module docstring."""
    objective = _lookup(name)
    check_params(name, objective, params)
    tensors = {"logp": logp, "blogp": blogp, "advantages": advantages}
    if "prox_logp" in params:
        tensors["prox_logp"] = params.pop("prox_logp")
    resp, clean = prepare(tensors, mask)
    logp = clean.pop("logp")
    blogp, advantages = clean.pop("blogp").detach(), clean.pop("advantages").detach()
    prox = {key: value.detach() for key, value in clean.items()}
    loss, flags = objective(logp, blogp, advantages, resp, **prox, **params)
    for key in FLAG_KEYS:
        flags.setdefault(key, torch.zeros_like(resp))
    return loss, {key: (flag & resp if flag.dtype == torch.bool else flag).detach() for key, flag in flags.items()}


def _lookup(name):
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; valid objectives: {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name]


def check_objective_params(name, params):
    """Validate an objective's name and hyper-parameters (not the per-token tensors such as prox_logp)."""
    objective = _lookup(name)
    tensors = {p.name for p in keyword_params(objective) if p.default is inspect.Parameter.empty}
    check_params(name, objective, {**{k: None for k in tensors}, **params})
