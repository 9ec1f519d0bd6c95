#!/usr/bin/env python3
"""Joins `flashattn bench --csv` with scripts/bench_torch.py's rows into one table: TFLOP/s of
flashattn, PyTorch's FlashAttention-2 and cuDNN backends, and flashattn's ratios to each. Optional
`flashattn bench --backend cuda-sm80 --csv` files add the sm80 kernels' column (on a Hopper GPU the
first files' forward is the sm90a kernel). Given several files of a kind (rounds run in
alternation), each cell is the median over the rounds, and a last column gives the lowest and
highest of the rounds' own cuDNN ratios (round r's flashattn against round r's cuDNN)."""
import argparse
import csv
import math
import statistics


def read_ours(path):
    rows = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (int(row["d"]), int(row["seqlen"]), int(row["causal"]))
            rows[(key, "fwd")] = float(row["fwd_tflops"])
            if row.get("bwd_tflops"):
                rows[(key, "bwd")] = float(row["bwd_tflops"])
    return rows


def read_torch(path):
    """(point, direction, backend) -> TFLOP/s, and the GEMM rate (None if absent)."""
    peers, gemm = {}, None
    with open(path) as f:
        for line in f:
            fields = line.split("#")[0].strip().split(",")
            if len(fields) < 7:
                continue
            if fields[0] == "gemm":
                gemm = float(fields[6])
                continue
            name, direction, seqlen, d, causal, _, tflops = fields[:7]
            peers[((int(d), int(seqlen), int(causal)), direction, name)] = float(tflops)
    return peers, gemm


def median(values):
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else float("nan")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ours", nargs="+", required=True)
    parser.add_argument("--torch", nargs="+", required=True)
    parser.add_argument("--sm80", nargs="*", default=[])
    args = parser.parse_args()
    ours = [read_ours(p) for p in args.ours]
    sm80 = [read_ours(p) for p in args.sm80]
    torch_runs = [read_torch(p) for p in args.torch]
    peers = [r[0] for r in torch_runs]
    gemms = [r[1] for r in torch_runs if r[1] is not None]
    rounds = len(ours)

    gemm = median(gemms) if gemms else None
    print(f"bf16 GEMM 8192^3: {gemm:.1f} TFLOP/s" if gemm else "bf16 GEMM: not measured", end="")
    print(f" (median of {len(gemms)}: {', '.join(f'{g:.1f}' for g in gemms)})" if len(gemms) > 1 else "")
    if rounds > 1:
        print(f"each cell: the median of {rounds} rounds")
    header = (f"{'dir':>3} {'d':>4} {'seqlen':>6} {'causal':>6} {'flashattn':>9} {'sm80':>7} {'fa2':>7} {'cudnn':>7} "
              f"{'x fa2':>6} {'x cudnn':>7}")
    print(header + (f" {'x cudnn per round':>17}" if rounds > 1 else ""))
    for key, direction in sorted(ours[0], key=lambda kd: (kd[1], kd[0])):
        point = (key, direction)
        value = median([run.get(point, float("nan")) for run in ours])
        portable = median([run.get(point, float("nan")) for run in sm80])
        fa2 = median([run.get((key, direction, "torch-fa2"), float("nan")) for run in peers])
        cudnn = median([run.get((key, direction, "torch-cudnn"), float("nan")) for run in peers])
        d, seqlen, causal = key
        line = (f"{direction:>3} {d:>4} {seqlen:>6} {causal:>6} {value:>9.1f} {portable:>7.1f} {fa2:>7.1f} {cudnn:>7.1f} "
                f"{value / fa2:>6.2f} {value / cudnn:>7.2f}")
        if rounds > 1:
            per_round = [o.get(point, float("nan")) / p.get((key, direction, "torch-cudnn"), float("nan"))
                         for o, p in zip(ours, peers)]
            line += f" {min(per_round):>8.2f}-{max(per_round):.2f}"
        print(line)


if __name__ == "__main__":
    main()
