"""Benchmark of the fused ratio op (not a test): PyTorch eager vs the Triton op vs the chunked lm_head variant.

    python bench/ratio_op.py                  # CUDA: N in {4096, 16384}, V = 151936, bf16 logits, hidden 2048
    python bench/ratio_op.py --cpu-smoke      # tiny sizes through the torch paths: checks that the script runs

For each N: median time of (1) log-probs + entropy without gradient (behavior/old/proximal log-probs),
(2) the GRPO loss forward, (3) forward + backward to the logits (or to the hidden states), the peak memory
allocated beyond the inputs, and the effective bandwidth = the bytes the op must move / time
(read V*N logits for (1) and (2); read twice and write once for (3)), against the device's HBM peak.
The chunked variant also reports the plain lm_head matmuls it must do (1 for the forward, 3 for fwd+bwd).
Writes bench/results/ratio_op/ratio_op-<device>-<commit>.json.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from rlbook import storage  # noqa: E402
from rlbook.ops import (chunked_policy_loss, chunked_token_logprobs, fused_policy_loss,  # noqa: E402
                        reference_policy_loss, reference_token_logprobs, token_logprobs)

HBM_PEAK = {" H200": 4.8e12, " H100 80GB HBM3": 3.35e12, " H100 SXM": 3.35e12, " H100 NVL": 3.9e12,
            " H100 PCIe": 2.0e12, " A100-SXM4-80GB": 2.039e12, " A100 80GB PCIe": 1.935e12,
            " A100-SXM4-40GB": 1.555e12, " A100-PCIE-40GB": 1.555e12, " L40S": 0.864e12}  # bytes/s, spec sheets


def hbm_peak(name: str):
    return next((peak for key, peak in HBM_PEAK.items() if key in f" {name}"), None)


def timed(fn, setup, repeats, cuda):
    """Median milliseconds of fn() over `repeats` runs after two warm-ups; setup() runs untimed before each."""
    times = []
    for i in range(repeats + 2):
        setup()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[2:])


def peak_extra(fn, setup, cuda):
    """Bytes allocated at the peak of fn() beyond what was allocated before it (the inputs)."""
    if not cuda:
        return None
    setup()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def measure(label, fn, setup, bytes_moved, args, cuda, peak):
    """One row: time, memory, bandwidth; an out-of-memory run is recorded, not fatal."""
    try:
        ms = timed(fn, setup, args.repeats, cuda)
        mem = peak_extra(fn, setup, cuda)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        print(f"  {label:<36} out of memory")
        return {"label": label, "oom": True}
    gbs = bytes_moved / ms / 1e6
    row = {"label": label, "ms": ms, "peak_extra_gb": None if mem is None else mem / 1e9, "bytes": bytes_moved,
           "gb_per_s": gbs, "frac_of_peak": None if peak is None else gbs * 1e9 / peak}
    mem_txt = "   n/a" if mem is None else f"{mem / 1e9:6.2f}"
    peak_txt = "" if peak is None else f"  {100 * row['frac_of_peak']:5.1f}% of HBM peak"
    print(f"  {label:<36} {ms:9.3f} ms  {mem_txt} GB extra  {gbs:8.1f} GB/s{peak_txt}")
    return row


def logits_rows(n, v, args, device, peak):
    """(a) eager and (b) fused on materialised logits [n, v]."""
    cuda = device.type == "cuda"
    backend = "triton" if cuda else "torch"
    gen = torch.Generator(device).manual_seed(0)
    pristine = 2 * torch.randn(n, v, device=device, dtype=args.dtype, generator=gen)
    logits = pristine.clone().requires_grad_()
    ids = torch.randint(0, v, (n,), device=device, generator=gen)
    blogp = token_logprobs(pristine, ids)[0] + 0.1 * torch.randn(n, device=device, generator=gen)
    adv, mask = torch.randn(n, device=device, generator=gen), torch.ones(n, device=device)
    one_read = n * v * pristine.element_size()

    def restore():  # the in-place backward overwrites the logits with their gradient
        with torch.no_grad():
            logits.copy_(pristine)

    def fwd_bwd(loss_fn, **kw):  # through a view: the in-place gradient refuses a leaf
        return lambda: torch.autograd.grad(loss_fn(logits.view_as(logits), ids, blogp, adv, mask, "grpo", **kw)[0],
                                           logits)

    def no_grad(fn):
        return lambda: torch.no_grad()(fn)(pristine, ids)

    rows = [
        measure("eager logprobs+entropy", no_grad(reference_token_logprobs), restore, one_read, args, cuda, peak),
        measure("eager loss fwd", lambda: reference_policy_loss(logits, ids, blogp, adv, mask, "grpo"), restore,
                one_read, args, cuda, peak),
        measure("eager loss fwd+bwd", fwd_bwd(reference_policy_loss), restore, 3 * one_read, args, cuda, peak),
        measure("fused logprobs+entropy", no_grad(lambda x, i: token_logprobs(x, i, backend=backend)), restore,
                one_read, args, cuda, peak),
        measure("fused loss fwd", lambda: fused_policy_loss(logits, ids, blogp, adv, mask, "grpo", backend=backend),
                restore, one_read, args, cuda, peak),
        measure("fused loss fwd+bwd (in place)", fwd_bwd(fused_policy_loss, backend=backend, inplace_grad=True),
                restore, 3 * one_read, args, cuda, peak),
        measure("fused loss fwd+bwd (new buffer)", fwd_bwd(fused_policy_loss, backend=backend),
                restore, 3 * one_read, args, cuda, peak),
    ]
    return rows


def lm_head_rows(n, v, args, device, peak):
    """(c) the chunked variant from hidden [n, H] and a frozen lm_head [v, H], with the plain matmuls it does."""
    cuda = device.type == "cuda"
    backend = "triton" if cuda else "torch"
    gen = torch.Generator(device).manual_seed(1)
    hidden = torch.randn(n, args.hidden, device=device, dtype=args.dtype, generator=gen).requires_grad_()
    weight = torch.randn(v, args.hidden, device=device, dtype=args.dtype, generator=gen) / args.hidden ** 0.5
    ids = torch.randint(0, v, (n,), device=device, generator=gen)
    adv, mask = torch.randn(n, device=device, generator=gen), torch.ones(n, device=device)
    kw = dict(chunk_size=args.chunk_size, backend=backend)
    blogp = chunked_token_logprobs(hidden.detach(), weight, ids, **kw)[0] + 0.1 * torch.randn(n, device=device,
                                                                                               generator=gen)
    chunks = [slice(i, i + args.chunk_size) for i in range(0, n, args.chunk_size)]
    grad_chunk = torch.randn(min(n, args.chunk_size), v, device=device, dtype=args.dtype, generator=gen)
    one_read = n * v * hidden.element_size()
    flops = 2 * n * args.hidden * v

    def lm_head_fwd():
        with torch.no_grad():
            for c in chunks:
                hidden[c] @ weight.T

    def lm_head_bwd():
        for c in chunks:
            grad_chunk[: c.stop - c.start] @ weight

    def chunked_grad():
        torch.autograd.grad(chunked_policy_loss(hidden, weight, ids, blogp, adv, mask, "grpo", **kw)[0], hidden)

    def eager_grad():
        torch.autograd.grad(reference_policy_loss(hidden @ weight.T, ids, blogp, adv, mask, "grpo")[0], hidden)

    def nothing():
        pass

    rows = [
        measure("lm_head matmul fwd (per chunk)", lm_head_fwd, nothing, one_read, args, cuda, peak),
        measure("lm_head matmul d_hidden (per chunk)", lm_head_bwd, nothing, one_read, args, cuda, peak),
        measure("eager lm_head+loss fwd+bwd", eager_grad, nothing, 3 * one_read, args, cuda, peak),
        measure("chunked logprobs+entropy", lambda: torch.no_grad()(chunked_token_logprobs)(hidden, weight, ids, **kw),
                nothing, one_read, args, cuda, peak),
        measure("chunked loss fwd+bwd", chunked_grad, nothing, 3 * one_read, args, cuda, peak),
    ]
    times = {row["label"]: row.get("ms") for row in rows}
    mm_fwd, mm_bwd = times["lm_head matmul fwd (per chunk)"], times["lm_head matmul d_hidden (per chunk)"]
    if mm_fwd and mm_bwd:
        print(f"  lm_head matmul {flops / mm_fwd / 1e9:.1f} TFLOP/s; chunked / its matmuls: forward "
              f"{times['chunked logprobs+entropy'] / mm_fwd:.2f}x, fwd+bwd "
              f"{times['chunked loss fwd+bwd'] / (2 * mm_fwd + mm_bwd):.2f}x (of 2 fwd + 1 bwd matmuls)")
    return rows


def git_commit():
    """(commit, whether the checkout has uncommitted changes; None in a copy without git)."""
    try:
        status = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
        dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    except OSError:
        dirty = None
    return storage.git_commit(), dirty


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--chunk-size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on the CPU through the torch paths")
    args = parser.parse_args()
    if args.cpu_smoke:
        args.tokens, args.vocab, args.hidden, args.chunk_size, args.repeats = [8, 24], 1000, 64, 16, 2
        device = torch.device("cpu")
    elif torch.cuda.is_available():
        device = torch.device("cuda")
    else:
        print("ratio_op benchmark: no CUDA device here; nothing to measure (try --cpu-smoke to check the script).")
        return
    args.dtype = torch.float32 if args.cpu_smoke else torch.bfloat16
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu-smoke"
    peak = hbm_peak(name)
    print(f"device {name}; HBM peak {'unknown' if peak is None else f'{peak / 1e12:.2f} TB/s'}; V={args.vocab}, "
          f"{args.dtype}, hidden {args.hidden}, chunk {args.chunk_size}")
    results = []
    for n in args.tokens:
        print(f"N = {n} (logits {n * args.vocab * (4 if args.cpu_smoke else 2) / 1e9:.2f} GB)")
        results.append({"tokens": n, "rows": logits_rows(n, args.vocab, args, device, peak)
                        + lm_head_rows(n, args.vocab, args, device, peak)})
    write_json(name, peak, args, results)


def write_json(name, peak, args, results):
    commit, dirty = git_commit()
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    record = {"device": name, "hbm_peak_bytes_per_s": peak, "git_commit": commit, "git_dirty": dirty,
              "command": " ".join(sys.argv), "torch": torch.__version__, "triton": triton_version,
              "vocab": args.vocab, "hidden": args.hidden, "chunk_size": args.chunk_size, "dtype": str(args.dtype),
              "repeats": args.repeats, "results": results}
    slug = "".join(ch if ch.isalnum() else "-" for ch in name).strip("-")
    if args.cpu_smoke:
        path = pathlib.Path(tempfile.gettempdir()) / f"ratio_op-{slug}-{commit[:12]}.json"
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {path}")
        return
    sys.path.insert(0, str(ROOT / "bench"))
    from record import save_result

    save_result("ratio_op", slug, record)


if __name__ == "__main__":
    main()
