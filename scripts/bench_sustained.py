#!/usr/bin/env python3
"""Sustained use: flashattn (its C API through scripts/flashattn_ctypes.py) against one PyTorch
backend at the long points of the standard grid (16k tokens, heads * d = 2048, bf16), in batches of
back-to-back calls about --seconds long each, so that the GPU reaches the clock its power cap allows,
while `nvidia-smi` samples the SM clock and the power draw every 50 ms. The forward is compared with
cuDNN's (on tensors that need no gradient), the backward with FlashAttention-2's (autograd through
scaled_dot_product_attention, after our forward has written out and lse). Each trial takes fresh
tensors and runs each library's batch --reps times, the libraries' order swapped every trial; a
point's figure is the median over its batches, with the median clock and power during them. With
--variant, other builds of the library take their batches in the same order, reversed every trial
(an even --trials puts each first as often as last; their columns and their ratio to ours follow
the peer's): whether a change's cycles turn into time at the clock the power cap allows
(docs/performance.md, sm90a v78).
The burst grids (bench_interleaved.py) time 10 calls at whatever clock the previous batch left;
docs/performance.md has both kinds side by side. Runs on the device machine only."""
import argparse
import collections
import datetime
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashattn_ctypes as fc  # noqa: E402
from bench_interleaved import Ours, batch_ms, make_input  # noqa: E402
from bench_torch import attention_flops  # noqa: E402

PEER = {"fwd": ("cudnn", SDPBackend.CUDNN_ATTENTION), "bwd": ("fa2", SDPBackend.FLASH_ATTENTION)}


def timed_batch(fn, calls):
    """(start time, end time, ms per call) of a batch of back-to-back calls (batch_ms), the times
    for matching nvidia-smi's samples."""
    torch.cuda.synchronize()
    t0 = datetime.datetime.now()
    ms = batch_ms(fn, calls)
    return t0, datetime.datetime.now(), ms


def point_fns(lib, variants, direction, d, seqlen, causal):
    """Our call, each variant's (v1, v2, ...) and the peer's on fresh tensors of one point."""
    b, h = 16384 // seqlen, 2048 // d
    q, k, v, dout = (make_input((b, h, seqlen, d), "normal", "bhsd") for _ in range(4))
    out = torch.empty_like(q)
    lse = torch.empty((b, h, seqlen), device="cuda", dtype=torch.float32)
    grads = [torch.empty_like(q) for _ in range(3)] if direction == "bwd" else [None] * 3
    ours = Ours(lib, "cuda", q, k, v, out, lse, dout, *grads, causal)
    backend = PEER[direction][1]
    if direction == "fwd":
        def peer():
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    else:
        ours.run("fwd")
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        with sdpa_kernel(backend):
            o = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

        def peer():
            with sdpa_kernel(backend):
                torch.autograd.grad(o, (qg, kg, vg), dout, retain_graph=True)
    fns = {"ours": lambda: ours.run(direction), PEER[direction][0]: peer}
    for i, vlib in enumerate(variants, 1):
        other = Ours(vlib, "cuda", q, k, v, out, lse, dout, *grads, causal)
        fns[f"v{i}"] = lambda other=other: other.run(direction)
    return fns


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", required=True, help="path of libflashattn.so")
    parser.add_argument("--dir", default="fwd", choices=["fwd", "bwd"])
    parser.add_argument("--dims", default="64,128,256")
    parser.add_argument("--seqlens", default="8192,16384")
    parser.add_argument("--causal", default="0,1", help="which masks: 0, 1 or both")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2, help="batches per library and trial")
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one batch")
    parser.add_argument("--variant", action="append", default=[], metavar="PATH",
                        help="another libflashattn.so, timed beside ours (v1, v2, ... in the table)")
    args = parser.parse_args()
    lib = fc.Library(args.lib)
    variants = [fc.Library(path) for path in args.variant]
    peer_name = PEER[args.dir][0]

    samples = tempfile.NamedTemporaryFile("w+", suffix=".csv")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw",
                            "--format=csv,noheader,nounits", "-lms", "50"], stdout=samples)
    time.sleep(1)
    batches = []  # (point, library, start, end, TFLOP/s)
    for causal in (c == "1" for c in args.causal.split(",")):
        for d in (int(x) for x in args.dims.split(",")):
            for seqlen in (int(x) for x in args.seqlens.split(",")):
                point = (d, seqlen, int(causal))
                flops = attention_flops(16384 // seqlen, 2048 // d, seqlen, d, causal, backward=args.dir == "bwd")
                for trial in range(args.trials):
                    fns = point_fns(lib, variants, args.dir, d, seqlen, causal)
                    for fn in fns.values():  # warm-up, and the length of one call
                        fn()
                    _, _, ms = timed_batch(fns["ours"], 2)
                    calls = max(5, math.ceil(args.seconds * 1e3 / ms))
                    order = list(fns) if trial % 2 == 0 else list(fns)[::-1]
                    for _ in range(args.reps):
                        for name in order:
                            t0, t1, ms = timed_batch(fns[name], calls)
                            batches.append((point, name, t0, t1, flops / ms / 1e9))
                    del fns
                    torch.cuda.empty_cache()
    time.sleep(0.3)
    smi.terminate()
    smi.wait()
    samples.seek(0)
    rows = []
    for line in samples:
        fields = [x.strip() for x in line.split(",")]
        try:
            rows.append((datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f"),
                         float(fields[1]), float(fields[2])))
        except (ValueError, IndexError):
            pass  # a line nvidia-smi wrote half when it was stopped

    per = collections.defaultdict(lambda: collections.defaultdict(list))
    for point, name, t0, t1, tflops in batches:
        during = [r for r in rows if t0 <= r[0] <= t1]
        clock = statistics.median(r[1] for r in during) if during else float("nan")
        power = statistics.median(r[2] for r in during) if during else float("nan")
        per[point][name].append((tflops, clock, power))
    print(f"sustained {args.dir}: batches of about {args.seconds} s, {args.trials} trials x {args.reps} per library;"
          " medians (TFLOP/s, SM MHz, W)")
    names = [f"v{i}" for i in range(1, len(variants) + 1)]
    print(f"{'d':>4} {'seqlen':>6} {'causal':>6} {'ours':>7} {'MHz':>5} {'W':>4} {peer_name:>7} {'MHz':>5} {'W':>4}"
          f" {'ours/' + peer_name:>10}" + "".join(f" {n:>7} {'MHz':>5} {'W':>4} {n + '/ours':>8}" for n in names))
    for (d, seqlen, causal), by in sorted(per.items()):
        med = {n: [statistics.median(x[i] for x in xs) for i in range(3)] for n, xs in by.items()}
        o, p = med["ours"], med[peer_name]
        line = (f"{d:4d} {seqlen:6d} {causal:6d} {o[0]:7.1f} {o[1]:5.0f} {o[2]:4.0f}"
                f" {p[0]:7.1f} {p[1]:5.0f} {p[2]:4.0f} {o[0] / p[0]:10.3f}")
        for n in names:
            x = med[n]
            line += f" {x[0]:7.1f} {x[1]:5.0f} {x[2]:4.0f} {x[0] / o[0]:8.3f}"
        print(line)


if __name__ == "__main__":
    main()
