"""The fused ratio op's compiled Triton kernels against the PyTorch reference, on a CUDA GPU (a check CI cannot run).

    python bench/ratio_op_agreement.py               # CUDA: the compiled, autotuned kernels, as training calls them
    python bench/ratio_op_agreement.py --cpu-smoke   # small sizes through Triton's interpreter: checks the script

Exit status 1 when any case disagrees (2 without a CUDA device).

tests/test_ops.py holds the kernels to the reference through Triton's interpreter on the CPU, at a fixed tile width.
On a GPU the kernels are compiled and their tile width autotuned (rlbook.ops.kernels), a path only a GPU runs. This
script checks that path with the tests' tolerances (rlbook.ops.agreement): every fused objective on fp32 and bf16
logits, at Qwen3's vocabulary (V = 151,936) and at a small ragged one, with a sampling temperature, and with the
gradient written into the logits' own buffer; and GRPO on bf16 logits with more than 2^31 elements (N x V =
14,200 x 151,936 by default, --large-tokens), where a 32-bit offset into the logits would wrap. Each case records the
largest absolute difference of each quantity and whether all are within tolerance. Writes
bench/results/ratio_op_agreement/ (with --cpu-smoke it prints its result instead).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rlbook.objectives import needs_proximal  # noqa: E402
from rlbook.ops import FUSED_OBJECTIVES, fused_policy_loss, reference_policy_loss  # noqa: E402
from rlbook.ops.agreement import (GRAD_TOL, HIDDEN_TOL, STATS_TOL, TEMPERATURE_GRAD_TOL,  # noqa: E402
                                  random_batch)

QWEN3_VOCAB = 151_936


def difference(got, want, tol) -> dict:
    """The largest absolute difference, and whether torch.testing.assert_close passes at `tol`."""
    got, want = got.float(), want.float()
    try:
        torch.testing.assert_close(got, want, **tol)
        within = True
    except AssertionError:
        within = False
    return {"max_abs": float((got - want).abs().max()), "within": within}


def loss_case(n, v, dtype, objective, device, backend, temperature=1.0, **params) -> dict:
    """Loss, per-token statistics and the logits' gradient of the fused op against the reference."""
    logits, ids, behavior, advantages, mask, proximal = random_batch(n, v, dtype, device)
    if needs_proximal(objective):
        params["prox_logp"] = proximal
    out = {}
    for name, fn, kw in (("fused", fused_policy_loss, {"backend": backend}), ("reference", reference_policy_loss, {})):
        leaf = logits.clone().requires_grad_()
        loss, tokens = fn(leaf, ids, behavior, advantages, mask, objective, temperature=temperature, **kw, **params)
        loss.backward()
        out[name] = (loss.detach(), tokens, leaf.grad)
    (loss, tokens, grad), (ref_loss, ref_tokens, ref_grad) = out["fused"], out["reference"]
    grad_tol = (GRAD_TOL if temperature == 1.0 else TEMPERATURE_GRAD_TOL)[dtype]
    return {"loss": difference(loss, ref_loss, STATS_TOL), "grad": difference(grad, ref_grad, grad_tol),
            **{key: difference(tokens[key], value, STATS_TOL) for key, value in ref_tokens.items()}}


def inplace_case(n, v, device, backend, hidden_size=64) -> dict:
    """The gradient written into the logits' buffer, carried back to the hidden states, against the reference."""
    logits, ids, behavior, advantages, mask, _ = random_batch(n, v, torch.float32, device)
    gen = torch.Generator(device).manual_seed(1)
    head = torch.randn(hidden_size, v, device=device, generator=gen) / 10
    grads = []
    for fn, kw in ((fused_policy_loss, {"backend": backend, "inplace_grad": True}), (reference_policy_loss, {})):
        hidden = torch.randn(n, hidden_size, device=device, generator=torch.Generator(device).manual_seed(2))
        hidden.requires_grad_()
        loss, _ = fn(hidden @ head + logits, ids, behavior, advantages, mask, "grpo", **kw)
        grads.append(torch.autograd.grad(loss, hidden)[0])
    return {"hidden_grad": difference(*grads, HIDDEN_TOL)}


def cases(shapes, dtypes, large=None):
    """(label, check, its arguments) for every case: each objective (GRPO also with a dual clip and with a sampling
    temperature) on each dtype at each shape, the in-place gradient at each shape, and GRPO on bf16 logits of the
    `large` shape (N, V) if given."""
    variants = [(objective, {}) for objective in FUSED_OBJECTIVES] + [("grpo", {"dual_clip": 1.5}),
                                                                      ("grpo", {"temperature": 0.7})]
    if large is not None:
        n, v = large
        yield (f"grpo bfloat16 N={n} V={v} (N x V = {n * v:,} > 2^31)", loss_case,
               {"n": n, "v": v, "dtype": torch.bfloat16, "objective": "grpo"})
    for n, v in shapes:
        for dtype in dtypes:
            for objective, extra in variants:
                settings = [objective, *(f"{k}={x}" for k, x in extra.items()), str(dtype).removeprefix("torch.")]
                arguments = {"n": n, "v": v, "dtype": dtype, "objective": objective, **extra}
                yield f"{' '.join(settings)} N={n} V={v}", loss_case, arguments
        yield f"grpo in-place gradient float32 N={n} V={v}", inplace_case, {"n": n, "v": v}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="small sizes through Triton's interpreter on the CPU")
    parser.add_argument("--tokens", type=int, default=512, help="tokens per case at Qwen3's vocabulary (default 512)")
    parser.add_argument("--large-tokens", type=int, default=14_200, help="tokens of the case past 2^31 logits (default "
                        "14,200; 0: none)")
    args = parser.parse_args()
    if args.cpu_smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            parser.error("--cpu-smoke runs the kernels through Triton's interpreter: set TRITON_INTERPRET=1")
        device, shapes, dtypes, large = torch.device("cpu"), [(5, 4099)], [torch.float32], None
    elif not torch.cuda.is_available():
        print("ratio_op_agreement: no CUDA device here, so no compiled kernel to check (try --cpu-smoke with "
              "TRITON_INTERPRET=1 to check the script)", file=sys.stderr)
        return 2
    else:
        device, shapes = torch.device("cuda"), [(7, 4099), (args.tokens, QWEN3_VOCAB)]
        dtypes, large = [torch.float32, torch.bfloat16], (args.large_tokens, QWEN3_VOCAB) if args.large_tokens else None
    rows = []
    for label, check, arguments in cases(shapes, dtypes, large):
        differences = check(device=device, backend="triton", **arguments)
        rows.append({"case": label, "within": all(d["within"] for d in differences.values()),
                     "differences": differences})
        worst = max(rows[-1]["differences"].items(), key=lambda kv: kv[1]["max_abs"])
        print(f"{'agrees   ' if rows[-1]['within'] else 'DISAGREES'} {label:<48} largest difference "
              f"{worst[1]['max_abs']:.2e} ({worst[0]})", flush=True)
    agree = sum(row["within"] for row in rows)
    print(f"{agree} of {len(rows)} cases within the tests' tolerances")
    result = {"cases": rows, "agree": agree, "total": len(rows),
              "tolerances": {"stats": STATS_TOL, "hidden_grad": HIDDEN_TOL,
                             "grad": {str(k): t for k, t in GRAD_TOL.items()}}}
    if args.cpu_smoke:  # a check of the script, not a result: kept out of bench/results
        print(json.dumps(result))
    else:
        sys.path.insert(0, str(ROOT / "bench"))
        from record import save_result
        save_result("ratio_op_agreement", torch.cuda.get_device_name().replace(" ", "_"), result)
    return 0 if agree == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
