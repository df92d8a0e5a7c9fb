"""The fused ratio op against the PyTorch reference: Triton kernels run on the CPU through the interpreter.

The tolerances are the kernels' promise, rlbook.ops.agreement (bench/ratio_op_agreement.py checks it on a GPU).
BLOCK = 256 makes V = 1000 span 4 tiles and V = 4099 span 17, both with a ragged last tile.
"""
import os

import pytest
import torch

from rlbook.objectives import m2po_keep_mask, needs_proximal
from rlbook.ops import (FUSED_OBJECTIVES, chunked_policy_loss, chunked_token_logprobs, fused_policy_loss,
                        reference_chunked_policy_loss, reference_policy_loss, reference_token_logprobs,
                        token_logprobs)
from rlbook.ops.agreement import GRAD_TOL, HIDDEN_TOL, STATS_TOL, TEMPERATURE_GRAD_TOL, random_batch

BLOCK = 256


@pytest.fixture
def triton():
    assert os.environ.get("TRITON_INTERPRET") == "1", "tests/conftest.py sets TRITON_INTERPRET=1"
    return pytest.importorskip("triton")


def objective_params(objective, prox):
    return {"prox_logp": prox} if needs_proximal(objective) else {}


def loss_and_grad(fn, logits, *args, **kwargs):
    leaf = logits.clone().requires_grad_()
    loss, tokens = fn(leaf, *args, **kwargs)
    loss.backward()
    return loss.detach(), tokens, leaf.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("n, v", [(1, 1000), (7, 4099), (33, 1000)])
def test_token_logprobs_forward(triton, dtype, n, v):
    logits, ids, *_ = random_batch(n, v, dtype)
    logp, entropy = token_logprobs(logits, ids, backend="triton", block_v=BLOCK)
    ref_logp, ref_entropy = reference_token_logprobs(logits, ids)
    assert logp.dtype == entropy.dtype == torch.float32 and logp.shape == (n,)
    torch.testing.assert_close(logp, ref_logp, **STATS_TOL)
    torch.testing.assert_close(entropy, ref_entropy, **STATS_TOL)
    assert (logp <= 0).all()


def test_single_token(triton):
    logits, ids, blogp, adv, mask, _ = random_batch(1, 4099)
    loss, _, grad = loss_and_grad(fused_policy_loss, logits, ids, blogp, adv, mask, "grpo", backend="triton",
                                  inplace_grad=False, block_v=BLOCK)
    ref_loss, _, ref_grad = loss_and_grad(reference_policy_loss, logits, ids, blogp, adv, mask, "grpo")
    torch.testing.assert_close(loss, ref_loss, **STATS_TOL)
    torch.testing.assert_close(grad, ref_grad, **GRAD_TOL[torch.float32])


def test_default_tile(triton):
    logits, ids, *_ = random_batch(5, 4099)  # the default 4096 tile plus a 3-wide last tile
    torch.testing.assert_close(token_logprobs(logits, ids, backend="triton"), reference_token_logprobs(logits, ids),
                               **STATS_TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_extreme_logits(triton, dtype):
    v = 1000
    logits = torch.full((5, v), -1e4)
    logits[0, 0] = 1e4  # one-hot at id 0: logp = 0, entropy = 0
    logits[1] = 7.0  # all equal: logp = entropy = log V
    logits[2, v - 1] = 1e4  # the max in the ragged last tile, chosen
    logits[3] = torch.linspace(-1e4, 1e4, v)  # huge spread, chosen token far below the max
    logits[4, ::2] = 1e4  # ties across tiles
    logits = logits.to(dtype)
    ids = torch.tensor([0, 3, v - 1, 0, v - 1])
    logp, entropy = token_logprobs(logits, ids, backend="triton", block_v=BLOCK)
    ref_logp, ref_entropy = reference_token_logprobs(logits, ids)
    assert torch.isfinite(logp).all() and torch.isfinite(entropy).all() and (logp <= 0).all()
    torch.testing.assert_close(logp, ref_logp, **STATS_TOL)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-4, rtol=1e-5)
    log_v = torch.log(torch.tensor(float(v)))
    torch.testing.assert_close(logp[1], -log_v)
    torch.testing.assert_close(entropy[1], log_v)


@pytest.mark.parametrize("objective, extra", [(name, {}) for name in FUSED_OBJECTIVES] + [("grpo", {"dual_clip": 1.5})])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_loss_and_grad(triton, objective, extra, dtype):
    """Every fused objective: 24 tokens, some masked, some clipped (m2po: some dropped)."""
    logits, ids, blogp, adv, mask, prox = random_batch(24, 1000, dtype)
    args = (ids, blogp, adv, mask, objective)
    params = {**objective_params(objective, prox), **extra}
    loss, tokens, grad = loss_and_grad(fused_policy_loss, logits, *args, backend="triton", inplace_grad=False,
                                       block_v=BLOCK, **params)
    ref_loss, ref_tokens, ref_grad = loss_and_grad(reference_policy_loss, logits, *args, **params)
    torch.testing.assert_close(loss, ref_loss, **STATS_TOL)
    assert grad.dtype == dtype
    torch.testing.assert_close(grad, ref_grad, **GRAD_TOL[dtype])
    assert (grad[mask == 0] == 0).all()
    assert set(tokens) >= {"logp", "entropy", "ratio", "clipped_low", "clipped_high", "masked"}
    for key, value in ref_tokens.items():
        torch.testing.assert_close(tokens[key], value, **STATS_TOL)


def test_inplace_grad_overwrites_logits(triton):
    logits, ids, blogp, adv, mask, _ = random_batch(9, 1000)
    gen = torch.Generator().manual_seed(2)
    hidden, head = torch.randn(9, 16, generator=gen).requires_grad_(), torch.randn(16, 1000, generator=gen) / 10
    ref_out = hidden @ head + logits
    ref_out.retain_grad()
    ref_loss, _ = reference_policy_loss(ref_out, ids, blogp, adv, mask, "grpo")
    ref_loss.backward()
    out = hidden @ head + logits  # the add saves nothing, so the buffer may be overwritten
    loss, _ = fused_policy_loss(out, ids, blogp, adv, mask, "grpo", backend="triton", block_v=BLOCK,
                                inplace_grad=True)
    grad, = torch.autograd.grad(loss, hidden)
    torch.testing.assert_close(grad, hidden.grad, **HIDDEN_TOL)
    torch.testing.assert_close(out, ref_out.grad, **GRAD_TOL[torch.float32])  # the buffer now holds the gradient


def test_inplace_grad_refused_when_logits_are_saved(triton):
    logits, ids, blogp, adv, mask, _ = random_batch(4, 1000)
    leaf = logits.clone().requires_grad_()
    capped = torch.tanh(leaf)  # tanh saves its output for its backward: overwriting it must fail loudly
    loss, _ = fused_policy_loss(capped, ids, blogp, adv, mask, "grpo", backend="triton", block_v=BLOCK,
                                inplace_grad=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()


def test_independent_formulas():
    """The [1, N] plumbing: grpo and m2po written out by hand, on the torch backend."""
    logits, ids, blogp, adv, mask, _ = random_batch(40, 300)
    logp, _ = reference_token_logprobs(logits, ids)
    r = torch.exp(logp - blogp)
    term = torch.minimum(r * adv, r.clamp(0.8, 1.2) * adv)
    loss, _ = fused_policy_loss(logits, ids, blogp, adv, mask, "grpo", backend="torch")
    torch.testing.assert_close(loss, -(term * mask).sum() / mask.sum())
    keep = m2po_keep_mask((logp - blogp)[None], adv[None], mask[None], tau=0.04)[0]
    loss, tokens = fused_policy_loss(logits, ids, blogp, adv, mask, "m2po", backend="torch")
    torch.testing.assert_close(loss, -(keep * r * adv * mask).sum() / mask.sum())
    assert torch.equal(tokens["masked"], ~keep & (mask != 0))


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("objective", ["grpo", "m2po", "tis"])
def test_chunked_matches_reference(backend, objective):
    if backend == "triton":
        pytest.importorskip("triton")
    gen = torch.Generator().manual_seed(1)
    _, ids, blogp, adv, mask, prox = random_batch(13, 1000)
    hidden, weight = torch.randn(13, 32, generator=gen), torch.randn(1000, 32, generator=gen) / 2
    args = (weight, ids, blogp, adv, mask, objective)
    params = objective_params(objective, prox)
    loss, tokens, grad = loss_and_grad(chunked_policy_loss, hidden, *args, chunk_size=5, backend=backend,
                                       block_v=BLOCK, **params)
    ref_loss, ref_tokens, ref_grad = loss_and_grad(reference_chunked_policy_loss, hidden, *args, **params)
    torch.testing.assert_close(loss, ref_loss, **STATS_TOL)
    torch.testing.assert_close(grad, ref_grad, **HIDDEN_TOL)
    for key, value in ref_tokens.items():
        torch.testing.assert_close(tokens[key], value, **STATS_TOL)
    logp, entropy = chunked_token_logprobs(hidden, weight, ids, chunk_size=4, backend=backend, block_v=BLOCK)
    torch.testing.assert_close((logp, entropy), reference_token_logprobs(hidden @ weight.T, ids), **STATS_TOL)


def test_errors():
    logits, ids, blogp, adv, mask, _ = random_batch(4, 50)
    with pytest.raises(ValueError, match="not fused"):
        fused_policy_loss(logits, ids, blogp, adv, mask, "gspo")
    with pytest.raises(ValueError, match="backend"):
        token_logprobs(logits, ids, backend="cuda")
    with pytest.raises(ValueError, match="frozen"):
        chunked_token_logprobs(torch.randn(4, 8), torch.randn(50, 8, requires_grad=True), ids)


def test_triton_on_cpu_needs_the_interpreter(triton, monkeypatch):
    logits, ids, *_ = random_batch(4, 50)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        token_logprobs(logits, ids, backend="triton")


def test_auto_on_cpu_is_the_reference():
    logits, ids, *_ = random_batch(6, 100)
    got = token_logprobs(logits, ids)  # backend="auto": CPU tensors take the PyTorch reference
    assert all(torch.equal(a, b) for a, b in zip(got, reference_token_logprobs(logits, ids)))


# ---- safe defaults (issue 10 item 5), the temperature inside the op, rows without a gradient, edge cases ----

def test_default_gradient_leaves_the_logits_alone(triton):
    logits, ids, blogp, adv, mask, _ = random_batch(6, 1000)
    out = logits.clone().requires_grad_() * 1.0  # a non-leaf the caller still reads after the backward
    before = out.detach().clone()
    fused_policy_loss(out, ids, blogp, adv, mask, "grpo", backend="triton", block_v=BLOCK)[0].backward()
    assert torch.equal(out.detach(), before)


def test_inplace_grad_refuses_a_leaf(triton):
    logits, ids, blogp, adv, mask, _ = random_batch(4, 1000)
    with pytest.raises(ValueError, match="leaf"):
        fused_policy_loss(logits.clone().requires_grad_(), ids, blogp, adv, mask, "grpo", backend="triton",
                          inplace_grad=True)


@pytest.mark.parametrize("bad", [-100, 1000])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_ids_out_of_range_raise(triton, bad, backend):
    logits, ids, *_ = random_batch(4, 1000)
    ids[2] = bad
    for call in (lambda: token_logprobs(logits, ids, backend=backend), lambda: reference_token_logprobs(logits, ids),
                 lambda: chunked_token_logprobs(torch.randn(4, 8), torch.randn(1000, 8), ids, backend=backend)):
        with pytest.raises(ValueError, match="out of range"):
            call()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_minus_inf_logits_give_finite_entropy(triton, backend):
    logits, ids, *_ = random_batch(3, 1000)
    logits[:, 500:] = float("-inf")
    ids = ids % 500
    logp, entropy = token_logprobs(logits, ids, backend=backend, block_v=BLOCK)
    ref_logp, ref_entropy = reference_token_logprobs(logits[:, :500], ids)
    assert torch.isfinite(entropy).all() and torch.isfinite(logp).all()
    torch.testing.assert_close((logp, entropy), (ref_logp, ref_entropy), **STATS_TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n, v", [(1, 1000), (9, 4099)])
def test_temperature_inside_the_op(triton, dtype, n, v):
    """logits / T is never made: the kernels scale as they read; values and gradients match the reference on x / T."""
    logits, ids, blogp, adv, mask, _ = random_batch(n, v, torch.float32)
    logits = logits.to(dtype)
    args = (ids, blogp, adv, mask, "grpo")
    loss, tokens, grad = loss_and_grad(fused_policy_loss, logits, *args, temperature=0.7, backend="triton",
                                       block_v=BLOCK)
    ref_loss, ref_tokens, ref_grad = loss_and_grad(reference_policy_loss, logits, *args, temperature=0.7)
    torch.testing.assert_close(loss, ref_loss, **STATS_TOL)
    torch.testing.assert_close(tokens["entropy"], ref_tokens["entropy"], **STATS_TOL)
    torch.testing.assert_close(grad.float(), ref_grad.float(), **TEMPERATURE_GRAD_TOL[dtype])


def test_strided_views_and_masked_rows(triton):
    """A strided [N, V] view (every other row of a wider buffer, a column window) and rows with a zero gradient:
    those rows are written as zeros (the kernel does not read them)."""
    wide, ids, blogp, adv, mask, _ = random_batch(14, 1200)
    view = wide[::2, 100:1100]  # non-contiguous rows, unit last stride
    ids, blogp, adv, mask = ids[::2] % 1000, blogp[::2], adv[::2].clone(), mask[::2].clone()
    mask[1], adv[3] = 0.0, 0.0
    args = (ids, blogp, adv, mask, "grpo")
    loss, _, grad = loss_and_grad(fused_policy_loss, view, *args, backend="triton", block_v=BLOCK)
    ref_loss, _, ref_grad = loss_and_grad(reference_policy_loss, view, *args)
    torch.testing.assert_close(loss, ref_loss, **STATS_TOL)
    torch.testing.assert_close(grad, ref_grad, **GRAD_TOL[torch.float32])
    assert (grad[1] == 0).all() and (grad[3] == 0).all()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_chunked_skips_rows_without_gradient(triton, backend, monkeypatch):
    """Rows whose coefficient is 0 never reach the backward's matmul: their hidden gradient is exactly 0."""
    gen = torch.Generator().manual_seed(3)
    _, ids, blogp, adv, mask, _ = random_batch(10, 1000)
    adv[:5] = 0.0
    hidden, weight = torch.randn(10, 16, generator=gen), torch.randn(1000, 16, generator=gen) / 2
    seen = []
    import rlbook.ops.rows as rows_module
    original = rows_module.grad
    monkeypatch.setattr(rows_module, "TORCH_ROWS", 2)  # the torch backend's row blocks, ragged at the end
    monkeypatch.setattr(rows_module, "grad",
                        lambda logits, *a, **k: seen.append(len(logits)) or original(logits, *a, **k))
    loss, _, grad = loss_and_grad(chunked_policy_loss, hidden, weight, ids, blogp, adv, mask, "grpo", chunk_size=3,
                                  backend=backend, block_v=BLOCK, temperature=0.5)
    ref_loss, _, ref_grad = loss_and_grad(reference_chunked_policy_loss, hidden, weight, ids, blogp, adv, mask,
                                          "grpo", temperature=0.5)
    torch.testing.assert_close(grad, ref_grad, **HIDDEN_TOL)
    live = int(((adv != 0) & (mask != 0)).sum())  # at most these (a clipped token has no gradient either)
    assert 0 < sum(seen) <= live < 10 and (grad[:5] == 0).all()
