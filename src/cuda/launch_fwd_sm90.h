// Launcher of the sm90a forward kernel for one (head dim, dtype): builds the TMA descriptors of
// q, k, v (v as V^T: head dim x keys) and out, and launches one persistent CTA per SM (or clusters
// of two); p.tile_counter points at the workspace's counter, which the kernel zeroes itself.
// The generated instantiation files include this header and instantiate run_fwd_sm90 once each;
// launch_fwd.cu decides when this path serves a call (sm90_serves).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "cuda/kernel_fwd_sm90.h"
#include "cuda/launch_common.h"

namespace flashattn::cuda {

template <class K, bool kScoreMods, bool kWarpgroupKeys, bool kLeftEdge>
void launch_sm90(const FwdParams& p, cudaStream_t stream) {
  using namespace cute;
  using Element = typename K::Element;
  const int heads_kv = p.heads_q / p.group;
  // A dim of length 1 is never stepped over, and the caller may give it any stride (launch_fwd.cu
  // checked the others): the tensor map gets one 16-byte step there instead.
  constexpr int64_t kUnitStride = 16 / sizeof(Element);
  auto stride_of = [](int extent, int64_t stride) { return extent > 1 ? stride : kUnitStride; };
  // (rows, cols, heads, batch) with unit column stride: q, k (read) and out (written).
  auto rows = [&](auto* data, int count, int cols, int heads, int64_t row_stride, int64_t head_stride,
                  int64_t batch_stride) {
    constexpr bool kRead = std::is_const_v<std::remove_pointer_t<decltype(data)>>;
    using Pointer = std::conditional_t<kRead, const Element*, Element*>;
    return make_tensor(make_gmem_ptr(static_cast<Pointer>(data)), make_shape(count, cols, heads, p.batch),
                       make_stride(stride_of(count, row_stride), _1{}, stride_of(heads, head_stride),
                                   stride_of(p.batch, batch_stride)));
  };
  const auto v_t = make_tensor(make_gmem_ptr(static_cast<const Element*>(p.v)),
                               make_shape(p.d_v, p.seqlen_k, heads_kv, p.batch),
                               make_stride(_1{}, stride_of(p.seqlen_k, p.v_row_stride),
                                           stride_of(heads_kv, p.v_head_stride), stride_of(p.batch, p.v_batch_stride)));
  // K and V^T with the head dim as (atom columns, atoms): mainloop_fwd_sm90.h, TmaKOneBox.
  const bool one_box_kv = K::one_box_kv(p.d, p.d_v);
  auto head_dim_atoms = [](int d) { return make_shape(Int<K::kAtomCols>{}, d / K::kAtomCols); };
  const auto atoms_stride = make_stride(_1{}, Int<K::kAtomCols>{});
  const auto k_atoms = make_tensor(make_gmem_ptr(static_cast<const Element*>(p.k)),
                                   make_shape(p.seqlen_k, head_dim_atoms(p.d), heads_kv, p.batch),
                                   make_stride(stride_of(p.seqlen_k, p.k_row_stride), atoms_stride,
                                               stride_of(heads_kv, p.k_head_stride),
                                               stride_of(p.batch, p.k_batch_stride)));
  const auto v_t_atoms = make_tensor(make_gmem_ptr(static_cast<const Element*>(p.v)),
                                     make_shape(head_dim_atoms(p.d_v), p.seqlen_k, heads_kv, p.batch),
                                     make_stride(atoms_stride, stride_of(p.seqlen_k, p.v_row_stride),
                                                 stride_of(heads_kv, p.v_head_stride),
                                                 stride_of(p.batch, p.v_batch_stride)));
  // A window wider than the keys it can reach keeps the same keys when clamped to them (a left edge
  // past seqlen_k reaches key 0 from every query row, a right edge past seqlen_q the last key), and the
  // clamped edges keep the kernel's 32-bit position arithmetic in range (kFwdSm90MaxLength).
  FwdParams clamped = p;
  clamped.window_left = std::min(p.window_left, p.seqlen_k);  // -1 (unbounded) stays
  clamped.window_right = std::min(p.window_right, p.seqlen_q);
  // Persistent: one CTA per SM (the tile's shared memory admits no second), or fewer when the
  // work items are fewer; in clusters of two, as many clusters as the GPU runs at once, an item a
  // pair of query tiles (kernel_fwd_sm90.h, fwd_tile).
  const int num_m = fwd_items_per_head<K>(p.seqlen_q);
  const int64_t heads = int64_t(p.heads_q) * p.batch, items = num_m * heads;
  if (items == 0) return;
  FA_CHECK_SUPPORTED(items < (int64_t(1) << 31) - 1024, "sm90 forward: too many query tiles: ", items);
  const int64_t workers = std::min<int64_t>(items, [] {
    if constexpr (K::kCluster > 1) {
      return active_clusters<fwd_kernel_sm90<K, kScoreMods, kWarpgroupKeys, kLeftEdge>, K::kCluster>(
          K::kThreads, K::kSmemBytes, "sm90 forward kernel");
    } else {
      return device_attribute(cudaDevAttrMultiProcessorCount, -1, "SM count");
    }
  }());
  clamped.tail = fwd_tail(heads, num_m, workers, p.window_left < 0 && p.window_right >= 0);
  FwdSm90Args<K> args{
      clamped,
      make_tma_copy(SM90_TMA_LOAD{},
                    rows(p.q, p.seqlen_q, p.d, p.heads_q, p.q_row_stride, p.q_head_stride, p.q_batch_stride),
                    typename K::SmemLayoutQLoad{}),
      make_tma_copy(typename K::TmaKvOp{},
                    rows(p.k, p.seqlen_k, p.d, heads_kv, p.k_row_stride, p.k_head_stride, p.k_batch_stride),
                    take<0, 2>(typename K::SmemLayoutK{}), Int<K::kCluster>{}),
      make_tma_copy(typename K::TmaKvOp{}, v_t, take<0, 2>(typename K::SmemLayoutVt{}), Int<K::kCluster>{}),
      make_tma_copy(SM90_TMA_STORE{},
                    rows(p.out, p.seqlen_q, p.d, p.heads_q, p.out_row_stride, p.out_head_stride, p.out_batch_stride),
                    typename K::SmemLayoutOBox{}),
      one_box_kv ? make_tma_copy(typename K::TmaKvOp{}, k_atoms, take<0, 2>(typename K::SmemLayoutK{}),
                                 Int<K::kCluster>{})
                 : typename K::TmaKOneBox{},
      one_box_kv ? make_tma_copy(typename K::TmaKvOp{}, v_t_atoms, take<0, 2>(typename K::SmemLayoutVt{}),
                                 Int<K::kCluster>{})
                 : typename K::TmaVOneBox{},
      cutlass::FastDivmod(num_m),
      cutlass::FastDivmod(p.heads_q),
  };
  if constexpr (K::kCluster > 1) {
    launch_cluster_kernel<fwd_kernel_sm90<K, kScoreMods, kWarpgroupKeys, kLeftEdge>, K::kCluster>(
        workers, K::kThreads, K::kSmemBytes, args, stream, "sm90 forward kernel");
  } else {
    launch_tiled_kernel(fwd_kernel_sm90<K, kScoreMods, kWarpgroupKeys, kLeftEdge>, dim3(unsigned(workers)),
                        K::kThreads, K::kSmemBytes, args, stream, "sm90 forward kernel");
  }
}

// Where the tile table has kClusterPairs (run_fwd_sm90: not with softcap or ALiBi): calls without
// a mask or with a right edge only (causal), from kFwdSm90ClusterMinKeys keys, whose heads have an
// even number of query tiles (a cluster takes two of them, its CTAs' rows interleaved so that both
// need the pair's key tiles: fwd_tile), on a device that runs such clusters (not every partition
// of a GPU does). Under a right edge the kernel with each warpgroup's own key range
// (kWarpgroupKeys): a pair's first warpgroups skip the key tile only its second ones need.
template <class K, class Pairs, bool kWarpgroupKeys>
bool fwd_sm90_cluster_serves(const FwdParams& p) {
  return p.window_left < 0 && (p.window_right >= 0) == kWarpgroupKeys && p.seqlen_k >= kFwdSm90ClusterMinKeys &&
         (p.seqlen_q + K::kBlockM - 1) / K::kBlockM % 2 == 0 &&
         active_clusters<fwd_kernel_sm90<Pairs, false, kWarpgroupKeys, false>, Pairs::kCluster>(
             Pairs::kThreads, Pairs::kSmemBytes, "sm90 forward kernel") > 0;
}

// Where a head dim has a wide tile (tile_size.h), it serves the plain scores of unmasked calls
// and of masked ones with many query rows.
inline bool fwd_sm90_wide_serves(const FwdParams& p) {
  const bool masked = p.window_left >= 0 || p.window_right >= 0;
  return !masked || p.seqlen_q >= kFwdSm90WideMinMaskedRows;
}

// Where the tile has them (kSkipKeyTiles), calls with a right edge (causal, window) take the kernel
// with the warpgroups' own key ranges; the others the kernel without them, whose code before an
// item's first product is shorter (the score modifiers' kernel has them where the tile does, and
// tests both window edges). Calls with a window's left edge take a kernel of their own, which
// tests both edges (left-only windows the one with the warpgroups' key ranges, where it exists,
// which then takes the item's).
template <class K>
void launch_sm90_plain(const FwdParams& p, cudaStream_t stream) {
  if (p.window_left >= 0) return launch_sm90<K, false, K::kSkipKeyTiles, true>(p, stream);
  if constexpr (K::kSkipKeyTiles) {
    if (p.window_right >= 0) return launch_sm90<K, false, true, false>(p, stream);
  }
  launch_sm90<K, false, false, false>(p, stream);
}

template <int kHeadDim, class Element>
void run_fwd_sm90(const FwdParams& p, cudaStream_t stream) {
  using K = FwdSm90<kHeadDim, Element>;
  if (p.softcap > 0.f || p.alibi_slopes != nullptr) return launch_sm90<K, true, K::kSkipKeyTiles, true>(p, stream);
  if constexpr (FwdTileSm90<kHeadDim>::kClusterPairs) {
    using Pairs = FwdSm90<kHeadDim, Element, false, 2>;
    if (fwd_sm90_cluster_serves<K, Pairs, false>(p)) return launch_sm90<Pairs, false, false, false>(p, stream);
    if (fwd_sm90_cluster_serves<K, Pairs, true>(p)) return launch_sm90<Pairs, false, true, false>(p, stream);
  }
  if constexpr (FwdWideTileSm90<kHeadDim>::kExists) {
    if (fwd_sm90_wide_serves(p)) return launch_sm90_plain<FwdSm90<kHeadDim, Element, true>>(p, stream);
  }
  launch_sm90_plain<K>(p, stream);
}

}  // namespace flashattn::cuda
