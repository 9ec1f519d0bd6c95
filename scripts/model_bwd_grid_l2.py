#!/usr/bin/env python3
"""A model of the causal single-pass backward's grid order (docs/performance.md, backward v23): how
long the grid takes in whole query steps, and how often a step's query block misses in L2, with the
grid heads first or tiles first. Each CTA (sequence, head, key tile j) sweeps the query blocks of
the causal mask from its diagonal to the end, one time unit per step; each step reads its block's Q,
dout and dq accumulator; the SMs take one CTA each, in grid order, as they come free; the L2 is LRU
over whole blocks. A model, not a simulator: no clock, bandwidth or partial tiles. Prints a table
over the standard grid (16k tokens, heads * d = 2048). Runs anywhere (no GPU)."""
import argparse
import collections
import heapq


def run(order, seqlen, heads, batch, sms, l2_bytes, block_n, block_m, block_bytes):
    """(reads, misses, span in steps) of one causal call."""
    key_tiles, query_blocks = seqlen // block_n, seqlen // block_m
    steps_per_key_tile = block_n // block_m
    if order == "heads":
        grid = [(b, h, j) for b in range(batch) for j in range(key_tiles) for h in range(heads)]
    else:
        grid = [(b, h, j) for b in range(batch) for h in range(heads) for j in range(key_tiles)]
    capacity = l2_bytes // block_bytes
    lru = collections.OrderedDict()
    reads = misses = span = 0
    pending = iter(grid)
    running = []  # (time, tie-break, sequence, head, key tile, next query block)
    tie = 0

    def start(time):
        nonlocal tie
        cta = next(pending, None)
        if cta is not None:
            b, h, j = cta
            heapq.heappush(running, (time, tie, b, h, j, j * steps_per_key_tile))
            tie += 1

    for _ in range(sms):
        start(0)
    while running:
        time, _, b, h, j, block = heapq.heappop(running)
        if block >= query_blocks:
            span = max(span, time)
            start(time)
            continue
        reads += 1
        key = (b, h, block)
        if key in lru:
            lru.move_to_end(key)
        else:
            misses += 1
            lru[key] = True
            if len(lru) > capacity:
                lru.popitem(last=False)
        heapq.heappush(running, (time + 1, tie, b, h, j, block + 1))
        tie += 1
    return reads, misses, span


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", default="64,128")
    parser.add_argument("--seqlens", default="4096,8192,16384")
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--l2-mb", type=float, default=50.0)
    parser.add_argument("--block-n", type=int, default=128, help="keys per CTA")
    parser.add_argument("--block-m", type=int, default=64, help="query rows per step")
    args = parser.parse_args()
    print("| d | keys | heads first: misses | span | tiles first: misses | span | span tiles / heads |")
    print("|---|---|---|---|---|---|---|")
    for d in map(int, args.dims.split(",")):
        # A step's block: Q and dout rows in 16 bits, the dq accumulator's in 32.
        block_bytes = args.block_m * d * (2 + 2 + 4)
        for seqlen in map(int, args.seqlens.split(",")):
            result = {order: run(order, seqlen, 2048 // d, 16384 // seqlen, args.sms, int(args.l2_mb * 2**20),
                                 args.block_n, args.block_m, block_bytes)
                      for order in ("heads", "tiles")}
            (hr, hm, hs), (tr, tm, ts) = result["heads"], result["tiles"]
            print(f"| {d} | {seqlen // 1024}k | {hm / hr:.1%} | {hs} | {tm / tr:.1%} | {ts} | {ts / hs:.3f} |")


if __name__ == "__main__":
    main()
