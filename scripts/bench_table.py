#!/usr/bin/env python3
"""Joins `flashattn bench --csv` with scripts/bench_torch.py's rows into one table: TFLOP/s of
flashattn, PyTorch's FlashAttention-2 and cuDNN backends, and flashattn's ratios to each. An
optional third file, `flashattn bench --backend cuda-sm80 --csv`, adds the sm80 kernels' column
(on a Hopper GPU the first file's forward is the sm90a kernel)."""
import csv
import sys


def read_ours(path):
    rows = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (int(row["d"]), int(row["seqlen"]), int(row["causal"]))
            rows[(key, "fwd")] = float(row["fwd_tflops"])
            if row.get("bwd_tflops"):
                rows[(key, "bwd")] = float(row["bwd_tflops"])
    return rows


def main(flashattn_csv, torch_csv, sm80_csv=None):
    ours = read_ours(flashattn_csv)
    sm80 = read_ours(sm80_csv) if sm80_csv else {}
    peers, gemm = {}, None
    with open(torch_csv) as f:
        for line in f:
            fields = line.split("#")[0].strip().split(",")
            if len(fields) < 7:
                continue
            if fields[0] == "gemm":
                gemm = float(fields[6])
                continue
            name, direction, seqlen, d, causal, _, tflops = fields[:7]
            peers[((int(d), int(seqlen), int(causal)), direction, name)] = float(tflops)

    print(f"bf16 GEMM 8192^3: {gemm} TFLOP/s" if gemm else "bf16 GEMM: not measured")
    header = (f"{'dir':>3} {'d':>4} {'seqlen':>6} {'causal':>6} {'flashattn':>9} {'sm80':>7} {'fa2':>7} {'cudnn':>7} "
              f"{'x fa2':>6} {'x cudnn':>7}")
    print(header)
    for (key, direction), value in sorted(ours.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        fa2 = peers.get((key, direction, "torch-fa2"), float("nan"))
        cudnn = peers.get((key, direction, "torch-cudnn"), float("nan"))
        portable = sm80.get((key, direction), float("nan"))
        d, seqlen, causal = key
        print(f"{direction:>3} {d:>4} {seqlen:>6} {causal:>6} {value:>9.1f} {portable:>7.1f} {fa2:>7.1f} {cudnn:>7.1f} "
              f"{value / fa2:>6.2f} {value / cudnn:>7.2f}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
