"""Policy objectives: hand-computed losses and gradients, M2PO mask properties, AR / Lopti, input errors."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlbook.objectives import (OBJECTIVES, advantage_reweight, lopti_low_mask, lopti_stages, m2po_algorithm1,
                               m2po_keep_mask, needs_proximal, objective_defaults, policy_loss)

F64 = torch.float64
E = math.exp


def tokens(log_ratio, advantages, mask=None):
    """[B, T] float64 inputs with the given log r; blogp is arbitrary (log r is what matters)."""
    log_ratio = torch.tensor(log_ratio, dtype=F64)
    blogp = -0.7 - torch.arange(log_ratio.numel(), dtype=F64).view_as(log_ratio) / 10
    mask = torch.ones_like(log_ratio) if mask is None else torch.tensor(mask, dtype=F64)
    logp = (blogp + log_ratio).requires_grad_()
    return logp, blogp, torch.tensor(advantages, dtype=F64), mask


def loss_and_grad(name, logp, blogp, advantages, mask, **params):
    loss, flags = policy_loss(name, logp, blogp, advantages, mask, **params)
    loss.backward()
    return loss.item(), logp.grad, flags


def assert_grad(grad, expected):
    torch.testing.assert_close(grad, torch.tensor(expected, dtype=F64), rtol=1e-9, atol=1e-12)


def assert_flag(flags, key, expected):
    assert flags[key].dtype == torch.bool and not flags[key].requires_grad
    assert flags[key].tolist() == expected


# ---- hand-computed examples: d(r A)/d logp = r A on an unclipped token, 0 on a clipped one ----

def test_grpo_by_hand_with_garbage_on_padding():
    r = [[1.5, 0.5, 1.1], [0.5, 1.0, 1.0]]
    logp, blogp, adv, mask = tokens([[math.log(x) for x in row] for row in r],
                                    [[1.0, -1.0, 2.0], [1.0, 5.0, 5.0]], [[1, 1, 1], [1, 0, 0]])
    blogp[1, 1], blogp[1, 2] = -math.inf, math.nan  # padding must never leak into the loss or gradient
    loss, grad, flags = loss_and_grad("grpo", logp, blogp, adv, mask)
    # terms: 1.5 clipped to 1.2 (A>0); 0.5 clipped to 0.8 -> -0.8 (A<0); 1.1 * 2 = 2.2; 0.5 (A>0, r<1: no clip)
    assert loss == pytest.approx(-(1.2 - 0.8 + 2.2 + 0.5) / 4)
    assert_grad(grad, [[0.0, 0.0, -2.2 / 4], [-0.5 / 4, 0.0, 0.0]])
    assert_flag(flags, "clipped_high", [[True, False, False], [False, False, False]])
    assert_flag(flags, "clipped_low", [[False, True, False], [False, False, False]])
    assert_flag(flags, "masked", [[False] * 3, [False] * 3])


def test_grpo_dual_clip_by_hand():
    logp, blogp, adv, mask = tokens([[math.log(4.0), math.log(2.0), math.log(1.5)]], [[-1.0, -1.0, 1.0]])
    loss, grad, flags = loss_and_grad("grpo", logp, blogp, adv, mask, dual_clip=3.0)
    # r=4, A=-1: min(-4, -1.2) = -4, raised to 3 * -1 = -3 (no grad); r=2: -2 stays; r=1.5: clipped to 1.2
    assert loss == pytest.approx(-(-3.0 - 2.0 + 1.2) / 3)
    assert_grad(grad, [[0.0, 2.0 / 3, 0.0]])
    assert flags["dual_clip_frac"].item() == pytest.approx(1 / 3)
    assert_flag(flags, "clipped_high", [[False, False, True]])


def test_no_clip_by_hand():
    logp, blogp, adv, mask = tokens([[math.log(1.5), math.log(0.5)], [math.log(1.1), 0.0]],
                                    [[1.0, -1.0], [2.0, 3.0]], [[1, 1], [1, 0]])
    loss, grad, flags = loss_and_grad("no_clip", logp, blogp, adv, mask)
    assert loss == pytest.approx(-(1.5 - 0.5 + 2.2) / 3)
    assert_grad(grad, [[-1.5 / 3, 0.5 / 3], [-2.2 / 3, 0.0]])
    assert not any(flag.any() for flag in flags.values())


# log r = 0.5 (A>0), -0.1 (A<0), 0.1 (A>0), -0.5 (A>0: not a candidate), 0.2 (A>0).
# Candidates' (log r)^2: 0.25, 0.01, 0.01, 0.04 -> mean 0.0775 > 0.04; without 0.25: 0.06 / 3 = 0.02 <= 0.04.
M2PO_CASE = ([[0.5, -0.1, 0.1, -0.5, 0.2]], [[1.0, -1.0, 1.0, 1.0, 1.0]])


def test_m2po_algorithm1_by_hand():
    loss, grad, flags = loss_and_grad("m2po", *tokens(*M2PO_CASE))
    kept_terms = [-E(-0.1), E(0.1), E(-0.5), E(0.2)]  # r A of the kept tokens; the masked one stays in the count
    assert loss == pytest.approx(-sum(kept_terms) / 5)
    assert_grad(grad, [[0.0] + [-t / 5 for t in kept_terms]])
    assert_flag(flags, "masked", [[True, False, False, False, False]])
    assert not flags["clipped_low"].any() and not flags["clipped_high"].any()


def test_m2po_cap_by_hand():
    loss, grad, flags = loss_and_grad("m2po_cap", *tokens(*M2PO_CASE))
    # capped sum 0.01 + 0.01 + 0.04 + c^2 = 0.04 * 4 -> c^2 = 0.1 (and 0.04 <= 0.1 <= 0.25, so it is consistent)
    c = math.sqrt(0.1)
    assert flags["m2po_cap_c"].item() == pytest.approx(c)
    # log r = 0.5 > c with A>0: r clipped to e^c (no grad); log r = -0.5 has A>0: min keeps r A, no clip
    unclipped = [-E(-0.1), E(0.1), E(-0.5), E(0.2)]
    assert loss == pytest.approx(-(E(c) + sum(unclipped)) / 5)
    assert_grad(grad, [[0.0] + [-t / 5 for t in unclipped]])
    assert_flag(flags, "clipped_high", [[True, False, False, False, False]])


def test_m2po_cap_is_no_clip_when_the_budget_holds():
    logp, blogp, adv, mask = tokens([[0.1, -0.1, 0.3]], [[1.0, -1.0, -1.0]])
    loss, flags = policy_loss("m2po_cap", logp, blogp, adv, mask)
    assert flags["m2po_cap_c"].item() == math.inf
    assert loss.item() == pytest.approx(-(E(0.1) - E(-0.1) - E(0.3)) / 3)


def test_m2po_cap_budget_is_float64():
    """Three tokens whose squared log-ratios sum to 0.3000000005: over tau * n = 0.1 * 3 in float64, under it in
    float32 (0.30000001); the cap must bind."""
    d = math.sqrt(0.3000000005 / 3)
    log_ratio = torch.full((1, 3), d, dtype=torch.float64)
    _, flags = policy_loss("m2po_cap", log_ratio, torch.zeros_like(log_ratio), torch.ones_like(log_ratio),
                           torch.ones(1, 3), tau=0.1)
    assert flags["m2po_cap_c"].item() < d


def areal_keep_literal(d, valid, tau):
    """AReaL's rule read as a loop: every valid token a candidate; while the mean (log r)^2 of the kept tokens is
    not below tau and more than one is kept, drop the kept token with the largest (log r)^2."""
    kept = [i for i, v in enumerate(valid) if v]
    while len(kept) > 1 and sum(d[i] ** 2 for i in kept) / len(kept) >= tau:
        kept.remove(max(kept, key=lambda i: d[i] ** 2))
    return [i in kept for i in range(len(d))]


def test_m2po_areal_by_hand():
    """prox - behav drift d = [0.5, -0.1, 0.1, -0.5, 0.2]: d^2 = .25 .01 .01 .25 .04. Every token is a candidate
    (Algorithm 1 would not touch -0.5 with A>0): dropping both .25s leaves mean .02 < .04. The loss is the
    decoupled surrogate over the 3 kept tokens only."""
    d = [0.5, -0.1, 0.1, -0.5, 0.2]
    logp, blogp, adv, mask = tokens([[0.0] * 5], M2PO_CASE[1])  # current = behaviour
    prox = blogp + torch.tensor([d], dtype=F64)
    loss, grad, flags = loss_and_grad("m2po_areal", logp, blogp, adv, mask, prox_logp=prox)
    assert_flag(flags, "masked", [[True, False, False, True, False]])
    # kept: u = pi / pi_prox = e^{-d} within [0.8, 1.2] for |d| <= 0.2; weight e^{d}; term = weight * u * A = A
    assert loss == pytest.approx(-(-1.0 + 1.0 + 1.0) / 3)
    assert_grad(grad, [[0.0, 1 / 3, -1 / 3, 0.0, -1 / 3]])


def test_m2po_areal_with_the_masked_tokens_in_the_denominator_divides_by_every_response_token():
    """The hypothesis test's variant: the same 3 kept tokens and mask, but the sum is divided by all 5 response
    tokens (Algorithm 1's denominator), so loss and gradient are AReaL's times 3/5."""
    d = [0.5, -0.1, 0.1, -0.5, 0.2]
    logp, blogp, adv, mask = tokens([[0.0] * 5], M2PO_CASE[1])
    prox = blogp + torch.tensor([d], dtype=F64)
    loss, grad, flags = loss_and_grad("m2po_areal", logp, blogp, adv, mask, prox_logp=prox,
                                      masked_in_denominator=True)
    assert_flag(flags, "masked", [[True, False, False, True, False]])
    assert loss == pytest.approx(-(-1.0 + 1.0 + 1.0) / 5)
    assert_grad(grad, [[0.0, 1 / 5, -1 / 5, 0.0, -1 / 5]])


@pytest.mark.parametrize("value", [1, "yes", None])
def test_a_switch_that_is_not_a_bool_is_refused(value):
    logp, blogp, adv, mask = tokens([[0.0] * 5], M2PO_CASE[1])
    with pytest.raises(ValueError, match="masked_in_denominator=.* must be True or False"):
        policy_loss("m2po_areal", logp, blogp, adv, mask, prox_logp=blogp, masked_in_denominator=value)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-2, 2), min_size=1, max_size=12), st.sampled_from([0.005, 0.04, 0.3]), st.data())
def test_m2po_areal_mask_is_the_literal_loop(d, tau, data):
    valid = data.draw(st.lists(st.booleans(), min_size=len(d), max_size=len(d)).filter(any))
    logp, blogp, adv, mask = tokens([[0.0] * len(d)], [[1.0] * len(d)], [[float(v) for v in valid]])
    prox = blogp + torch.tensor([d], dtype=F64)
    _, flags = policy_loss("m2po_areal", logp, blogp, adv, mask, prox_logp=prox, tau=tau)
    kept = (~flags["masked"][0] & mask[0].bool()).tolist()
    drift = (prox - blogp)[0].tolist()  # the drift the objective sees: 1.0 + 0.4 - 1.0 is not 0.4 in floats
    expected = areal_keep_literal(drift, valid, tau)
    ties = len({x * x for x in drift}) < len(drift)  # equal squares: which one drops first is an order choice
    assert sum(kept) == sum(expected) and (ties or kept == expected)


TIS_CASE = dict(log_ratio_prox=[math.log(1.1), math.log(1.5), math.log(0.9)], adv=[1.0, 1.0, -2.0],
                prox_minus_behav=[math.log(3.0), math.log(0.5), 0.0])


def prox_tokens():
    blogp = torch.tensor([[-1.0, -2.0, -0.5]], dtype=F64)
    prox = blogp + torch.tensor([TIS_CASE["prox_minus_behav"]], dtype=F64)
    logp = (prox + torch.tensor([TIS_CASE["log_ratio_prox"]], dtype=F64)).requires_grad_()
    return logp, blogp, torch.tensor([TIS_CASE["adv"]], dtype=F64), torch.ones_like(blogp), prox


def test_tis_by_hand():
    logp, blogp, adv, mask, prox = prox_tokens()
    loss, grad, flags = loss_and_grad("tis", logp, blogp, adv, mask, prox_logp=prox)
    # w = min(3, 2) = 2, 0.5, 1; u = 1.1, 1.5 -> clipped to 1.2, 0.9 (A<0, not below 0.8)
    assert loss == pytest.approx(-(2 * 1.1 + 0.5 * 1.2 + 1 * 0.9 * -2) / 3)
    assert_grad(grad, [[-2.2 / 3, 0.0, 1.8 / 3]])
    assert_flag(flags, "clipped_high", [[False, True, False]])


def test_decoupled_by_hand():
    logp, blogp, adv, mask, prox = prox_tokens()
    loss, grad, flags = loss_and_grad("decoupled", logp, blogp, adv, mask, prox_logp=prox)
    # the same with the untruncated w = 3, 0.5, 1
    assert loss == pytest.approx(-(3 * 1.1 + 0.5 * 1.2 - 1.8) / 3)
    assert_grad(grad, [[-3.3 / 3, 0.0, 1.8 / 3]])
    assert_flag(flags, "clipped_high", [[False, True, False]])


def test_gspo_by_hand():
    logp, blogp, adv, mask = tokens([[0.001, -0.001, 0.003], [1e-4, 1e-4, 0.0], [0.0, 0.0, 0.0]],
                                    [[1.0, 1.0, 1.0], [-0.5, -1.5, 0.0], [0.0, 0.0, 0.0]],
                                    [[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    loss, grad, flags = loss_and_grad("gspo", logp, blogp, adv, mask)
    # row 1: s = e^0.001 > 1 + 4e-4 with A = 1: clipped to 1.0004 (no grad); row 2: s = e^1e-4, A = -1,
    # unclipped: d(-(1/2) s A)/d logp_t = -(1/2) * A * s * (1/2); row 3 has no response token and is not counted
    assert loss == pytest.approx(-(1.0004 - E(1e-4)) / 2)
    assert_grad(grad, [[0.0] * 3, [E(1e-4) / 4, E(1e-4) / 4, 0.0], [0.0] * 3])
    assert_flag(flags, "clipped_high", [[True] * 3, [False] * 3, [False] * 3])


# ---- relations between objectives, flags on padding ----

def random_batch(seed, batch=4, length=7):
    gen = torch.Generator().manual_seed(seed)
    blogp = -torch.rand(batch, length, generator=gen, dtype=F64) * 3
    logp = (blogp + torch.randn(batch, length, generator=gen, dtype=F64) * 0.4).requires_grad_()
    adv = torch.randn(batch, 1, generator=gen, dtype=F64).expand(batch, length).clone()
    mask = (torch.arange(length) < torch.randint(1, length + 1, (batch, 1), generator=gen)).to(F64)
    return logp, blogp, adv, mask


@pytest.mark.parametrize("eps", [1e9, math.inf])
def test_no_clip_equals_grpo_with_huge_eps(eps):
    logp, blogp, adv, mask = random_batch(0)
    loss, grad, _ = loss_and_grad("no_clip", logp, blogp, adv, mask)
    logp2 = logp.detach().clone().requires_grad_()
    loss2, grad2, flags = loss_and_grad("grpo", logp2, blogp, adv, mask, eps_low=eps, eps_high=eps)
    assert loss == pytest.approx(loss2, rel=1e-12)
    torch.testing.assert_close(grad, grad2)
    assert not flags["clipped_low"].any() and not flags["clipped_high"].any()


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_flags_are_detached_bools_and_false_on_padding(name):
    logp, blogp, adv, mask = random_batch(1)
    blogp = blogp + 0.8 * torch.randn_like(blogp)  # a large drift, so that something is clipped or masked
    params = {"prox_logp": blogp + 0.1} if needs_proximal(name) else {}
    loss, flags = policy_loss(name, logp, blogp, adv, mask.bool(), **params)
    assert loss.requires_grad and torch.isfinite(loss)
    for key in ("clipped_low", "clipped_high", "masked"):
        assert flags[key].dtype == torch.bool and flags[key].shape == mask.shape and not flags[key].requires_grad
        assert not flags[key][mask == 0].any()
    assert any(flags[key].any() for key in ("clipped_low", "clipped_high", "masked")) or name == "no_clip"
    loss_float_mask, _ = policy_loss(name, logp, blogp, adv, mask, **params)
    assert loss.item() == loss_float_mask.item()


def test_objective_defaults():
    assert set(OBJECTIVES) == {"grpo", "no_clip", "m2po", "m2po_cap", "m2po_areal", "tis", "decoupled", "gspo"}
    assert objective_defaults("grpo") == {"eps_low": 0.2, "eps_high": 0.2, "dual_clip": None}
    assert objective_defaults("no_clip") == {}
    assert objective_defaults("m2po") == objective_defaults("m2po_cap") == {"tau": 0.04}
    assert objective_defaults("tis") == {"eps_low": 0.2, "eps_high": 0.2, "tis_cap": 2.0}
    assert objective_defaults("decoupled") == {"eps_low": 0.2, "eps_high": 0.2}
    assert objective_defaults("gspo") == {"eps_low": 3e-4, "eps_high": 4e-4}


# ---- M2PO Algorithm 1 mask: properties ----

@st.composite
def keep_mask_inputs(draw):
    batch, length = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    n = batch * length
    log_ratio = draw(st.lists(st.floats(-2, 2, width=32), min_size=n, max_size=n))
    adv = draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 1.0]), min_size=n, max_size=n))
    mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    mask[draw(st.integers(0, n - 1))] = True
    tau = draw(st.one_of(st.floats(1e-3, 2.0), st.just(math.inf)))
    shape = (batch, length)
    return (torch.tensor(log_ratio).view(shape), torch.tensor(adv).view(shape), torch.tensor(mask).view(shape), tau)


@settings(max_examples=300, deadline=None)
@given(keep_mask_inputs())
def test_m2po_keep_mask_properties(inputs):
    log_ratio, adv, mask, tau = inputs
    keep = m2po_keep_mask(log_ratio, adv, mask, tau)
    assert keep.dtype == torch.bool and keep.shape == mask.shape
    sq = log_ratio.double().square()
    candidate = mask & (((adv > 0) & (log_ratio > 0)) | ((adv < 0) & (log_ratio < 0)))
    masked = ~keep
    assert not (masked & ~candidate).any()  # non-candidates and padding are never masked
    kept_candidates = candidate & keep
    if kept_candidates.any():
        assert sq[kept_candidates].mean().item() <= tau * (1 + 1e-12)
    if masked.any() and kept_candidates.any():
        assert sq[masked].min() >= sq[kept_candidates].max()  # the largest (log r)^2 are the ones masked
    if masked.any():  # and no fewer would do: putting back the smallest masked one breaks the budget
        put_back = torch.cat([sq[kept_candidates], sq[masked].min().view(1)])
        assert put_back.mean().item() > tau * (1 - 1e-12)
    assert torch.equal(keep, m2po_algorithm1(log_ratio, adv, mask, tau))  # the fast path is the literal loop
    if tau == math.inf:
        assert keep.all()
    garbage = torch.where(mask, log_ratio, torch.full_like(log_ratio, 50.0))
    assert torch.equal(m2po_keep_mask(garbage, torch.where(mask, adv, 1.0), mask, tau), keep)  # padding ignored


def test_m2po_keep_mask_ties_drop_exactly_enough():
    log_ratio = torch.tensor([[0.5, 0.5, 0.5, 0.1]])
    keep = m2po_keep_mask(log_ratio, torch.ones_like(log_ratio), torch.ones_like(log_ratio), tau=0.04)
    # means after dropping k = 0..3 of the 0.25's: 0.19, 0.17, 0.13, 0.01 -> all three 0.5's go
    assert keep.tolist() == [[False, False, False, True]]
    keep = m2po_keep_mask(log_ratio, torch.ones_like(log_ratio), torch.ones_like(log_ratio), tau=0.15)
    assert (~keep).sum().item() == 2


# ---- Advantage Reweighting and Lopti ----

def test_advantage_reweight():
    adv = torch.tensor([[1.0, -2.0, 0.5]])
    old_logp = torch.log(torch.tensor([[0.5, 1.0, 0.1]]))
    assert torch.equal(advantage_reweight(adv, old_logp, 0.0), adv)
    # alpha = 0.3: weights 0.3 * p + 0.7 = 0.85, 1.0, 0.73
    torch.testing.assert_close(advantage_reweight(adv, old_logp, 0.3), torch.tensor([[0.85, -2.0, 0.365]]))


def test_lopti_masks():
    old_logp = torch.log(torch.tensor([[0.3, 0.7, 0.5, 0.1]]))
    mask = torch.tensor([[1, 1, 1, 0]])
    assert lopti_low_mask(old_logp, 0.5).tolist() == [[True, False, False, True]]
    low, high = lopti_stages(old_logp, 0.5, mask)
    assert low.tolist() == [[1.0, 0.0, 0.0, 0.0]] and high.tolist() == [[0.0, 1.0, 1.0, 0.0]]
    first, second = lopti_stages(old_logp, -0.5, mask)  # the reversed ablation: high-probability tokens first
    assert first.tolist() == high.tolist() and second.tolist() == low.tolist()
    nothing, everything = lopti_stages(old_logp, 0.0, mask)
    assert not nothing.any() and everything.tolist() == [[1.0, 1.0, 1.0, 0.0]]


# ---- every bad input is a ValueError naming the value ----

def bad_calls():
    logp, blogp, adv, mask = (t.detach() for t in tokens([[0.1, -0.2]], [[1.0, -1.0]]))
    wide = torch.zeros(1, 3)

    def loss(name="grpo", **kw):
        args = {"logp": logp, "blogp": blogp, "advantages": adv, "mask": mask}
        args.update({k: kw.pop(k) for k in list(kw) if k in args})
        return lambda: policy_loss(name, args["logp"], args["blogp"], args["advantages"], args["mask"], **kw)

    return [
        ("'ppo'", loss("ppo")), ("m2po_cap", loss("ppo")),
        ("'tau'", loss(tau=0.1)), ("eps_high", loss(tau=0.1)),
        ("tau", loss("m2po", tau=0.0)), ("tau", loss("m2po_cap", tau=-1.0)), ("tau", loss("m2po", tau=math.nan)),
        ("eps_low", loss(eps_low=-0.1)), ("eps_high", loss("gspo", eps_high=-1e-4)),
        ("eps_low", loss(eps_low="0.2")),
        ("tis_cap", loss("tis", tis_cap=0.0, prox_logp=blogp)),
        ("dual_clip", loss(dual_clip=1.0)),
        ("prox_logp", loss("tis")), ("prox_logp", loss("decoupled")),
        ("prox_logp", loss("tis", prox_logp=wide)), ("blogp", loss(blogp=wide)), ("advantages", loss(advantages=wide)),
        ("[B, T]", loss(logp=logp[0], blogp=blogp[0], advantages=adv[0], mask=mask[0])),
        ("mask", loss(mask=torch.zeros_like(mask))), ("mask", loss(mask=mask * 0.5)),
        ("logp", loss(logp=torch.full_like(logp, math.nan))), ("blogp", loss(blogp=torch.full_like(logp, -math.inf))),
        ("alpha", lambda: advantage_reweight(adv, blogp, 1.5)), ("alpha", lambda: advantage_reweight(adv, blogp, -0.1)),
        ("old_logp", lambda: advantage_reweight(adv, wide, 0.1)),
        ("eta", lambda: lopti_low_mask(blogp, 1.0)), ("eta", lambda: lopti_stages(blogp, -1.0, mask)),
        ("mask", lambda: lopti_stages(blogp, 0.5, torch.zeros_like(mask))),
        ("tau", lambda: m2po_keep_mask(logp - blogp, adv, mask, tau=0)),
        ("mask", lambda: m2po_keep_mask(logp - blogp, adv, wide)),
        ("'ppo'", lambda: objective_defaults("ppo")),
    ]


@pytest.mark.parametrize("name_in_message, call", bad_calls())
def test_bad_input_raises_value_error(name_in_message, call):
    with pytest.raises(ValueError) as error:
        call()
    assert name_in_message in str(error.value)
