// Launcher of the sm80 backward's main kernels for one (head dim, dtype), on the caller's stream:
// the single dk/dv pass that adds dq by atomics (cleared accumulator before, dq conversion after)
// when the workspace has a dq accumulator and the device's shared memory per block holds its tile,
// or else its compact tile (up to d 128: an A100's 163 KB holds the single pass up to d 160, an
// RTX 30/40's 99 KB up to d 64, tile_size.h); otherwise the dq pass then the dk/dv pass. The single
// pass may hand its last key blocks to a tail launch of half tiles (single_pass_tail_blocks). Both
// schedules start with the row-statistics kernel, which for the single pass also clears the dq
// accumulator (bwd_rows_sm80.h). The generated instantiation files include this header and
// instantiate run_bwd_sm80 once each.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <type_traits>

#include "cuda/bwd_rows_sm80.h"
#include "cuda/kernel_bwd_dkdv_sm80.h"
#include "cuda/kernel_bwd_dq_sm80.h"
#include "cuda/launch_common.h"

namespace flashattn::cuda {

template <class Kernel>
void launch_bwd_kernel(Kernel kernel, dim3 grid, int threads, int smem_bytes, const BwdParams& p,
                       cudaStream_t stream, const char* what) {
  // No query (key) rows: nothing for this pass to write (a heads-first grid has its tiles on y).
  if (grid.x == 0 || grid.y == 0) return;
  launch_tiled_kernel(kernel, grid, threads, smem_bytes, p, stream, what);
}

// How many of the single pass's key blocks per (kv head, sequence), at the end of the keys, run in
// the tail launch as tiles of half the keys, beside the main launch's last wave. Only where every
// CTA has the same work (no mask, window or varlen) and the tail kernel can overlap (its code is
// sm_90's). A model in waves of full tiles (one CTA per SM: the tile's shared memory): the main
// launch's last wave leaves `free` SMs, each of which runs two half tiles meanwhile; what is left
// runs in rounds of half a wave. The count that ends soonest, if that saves at least a quarter
// wave against the plain launch; 0: no tail launch. (Halves cannot help where more than half a
// wave is left over: after the whole waves, the leftover halves need two rounds anyway.)
template <auto kTailKernel>
int single_pass_tail_blocks(const BwdParams& p, int block_n) {
  if (p.window_left >= 0 || p.window_right >= 0 || p.cu_seqlens_q || p.cu_seqlens_k || p.seqused_k ||
      !kernel_has_sm90_code<kTailKernel>()) {
    return 0;
  }
  const int64_t sms = device_attribute(cudaDevAttrMultiProcessorCount, -1, "multiprocessor count");
  const int64_t blocks = (p.max_stored_k + block_n - 1) / block_n, per_block = int64_t(p.heads_kv) * p.batch;
  const double plain = double((blocks * per_block + sms - 1) / sms);
  double best = plain - 0.25;
  int best_blocks = 0;
  for (int64_t t = 1; t < blocks && 2 * t * per_block <= 2 * sms; ++t) {
    const int64_t main_ctas = (blocks - t) * per_block, full_waves = main_ctas / sms, last = main_ctas % sms;
    const int64_t free = last > 0 ? sms - last : 0;
    const int64_t left = std::max<int64_t>(0, 2 * t * per_block - 2 * free);
    const double waves = double(full_waves + (last > 0 ? 1 : 0)) + 0.5 * double((left + sms - 1) / sms);
    if (waves < best) best = waves, best_blocks = int(t);
  }
  return best_blocks;
}

// Whether a backward grid of `tiles` CTAs per head (key tiles, or query tiles in the dq pass)
// runs heads first (heads on x, tiles on y) rather than tiles first. The hardware starts a grid's
// CTAs x fastest. Under a causal mask (a window bounded on the right, not on the left) a key tile's
// work is proportional to the queries after it and a query tile's to the keys before it: with the
// tiles on x, each head's tiles come longest first (key tiles) or last (query tiles), head after
// head, and the last heads' long tiles start late and leave the other SMs idle at the end (2-7% of
// the single pass from 512 to 8k keys at the standard grid's causal points, in a model in whole
// tiles; 2-15% for the dq pass). Heads first, and query tiles from the last, every head's longest
// tile starts before any head's second longest: the whole grid longest first within a sequence.
// Elsewhere the tiles of a head take the same work (no mask), or the order is not measured
// (windows bounded on both sides), and the grid stays tiles first; so too past the grid's 65535
// on y. The single pass's tail launch (single_pass_tail_blocks) runs only without a window, so
// never beside a heads-first grid.
inline bool heads_first_grid(const BwdParams& p, int tiles) {
  return p.window_left < 0 && p.window_right >= 0 && tiles <= kMaxGridYZ;
}

// The single pass's grid heads first (heads_first_grid) only while one head's key tiles fill less
// than half the SMs: from there the plain order's tail is small (0.6-0.8% at 16k keys in the
// model), and heads first spreads the running tiles over every head, whose query rows then leave
// L2 between the tiles that read them (in the model, an LRU L2 of 50 MB: 12-24% of the query
// blocks' reads miss at 16k against 1.6% tiles first; scripts/model_bwd_grid_l2.py,
// docs/performance.md, backward v23). The deterministic passes keep heads_first_grid's rule
// (measured up to 4k keys only).
inline bool single_pass_heads_first(const BwdParams& p, int key_tiles) {
  return heads_first_grid(p, key_tiles) &&
         2 * int64_t(key_tiles) < device_attribute(cudaDevAttrMultiProcessorCount, -1, "multiprocessor count");
}

// One backward pass of `tiles` CTAs per head over `heads` heads and the sequences: kHeadsFirst's
// grid (heads, tiles, sequences) where heads_first says so, else kPlain's (tiles, heads,
// sequences). kHeadsFirst nullptr: always the plain order.
template <auto kPlain, auto kHeadsFirst>
void launch_bwd_grid(const BwdParams& p, int tiles, int heads, bool heads_first, int threads, int smem_bytes,
                     cudaStream_t stream, const char* what) {
  if constexpr (kHeadsFirst != nullptr) {
    if (heads_first) {
      return launch_bwd_kernel(kHeadsFirst, dim3(heads, tiles, p.batch), threads, smem_bytes, p, stream, what);
    }
  }
  launch_bwd_kernel(kPlain, dim3(tiles, heads, p.batch), threads, smem_bytes, p, stream, what);
}

template <bool kScoreMods, int kHeadDim, class Element>
void launch_bwd_passes(const BwdParams& p, cudaStream_t stream) {
  using Dq = BwdDqSm80<kHeadDim, Element>;
  using Single = BwdDkvSm80<kHeadDim, Element, BwdDkvSchedule::kSinglePass, kScoreMods>;
  using Compact = BwdDkvSm80<kHeadDim, Element, BwdDkvSchedule::kSinglePassCompact>;
  using Tail = BwdDkvSm80<kHeadDim, Element, BwdDkvSchedule::kSinglePassTail, kScoreMods>;
  constexpr flashattn_dtype kDtype = std::is_same_v<Element, cutlass::half_t> ? FLASHATTN_F16 : FLASHATTN_BF16;
  auto launch_single = [&](auto tile) {  // the single pass on the tile of tile's type
    using Tile = decltype(tile);
    launch_bwd_row_stats(p, kDtype, /*clear_dq_accum=*/true, stream);
    static_assert(Tile::kOutSplit == 1 && Tail::kOutSplit == 1, "the tail splits whole key blocks");
    constexpr auto tail_kernel = bwd_dkdv_kernel_sm80<Tail, kScoreMods, true>;
    const int tail_blocks = std::is_same_v<Tile, Single> ? single_pass_tail_blocks<tail_kernel>(p, Tile::kBlockN) : 0;
    const int main_blocks = (p.max_stored_k + Tile::kBlockN - 1) / Tile::kBlockN - tail_blocks;
    // Heads first on the single pass's tile only: the compact one (devices with less shared memory,
    // A100 at d 64 / 128) has not been timed so.
    constexpr auto heads_first_kernel = [] {
      if constexpr (std::is_same_v<Tile, Single>) {
        return bwd_dkdv_kernel_sm80<Tile, kScoreMods, true, true>;
      } else {
        return nullptr;
      }
    }();
    launch_bwd_grid<bwd_dkdv_kernel_sm80<Tile, kScoreMods, true>, heads_first_kernel>(
        p, main_blocks, p.heads_kv, single_pass_heads_first(p, main_blocks), Tile::kThreads, Tile::kSmemBytes, stream,
        "backward dk/dv/dq kernel");
    if (tail_blocks > 0) {
      BwdParams tail = p;
      tail.dkv_first_key = main_blocks * Tile::kBlockN;
      const int tail_keys = p.max_stored_k - tail.dkv_first_key;
      launch_dependent_kernel(tail_kernel, dim3((tail_keys + Tail::kBlockN - 1) / Tail::kBlockN, p.heads_kv, p.batch),
                              Tail::kThreads, Tail::kSmemBytes, tail, stream, "backward dk/dv/dq tail kernel");
    }
    launch_bwd_dq_convert(p, kDtype, stream);
  };
  if (p.dq_accum != nullptr) {
    const int smem = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, -1, "shared memory per block");
    if (Single::kSmemBytes <= smem) return launch_single(Single{});
    if constexpr (bwd_has_compact_tile(kHeadDim)) {
      if (Compact::kSmemBytes <= smem) return launch_single(Compact{});
    }
  }
  using Dkv = BwdDkvSm80<kHeadDim, Element, BwdDkvSchedule::kTwoPass>;
  launch_bwd_row_stats(p, kDtype, /*clear_dq_accum=*/false, stream);
  const int q_tiles = (p.seqlen_q + Dq::kBlockM - 1) / Dq::kBlockM;
  launch_bwd_grid<bwd_dq_kernel_sm80<Dq, kScoreMods>, bwd_dq_kernel_sm80<Dq, kScoreMods, true>>(
      p, q_tiles, p.heads_q, heads_first_grid(p, q_tiles), Dq::kThreads, Dq::kSmemBytes, stream, "backward dq kernel");
  const int kv_ctas = (p.max_stored_k + Dkv::kBlockN - 1) / Dkv::kBlockN * Dkv::kOutSplit;
  launch_bwd_grid<bwd_dkdv_kernel_sm80<Dkv, kScoreMods, false>, bwd_dkdv_kernel_sm80<Dkv, kScoreMods, false, true>>(
      p, kv_ctas, p.heads_kv, heads_first_grid(p, kv_ctas), Dkv::kThreads, Dkv::kSmemBytes, stream,
      "backward dk/dv kernel");
}

// Whether the backward's tile shapes at kHeadDim are well formed: naming each shape's kSmemBytes
// instantiates it, so its static_asserts fire. Each generated file checks every supported head
// dim with it, so that a narrow build (CI's) catches a tile-table entry that would break the full
// set.
template <int kHeadDim>
constexpr bool bwd_sm80_tiles_well_formed() {
  using E = cutlass::half_t;
  bool ok = BwdDqSm80<kHeadDim, E>::kSmemBytes > 0 &&
            BwdDkvSm80<kHeadDim, E, BwdDkvSchedule::kTwoPass>::kSmemBytes > 0 &&
            BwdDkvSm80<kHeadDim, E, BwdDkvSchedule::kSinglePass>::kSmemBytes > 0 &&
            BwdDkvSm80<kHeadDim, E, BwdDkvSchedule::kSinglePass, true>::kSmemBytes > 0 &&
            BwdDkvSm80<kHeadDim, E, BwdDkvSchedule::kSinglePassTail>::kSmemBytes > 0 &&
            BwdDkvSm80<kHeadDim, E, BwdDkvSchedule::kSinglePassTail, true>::kSmemBytes > 0;
  if constexpr (bwd_has_compact_tile(kHeadDim)) {
    ok = ok && BwdDkvSm80<kHeadDim, E, BwdDkvSchedule::kSinglePassCompact>::kSmemBytes > 0;
  }
  return ok;
}

template <int kHeadDim, class Element>
void run_bwd_sm80(const BwdParams& p, cudaStream_t stream) {
  const bool score_mods = p.softcap > 0.f || p.alibi_slopes != nullptr || p.dropout_threshold != 0;
  if (score_mods) {
    launch_bwd_passes<true, kHeadDim, Element>(p, stream);
  } else {
    launch_bwd_passes<false, kHeadDim, Element>(p, stream);
  }
}

}  // namespace flashattn::cuda
