#!/usr/bin/env python3
"""The sm90a forward's waits, counted by the SM clock: a diagnostic build, never to be committed.

`fwd_waits.py instrument DIR` edits the tree at DIR (src/cuda/kernel_fwd_sm90.h and
launch_fwd_sm90.h): each consumer warpgroup sums the cycles it spends waiting for K (an item's first
key tile; the next item's first, where a closing turn issues it; the loop's tiles), for V and for
Q, beside its items, key tiles and total cycles; its leader writes the sums to a device array after
its last item, and a one-thread kernel launched after each forward prints them as DIAG lines (a
printf in the forward itself makes ptxas serialise every wgmma: note C7510). The edits find their
places by the kernel's text and stop with the text they missed when it has changed.

`fwd_waits.py report FILE` prints, from a run's output, the cycles per item of each wait, per
(keys, causal), over every warpgroup and launch (docs/performance.md, "Where a d 128 item's time
goes"). scripts/gpu-waits.sh runs both on the device machine."""
import collections
import re
import sys

NAMES = "items tiles total k_first k_next k_loop v q".split()


def replace_once(text, old, new, path):
    """text with old, which must occur exactly once, replaced by new."""
    if text.count(old) != 1:
        sys.exit(f"fwd_waits: {path} has {text.count(old)} places for:\n{old}")
    return text.replace(old, new)


def instrument(root):
    kernel = "template <class K, bool kScoreMods, bool kWarpgroupKeys, bool kLeftEdge>\n" \
             "__global__ void __launch_bounds__(K::kThreads, 1) fwd_kernel_sm90("
    # Internal linkage: every translation unit that includes the kernel has its own.
    printer = """static __device__ uint32_t g_fwd_waits[1024][16];
static __global__ void print_fwd_waits(int seqlen_k, int window_right) {
  for (int r = 0; r < 1024; ++r) {
    uint32_t* row = g_fwd_waits[r];
    if (row[15] == 0) continue;
    printf("DIAG %d %d %d %d", r / 4, r % 4, seqlen_k, window_right);
    for (int k = 0; k < 8; ++k) printf(" %u", row[k]);
    printf("\\n");
    row[15] = 0;
  }
}
#define FWD_WAITS_TIMED(k, stmt)          \\
  do {                                    \\
    const long long t0_ = clock64();      \\
    stmt;                                 \\
    waits[k] += uint32_t(clock64() - t0_); \\
  } while (0)
"""
    # waits[]: the counts in NAMES' order (items, tiles, total, K first, K next, K loop, V, Q).
    path = f"{root}/src/cuda/kernel_fwd_sm90.h"
    with open(path) as f:
        text = f.read()
    for old, new in [
        (kernel, printer + kernel),
        ("  int kv_loads = 0;  // the producer's count, followed here for the barrier phases\n",
         "  int kv_loads = 0;  // the producer's count, followed here for the barrier phases\n"
         "  uint32_t waits[8] = {};\n  const long long start = clock64();\n"),
        ("    const int n_keys = w.n_keys();\n",
         "    const int n_keys = w.n_keys();\n    waits[0] += 1;\n    waits[1] += n_keys;\n"),
        ("      Full::wait(&shared.k_full[stage], ((kv_loads + i) / K::kStages) & 1);\n",
         "      FWD_WAITS_TIMED(i == own.skip ? 3 : i >= n_keys ? 4 : 5,\n"
         "                      Full::wait(&shared.k_full[stage], ((kv_loads + i) / K::kStages) & 1));\n"),
        ("      Full::wait(&shared.v_full[stage], ((kv_loads + i) / K::kStages) & 1);\n",
         "      FWD_WAITS_TIMED(6, Full::wait(&shared.v_full[stage], ((kv_loads + i) / K::kStages) & 1));\n"),
        ("  // The last TMA stores have read their tile before the CTA's shared memory goes.",
         "  if (leader) {\n    waits[2] = uint32_t(clock64() - start);\n"
         "    for (int k = 0; k < 8; ++k) g_fwd_waits[blockIdx.x * 4 + wg][k] = waits[k];\n"
         "    g_fwd_waits[blockIdx.x * 4 + wg][15] = 1;\n  }\n"
         "  // The last TMA stores have read their tile before the CTA's shared memory goes."),
    ]:
        text = replace_once(text, old, new, path)
    # Q's waits: the item's own, and (where a closing turn issues the next item's first S) the next's.
    text, found = re.subn(r"(\n\s*(?:if \(next_s\) )?)(Full::wait\(&shared\.q_full[^;]*\));",
                          lambda m: m.group(1) + "FWD_WAITS_TIMED(7, " + m.group(2) + ");", text)
    if found < 1:
        sys.exit(f"fwd_waits: no wait for Q found in {path}")
    with open(path, "w") as f:
        f.write(text)
    path = f"{root}/src/cuda/launch_fwd_sm90.h"
    with open(path) as f:
        text = f.read()
    launches = '                        K::kThreads, K::kSmemBytes, args, stream, "sm90 forward kernel");\n  }\n'
    text = replace_once(text, launches + "}\n",
                        launches + "  print_fwd_waits<<<1, 1, 0, stream>>>(p.seqlen_k, p.window_right);\n}\n", path)
    with open(path, "w") as f:
        f.write(text)


def report(path):
    groups = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            if line.startswith("DIAG"):
                fields = line.split()
                groups[(int(fields[3]), int(fields[4]))].append([int(x) for x in fields[5:5 + len(NAMES)]])
    print("keys causal tiles/item cycles/item | cycles waited per item: K first, K next (closing turn), "
          "K loop, V, Q")
    for (keys, window_right), rows in sorted(groups.items()):
        s = {name: sum(r[k] for r in rows) for k, name in enumerate(NAMES)}
        items = s["items"]
        print(f"{keys:6d} {int(window_right >= 0):6d} {s['tiles'] / items:7.2f} {s['total'] / items:9.0f} | "
              + " ".join(f"{s[k] / items:7.0f}" for k in ("k_first", "k_next", "k_loop", "v", "q")))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "instrument":
        instrument(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit("usage: fwd_waits.py instrument DIR | report FILE")
