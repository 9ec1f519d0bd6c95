#!/usr/bin/env python3
"""A model of the sm90a forward's persistent schedule under a causal mask (docs/performance.md,
sm90a v68): how long a call takes, in key-tile units, against an ideal that spreads the work evenly,
with the items in fwd_tile's order (a head's query tiles longest first, head after head) or with the
last wave's worth of heads longest first across them (schedule_item). Each work item costs its key
tiles plus a fixed overhead; the first items go to the workers (CTAs, or clusters of two) in order,
the rest to whichever worker comes free first. A model, not a simulator: no clock, memory or
overlap between items. Prints a table over the standard grid (16k tokens, heads * d = 2048) with the
tile choices of tile_size.h. Runs anywhere (no GPU)."""
import argparse
import heapq
import math


def span(lengths, workers, overhead):
    """When the last worker finishes, items dealt in list order to the first worker free."""
    free = [(0.0, w) for w in range(workers)]
    for length in lengths:
        time, w = heapq.heappop(free)
        heapq.heappush(free, (time + length + overhead, w))
    return max(time for time, _ in free)


def tiles(d, seqlen, sms):
    """(query rows per item, keys per tile, workers, whether a worker is a cluster of two)."""
    if d == 64 and seqlen >= 2048:
        return 192, 128, sms, False  # the wide tile
    if d in (128, 256) and seqlen >= 2048:
        return 256, 80 if d == 256 else 128, sms // 2, True  # the pairs
    return 128, 128, sms, False


def order(heads, num_m, tail_heads):
    """The query tile (0 = first) at each position of the schedule."""
    tail_start = (heads - tail_heads) * num_m
    out = []
    for t in range(heads * num_m):
        if t >= tail_start:  # schedule_item
            at = t - tail_start
            t = tail_start + at % tail_heads * num_m + at // tail_heads
        out.append(num_m - 1 - t % num_m)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--overhead", type=float, default=0.6, help="an item's fixed cost, in key tiles")
    parser.add_argument("--tail-waves", type=float, default=1, help="the tail's heads: this many waves of items")
    args = parser.parse_args()
    print("| d | seqlen | fwd_tile's order / ideal | with the tail / ideal | gain |")
    print("|---|---|---|---|---|")
    for d in (64, 128, 256):
        for seqlen in (512, 1024, 2048, 4096, 8192, 16384):
            rows, block_n, workers, pairs = tiles(d, seqlen, args.sms)
            heads = 16384 // seqlen * (2048 // d)
            num_m = math.ceil(seqlen / rows)
            # A CTA's 128 rows of the item against its key tiles (up to the item's last row).
            weight = rows / 128 / (2 if pairs else 1)
            length = [math.ceil(min(seqlen, (m + 1) * rows) / block_n) * weight for m in range(num_m)]
            ideal = sum(length[m] + args.overhead for m in range(num_m)) * heads / workers
            plain = span([length[m] for m in order(heads, num_m, 0)], workers, args.overhead)
            tail_heads = min(heads, math.ceil(args.tail_waves * workers / num_m))
            tail = span([length[m] for m in order(heads, num_m, tail_heads)], workers, args.overhead)
            print(f"| {d} | {seqlen} | {plain / ideal:.3f} | {tail / ideal:.3f} | {plain / tail:.3f} |")


if __name__ == "__main__":
    main()
