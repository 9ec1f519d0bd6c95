// Launcher of the sm80 backward's main kernels for one (head dim, dtype), on the caller's stream:
// the single dk/dv pass that adds dq by atomics (cleared accumulator before, dq conversion after)
// when the workspace has a dq accumulator and the device's shared memory per block holds its tile,
// or else its compact tile (up to d 128: an A100's 163 KB holds the single pass up to d 160, an
// RTX 30/40's 99 KB up to d 64, tile_size.h); otherwise the dq pass then the dk/dv pass. launch_bwd.cu
// runs the row-statistics kernel before (both schedules read its output). The generated
// instantiation files include this header and instantiate run_bwd_sm80 once each.
#pragma once

#include <cuda_runtime_api.h>

#include <type_traits>

#include "cuda/bwd_rows_sm80.h"
#include "cuda/kernel_bwd_dkdv_sm80.h"
#include "cuda/kernel_bwd_dq_sm80.h"
#include "cuda/launch_common.h"

namespace flashattn::cuda {

template <class Kernel>
void launch_bwd_kernel(Kernel kernel, dim3 grid, int threads, int smem_bytes, const BwdParams& p,
                       cudaStream_t stream, const char* what) {
  if (grid.x == 0) return;  // no query (key) rows: nothing for this pass to write
  launch_tiled_kernel(kernel, grid, threads, smem_bytes, p, stream, what);
}

template <bool kScoreMods, int kHeadDim, class Element>
void launch_bwd_passes(const BwdParams& p, cudaStream_t stream) {
  using Dq = BwdDqSm80<kHeadDim, Element>;
  auto dkv_grid = [&](int block_n, int out_split) {
    return dim3((p.max_stored_k + block_n - 1) / block_n * out_split, p.heads_kv, p.batch);
  };
  using Single = BwdDkvSm80<kHeadDim, Element, BwdDkvSchedule::kSinglePass, kScoreMods>;
  using Compact = BwdDkvSm80<kHeadDim, Element, BwdDkvSchedule::kSinglePassCompact>;
  auto launch_single = [&](auto tile) {  // the single pass on the tile of tile's type
    using Tile = decltype(tile);
    clear_dq_accum(p, stream);
    launch_bwd_kernel(bwd_dkdv_kernel_sm80<Tile, kScoreMods, true>, dkv_grid(Tile::kBlockN, Tile::kOutSplit),
                      Tile::kThreads, Tile::kSmemBytes, p, stream, "backward dk/dv/dq kernel");
    launch_bwd_dq_convert(p, std::is_same_v<Element, cutlass::half_t> ? FLASHATTN_F16 : FLASHATTN_BF16, stream);
  };
  if (p.dq_accum != nullptr) {
    const int smem = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, -1, "shared memory per block");
    if (Single::kSmemBytes <= smem) return launch_single(Single{});
    if constexpr (bwd_has_compact_tile(kHeadDim)) {
      if (Compact::kSmemBytes <= smem) return launch_single(Compact{});
    }
  }
  using Dkv = BwdDkvSm80<kHeadDim, Element, BwdDkvSchedule::kTwoPass>;
  launch_bwd_kernel(bwd_dq_kernel_sm80<Dq, kScoreMods>,
                    dim3((p.seqlen_q + Dq::kBlockM - 1) / Dq::kBlockM, p.heads_q, p.batch),
                    Dq::kThreads, Dq::kSmemBytes, p, stream, "backward dq kernel");
  launch_bwd_kernel(bwd_dkdv_kernel_sm80<Dkv, kScoreMods, false>, dkv_grid(Dkv::kBlockN, Dkv::kOutSplit),
                    Dkv::kThreads, Dkv::kSmemBytes, p, stream, "backward dk/dv kernel");
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
            BwdDkvSm80<kHeadDim, E, BwdDkvSchedule::kSinglePass, true>::kSmemBytes > 0;
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
