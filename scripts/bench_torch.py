#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention with its FlashAttention-2 and cuDNN backends on the
standard grid (16k tokens, heads * d = 2048), timed with CUDA events (median of many runs after
warm-up), and the device's bf16 matrix-multiply rate. Runs on the device machine only; prints CSV rows
backend,direction,seqlen,d,causal,ms,tflops that scripts/gpu-check.sh joins with flashattn's."""
import argparse
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F

BACKENDS = {"torch-fa2": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION}


def median_ms(fn, warmup=5, repeat=30):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


GEMM_FLOPS = 2 * 8192**3


def gemm_ms(timer):
    """The time of one bf16 8192^3 matrix product, as timer(fn) measures it."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    return timer(lambda: a @ b)


def attention_flops(batch, heads, seqlen, d, causal, backward=False):
    """The matrix products' flops of one call: the forward's two, the backward's five (2.5x)."""
    pairs = seqlen * (seqlen + 1) / 2 if causal else seqlen * seqlen
    return 4 * batch * heads * pairs * d * (2.5 if backward else 1.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    parser.add_argument("--dims", default="64,128,256")
    parser.add_argument("--bwd", action="store_true")
    args = parser.parse_args()

    ms = gemm_ms(median_ms)
    print(f"gemm,bf16,8192,8192,0,{ms:.4f},{GEMM_FLOPS / ms / 1e9:.1f}", flush=True)

    for d in map(int, args.dims.split(",")):
        heads = 2048 // d
        for seqlen in map(int, args.seqlens.split(",")):
            batch = max(1, args.tokens // seqlen)
            shape = (batch, heads, seqlen, d)
            q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=args.bwd)
                       for _ in range(3))
            for causal in (False, True):
                flops = attention_flops(batch, heads, seqlen, d, causal)
                for name, backend in BACKENDS.items():
                    try:
                        with sdpa_kernel(backend):
                            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            ms = median_ms(fwd)
                            print(f"{name},fwd,{seqlen},{d},{int(causal)},{ms:.4f},{flops / ms / 1e9:.1f}",
                                  flush=True)
                            if args.bwd:
                                out = fwd()
                                grad = torch.randn_like(out)
                                bwd = lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
                                ms = median_ms(bwd)
                                bwd_flops = attention_flops(batch, heads, seqlen, d, causal, backward=True)
                                print(f"{name},bwd,{seqlen},{d},{int(causal)},{ms:.4f},"
                                      f"{bwd_flops / ms / 1e9:.1f}", flush=True)
                    except RuntimeError as e:  # a backend that refuses a shape
                        print(f"{name},fwd,{seqlen},{d},{int(causal)},nan,nan  # {str(e)[:60]}", flush=True)
            del q, k, v
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
