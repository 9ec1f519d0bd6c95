#!/usr/bin/env python3
"""flashattn (its C API through scripts/flashattn_ctypes.py), PyTorch's FlashAttention-2 and cuDNN
backends of scaled_dot_product_attention (with --sm80 our cuda-sm80 forward too, with --variant
other builds of our library) on the same tensors at each point of the standard grid (16k tokens,
heads * d = 2048, bf16; --tokens and --heads change the batch and heads), timed in alternation: per
point, `rounds` rounds of one batch of `repeat` back-to-back calls per library (CUDA events around
the batch, so that host overhead between calls is hidden as in an engine's stream), each library's
time the median of its rounds. Alternating within a point keeps the GPU's clock drift (its
temperature follows the last minutes of work) from favouring whichever library a grid-by-grid
comparison runs first. Each round takes the libraries in a new random order, drawn afresh in every
round of every point and process (--seed repeats a run's), so that no library always follows the
same one: a rotation of one list kept each library's predecessor, and one build timed right after
another of the same kernel ran it 1.4-3.2% faster at d 256 without a mask, 512 keys, in four
processes of four; one shuffle per round index, the same at every point and in every process, gave
one build of a kernel 0.970x another's at d 256 8k in two processes of two (docs/performance.md,
sm90a v47 and the grid after v45). Each timed batch follows, with no gap, untimed calls of the same
library for about --warmup-ms: under the power cap a batch starts at the clock the previous
library's batch left, and the calls timed one by one (--per-call; d 128, 16k keys) showed our
backward's first three calls of a batch 19 / 11 / 3.5% slower than its last ones without a mask
(FA2's 3 / 0 / 0%), and both ramping over 60-80 ms under a causal mask (docs/performance.md):
without the warm-up a batch times the previous library's power draw as much as its own. The forward
of the peers is timed on tensors that do not require gradients (their fastest, inference kernels);
ours writes lse as well. Prints the bf16 GEMM rate (its batches warmed up alike) and a table. Runs
on the device machine only."""
import argparse
import contextlib
import math
import os
import random
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn_ctypes as fc  # noqa: E402
from bench_torch import BACKENDS, GEMM_FLOPS, attention_flops, gemm_ms  # noqa: E402


def batch_ms(fn, repeat, backend=None, warmup=0):
    """Mean time of `repeat` back-to-back calls, one pair of events around them, after `warmup` untimed
    calls that run right before them."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        for _ in range(warmup):
            fn()
        start.record()
        for _ in range(repeat):
            fn()
        end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeat


def call_ms(fn, repeat, backend=None, warmup=0):
    """The time of each of `repeat` back-to-back calls (after `warmup` untimed ones, as batch_ms): an
    event between each two (recording one waits for nothing, so the calls still run back to back)."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(repeat + 1)]
    with sdpa_kernel(backend) if backend is not None else contextlib.nullcontext():
        for _ in range(warmup):
            fn()
        events[0].record()
        for event in events[1:]:
            fn()
            event.record()
    events[-1].synchronize()
    return [a.elapsed_time(b) for a, b in zip(events, events[1:])]


def warmup_calls(fn, warmup_ms, backend=None):
    """Untimed calls that fill about warmup_ms before a batch, from the length of one warm call (after a
    throw-away batch, where a new shape's one-time host work runs: cuDNN builds its graph)."""
    batch_ms(fn, 3, backend)
    return math.ceil(warmup_ms / batch_ms(fn, 3, backend)) if warmup_ms > 0 else 0


def median_batch_ms(fn, rounds, repeat, warmup_ms):
    """The median over rounds of batch_ms, each batch after about warmup_ms of the same calls."""
    warmup = warmup_calls(fn, warmup_ms)
    return statistics.median(batch_ms(fn, repeat, warmup=warmup) for _ in range(rounds))


def make_input(shape, data, layout):
    """A (batch, heads, seqlen, d) tensor, stored in that order or as (batch, seqlen, heads, d)."""
    b, h, s, d = shape
    stored = (b, h, s, d) if layout == "bhsd" else (b, s, h, d)
    t = torch.empty(stored, device="cuda", dtype=torch.bfloat16)
    t.normal_() if data == "normal" else t.uniform_(-1, 1)
    return t if layout == "bhsd" else t.transpose(1, 2)


class Ours:
    """flashattn's forward and backward on torch's (batch, heads, seqlen, d) tensors, which the C API
    takes as strided (batch, seqlen, heads, d) views."""

    def __init__(self, lib, backend, q, k, v, out, lse, dout, dq, dk, dv, causal):
        self.lib = lib

        def view(t):
            b, h, s, d = t.shape
            return fc.tensor(t.data_ptr(), "bf16", (b, s, h, d), (t.stride(0), t.stride(2), t.stride(1), 1))

        stream = torch.cuda.current_stream().cuda_stream
        self.fwd = lib.params("fwd")
        f = self.fwd
        f.q, f.k, f.v, f.out = view(q), view(k), view(v), view(out)
        f.lse = fc.tensor(lse.data_ptr(), "f32", tuple(lse.shape), tuple(lse.stride()))
        f.opts.causal = int(causal)
        f.exec.backend, f.exec.stream = fc.BACKENDS[backend], stream
        self.workspaces = [self.attach("fwd", f)]
        self.bwd = None
        if dq is not None:
            self.bwd = lib.params("bwd")
            b = self.bwd
            b.q, b.k, b.v, b.out, b.dout, b.lse = f.q, f.k, f.v, f.out, view(dout), f.lse
            b.dq, b.dk, b.dv = view(dq), view(dk), view(dv)
            b.opts.causal = int(causal)
            b.exec.backend, b.exec.stream = fc.BACKENDS[backend], stream
            self.workspaces.append(self.attach("bwd", b))

    def attach(self, direction, p):
        size = self.lib.workspace_size(direction, p)
        buffer = torch.empty(max(size, 1), dtype=torch.uint8, device="cuda")
        p.exec.workspace, p.exec.workspace_size = buffer.data_ptr(), size
        return buffer

    def run(self, direction):
        self.lib.run(direction, self.fwd if direction == "fwd" else self.bwd)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lib", required=True, help="path of libflashattn.so")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cuda-sm80"])
    parser.add_argument("--tokens", type=int, default=16384, help="query rows per point: batch = tokens / seqlen")
    parser.add_argument("--heads", type=int,
                        help="heads at every point (default 2048 / d, the standard grid): other counts change how the "
                             "work items divide among the SMs at the same length")
    parser.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    parser.add_argument("--dims", default="64,128,256")
    parser.add_argument("--masks", default="0,1", help="the causal flags timed: 0 (none), 1 (causal) or both")
    parser.add_argument("--bwd", action="store_true", help="the backward too")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--data", default="normal", choices=["normal", "uniform"],
                        help="inputs N(0, 1) (torch.randn, as `flashattn bench`) or uniform in [-1, 1] (as the tests)")
    parser.add_argument("--layout", default="bhsd", choices=["bhsd", "bshd"],
                        help="the memory order of q, k, v (bshd: as `flashattn bench`; the peers get views)")
    parser.add_argument("--warmup-ms", type=float, default=100.0,
                        help="untimed calls of the same library, about this many ms of them, right before each "
                             "timed batch (0: none; the batch then starts at the clock the previous library left)")
    parser.add_argument("--sm80", action="store_true",
                        help="also our cuda-sm80 backend's forward (the A100-class kernels on this GPU), in two more "
                             "columns (the backward is the same kernel on either backend)")
    parser.add_argument("--variant", action="append", default=[], metavar="PATH",
                        help="another build of libflashattn.so (repeatable), timed in the same alternation on the "
                             "same tensors: its TFLOP/s and its ratio to --lib's in two more columns each (an A / B "
                             "comparison free of the spread between processes)")
    parser.add_argument("--seed", type=int, help="the seed of the libraries' order in each round "
                        "(default: a fresh one, printed in the header)")
    parser.add_argument("--per-call", action="store_true",
                        help="time each call of a batch too (an event between calls) and print, per library, "
                             "each position's median over the rounds: whether a batch's first calls differ")
    args = parser.parse_args()
    lib = fc.Library(args.lib)
    variants = [fc.Library(path) for path in args.variant]
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    order_rng = random.Random(seed)
    torch.manual_seed(0)

    # The GEMM timed as the libraries are, each batch after about --warmup-ms of its own calls, so that
    # the % gemm column compares rates at the same power state.
    gemm = GEMM_FLOPS / gemm_ms(lambda fn: median_batch_ms(fn, args.rounds, args.repeat, args.warmup_ms)) / 1e9
    print(f"bf16 GEMM 8192^3: {gemm:.1f} TFLOP/s (each batch after about {args.warmup_ms:g} ms of its own calls)")
    print(f"each time: the median of {args.rounds} rounds of {args.repeat} back-to-back calls, libraries in "
          f"alternation, each batch after about {args.warmup_ms:g} ms of the same library's calls; flashattn backend "
          f"{args.backend}; inputs {args.data}, {args.layout}; order seed {seed}"
          + (f"; {args.heads} heads" if args.heads else ""))
    # Extra columns: our sm80 forward (--sm80), then each --variant.
    extra_header = f" {'sm80':>7} {'sm80 x fa2':>10}" if args.sm80 else ""
    extra_header += "".join(f" {f'v{i}':>7} {f'v{i} / ours':>10}" for i in range(1, len(variants) + 1))
    print(f"{'dir':>3} {'d':>4} {'seqlen':>6} {'causal':>6} {'flashattn':>9} {'fa2':>7} {'cudnn':>7} {'x fa2':>6} "
          f"{'x cudnn':>7} {'% gemm':>6}{extra_header}", flush=True)
    directions = ["fwd", "bwd"] if args.bwd else ["fwd"]
    for direction in directions:
        for causal in [mask == "1" for mask in args.masks.split(",")]:
            for d in map(int, args.dims.split(",")):
                for seqlen in map(int, args.seqlens.split(",")):
                    batch, heads = max(1, args.tokens // seqlen), args.heads or 2048 // d
                    shape = (batch, heads, seqlen, d)
                    q, k, v, dout = (make_input(shape, args.data, args.layout) for _ in range(4))
                    out = torch.empty_like(q)  # q's layout
                    lse = torch.empty((batch, heads, seqlen), device="cuda", dtype=torch.float32)
                    grads = [torch.empty_like(q) for _ in range(3)] if direction == "bwd" else [None] * 3
                    ours = Ours(lib, args.backend, q, k, v, out, lse, dout, *grads, causal)
                    fns = {"flashattn": (lambda: ours.run(direction), None)}
                    others = [Ours(vlib, args.backend, q, k, v, out, lse, dout, *grads, causal) for vlib in variants]
                    for i, other in enumerate(others, 1):
                        fns[f"v{i}"] = (lambda other=other: other.run(direction), None)
                    if direction == "fwd":
                        if args.sm80:
                            sm80 = Ours(lib, "cuda-sm80", q, k, v, out, lse, None, None, None, None, causal)
                            fns["flashattn-sm80"] = (lambda: sm80.run("fwd"), None)
                        for name, backend in BACKENDS.items():
                            fns[name] = (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), backend)
                    else:
                        ours.run("fwd")  # out and lse for our backward
                        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
                        for name, backend in BACKENDS.items():
                            with sdpa_kernel(backend):
                                o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
                            fns[name] = (lambda o=o: torch.autograd.grad(o, (qg, kg, vg), dout, retain_graph=True),
                                         backend)
                    times = {name: [] for name in fns}
                    per_call = {name: [] for name in fns}  # with --per-call: each round's call times
                    warmup = {}  # untimed calls before each of a library's batches (--warmup-ms)
                    for name, (fn, backend) in fns.items():
                        try:
                            warmup[name] = warmup_calls(fn, args.warmup_ms, backend)
                        except RuntimeError as e:  # a peer that refuses a shape
                            print(f"# {name}: {str(e)[:80]}", file=sys.stderr)
                            times[name] = None
                    names = list(fns)
                    for r in range(args.rounds):
                        for name in order_rng.sample(names, len(names)):
                            fn, backend = fns[name]
                            if times[name] is None:
                                continue
                            if args.per_call:
                                calls = call_ms(fn, args.repeat, backend, warmup[name])
                                per_call[name].append(calls)
                                times[name].append(statistics.fmean(calls))
                            else:
                                times[name].append(batch_ms(fn, args.repeat, backend, warmup[name]))
                    flops = attention_flops(batch, heads, seqlen, d, causal, backward=direction == "bwd")
                    tflops = {name: flops / statistics.median(t) / 1e9 if t else float("nan")
                              for name, t in times.items()}
                    ours_tf, fa2, cudnn = tflops["flashattn"], tflops["torch-fa2"], tflops["torch-cudnn"]
                    sm80_tf = tflops.get("flashattn-sm80", float("nan"))
                    extra_columns = (f" {sm80_tf:>7.1f} {sm80_tf / fa2:>10.3f}" if args.sm80 and direction == "fwd"
                                    else "")
                    extra_columns += "".join(f" {tflops[f'v{i}']:>7.1f} {tflops[f'v{i}'] / ours_tf:>10.3f}"
                                            for i in range(1, len(others) + 1))
                    print(f"{direction:>3} {d:>4} {seqlen:>6} {int(causal):>6} {ours_tf:>9.1f} {fa2:>7.1f} {cudnn:>7.1f} "
                          f"{ours_tf / fa2:>6.3f} {ours_tf / cudnn:>7.3f} "
                          f"{100 * ours_tf / gemm:>6.1f}{extra_columns}", flush=True)
                    for name, rounds in per_call.items():
                        if rounds:
                            medians = (statistics.median(r[i] for r in rounds) for i in range(args.repeat))
                            print(f"#   {name} per call (ms, median of {len(rounds)} rounds): "
                                  + " ".join(f"{ms:.3f}" for ms in medians), flush=True)
                    del ours, others, fns, q, k, v, dout, out, lse, grads
                    sm80 = None
                    torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
