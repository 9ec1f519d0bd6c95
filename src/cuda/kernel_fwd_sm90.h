// The sm90a forward kernel: persistent CTAs with warp specialization. Warpgroup 0 produces: one
// thread takes work items (a query tile of one head and sequence) from a global counter (in
// clusters of two, rank 0's takes them for both CTAs) and, for each, loads Q once and its K / V
// tiles into rings of kStages K and kVStages V buffers by TMA, every buffer guarded by a "full"
// mbarrier (the copy's bytes landed) and an "empty" one (every consumer warpgroup is done with it),
// so that the next item's loads run under this item's last products and epilogue. Warpgroups 1..
// consume, 64 query rows each: S = Q K^T by wgmma from shared memory, the online softmax of the
// sm80 kernel on the accumulators (same per-thread fragment order: rows g and g + 8, columns 2t and
// 2t + 1 of each n8 group), P packed to 16 bits in registers and O += P V by wgmma with P as the
// register operand; where the tile table has kSoftmaxOverlapsO or kSoftmaxBranches a tile's softmax
// runs while the previous tile's O product is in flight (elsewhere ptxas waits for both products
// first). Two consumer warpgroups take turns at the tensor cores (ping-pong): each issues its
// products only after the other has issued its own, so that one warpgroup's softmax runs while the
// other's products occupy the tensor cores (with kSplitTurns one turn for S and one for O of each
// tile). Under a causal mask or a window's right edge a warpgroup whose 64 rows end a key tile
// before the item's skips that tile (where the tile table has kSkipKeyTiles). Each warpgroup writes
// its rows of O into a staging tile in shared memory (at d 192 and in d 256's pairs the item's last
// K or V stage, once both warpgroups' products are done with it; in d 256's single CTAs a tile of
// half the head dim, whose two box slots take the four boxes in turn) and TMA stores take them out.
// Where the tile table has kClusterPairs (d 128 / 256), calls without softcap or ALiBi, without a
// mask or with a right edge only, from kFwdSm90ClusterMinKeys keys, with an even number of query
// tiles per head, run in clusters of two CTAs that take two query tiles of a head at once, their
// rows interleaved so that both CTAs need the same key tiles (fwd_sm90_cluster_serves, fwd_tile):
// each CTA's producer loads half of every K / V tile into both CTAs' stages (TMA multicast), and a
// stage goes back to the producers once the consumers of both CTAs are done with it.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "core/score_mod.h"
#include "cuda/fwd_params.h"
#include "cuda/mainloop_fwd_sm90.h"
#include "cuda/schedule_fwd_sm90.h"
#include "cuda/softmax_sm80.h"

namespace flashattn::cuda {

// Keeps the compiler from moving shared-memory accesses across it: CUTLASS's mbarrier wait and
// arrive are asm statements without a memory clobber, so a plain access next to them may move
// (the hardware orders them: arrive releases, wait acquires).
__device__ __forceinline__ void compiler_barrier() { asm volatile("" ::: "memory"); }

// A zero the compiler cannot see through. A shared-memory base offset by it, made where it is
// used, is not hoisted out of the loops as loop-invariant: held across them, the addresses and
// descriptors made from such a base spilled (Q's at d 256, 32 registers; the output's staging tile
// in the wide tile, 92 bytes).
__device__ __forceinline__ uint32_t opaque_zero() {
  uint32_t zero = 0;
  asm volatile("" : "+r"(zero));
  return zero;
}

// The work hand-out of a cluster of two (K::kCluster), between the producers only: rank 0's writes
// each item into rank 1's hand-out slot and arrives on its full barrier; rank 1's reads it and
// arrives on rank 0's empty barrier of the slot. Writer and reader sit in different CTAs: release
// and acquire at cluster scope, which cost a GPU-scope fence (MEMBAR.ALL.GPU) per arrival and an
// L1 invalidation per wait: the consumers, 256 threads, read their own CTA's slot at CTA scope
// (v49 had them arrive on rank 0's barrier: d 256 2k 0.94x). The address of `local`'s counterpart
// in CTA `cta` of the cluster:
__device__ __forceinline__ uint32_t cluster_address(const void* local, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(cute::cast_smem_ptr_to_uint(local)), "r"(cta));
  return remote;
}
__device__ __forceinline__ void store_in_cta(int* local, uint32_t cta, int value) {
  asm volatile("st.shared::cluster.s32 [%0], %1;" ::"r"(cluster_address(local, cta)), "r"(value) : "memory");
}
__device__ __forceinline__ void arrive_in_cta(uint64_t* barrier, uint32_t cta) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_address(barrier, cta))
               : "memory");
}
__device__ __forceinline__ void wait_cluster_scope(uint64_t* barrier, uint32_t phase) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(cute::cast_smem_ptr_to_uint(barrier)),
      "r"(phase)
      : "memory");
}

// The scores' modifiers and mask of a call (slope: the head's ALiBi slope, 0 when off), in 32-bit
// positions: the launcher bounds the lengths and clamps the windows (launch_fwd_sm90.h).
__device__ __forceinline__ ScoreMod<float, int> score_mod(const FwdParams& p, float slope) {
  return ScoreMod<float, int>{p.scale, p.softcap, slope, p.seqlen_k - p.seqlen_q, p.seqlen_k, p.window_left,
                              p.window_right};
}

// Work item t: the items of one (sequence, head) are its query tiles from the last to the first
// (under a causal mask the longest first), then come the next head's, then the next sequence's. The
// schedule takes them in this order (schedule_item, schedule_fwd_sm90.h, reorders its last heads'
// items), so CTAs that run at the same time share a head's K and V, which then come from L2. In
// clusters of two (K::kCluster) an item is a pair of query tiles, 2 * kBlockM rows, whose rows the
// two CTAs interleave by 64: CTA rank r's warpgroup wg takes rows m_start + wg * wg_stride, 64 of
// them, with m_start = pair start + 64 r and wg_stride 128. So both CTAs need the same key tiles
// (the pair's) even under a causal mask, and do the same work: a warpgroup whose rows end a key
// tile before the pair's skips it (kWarpgroupKeys).
struct FwdTile {
  int h, b, m_start, wg_stride;
  float slope;  // ALiBi, 0 when off
  KeyTiles keys;
  // Key tiles kept whole by every row of the tile: only the others pay for the per-element mask.
  KeyTiles unmasked;
  __device__ __forceinline__ int n_keys() const { return keys.max - keys.min; }
  // The first of warpgroup wg's 64 query rows.
  __device__ __forceinline__ int wg_row0(int wg) const { return m_start + wg * wg_stride; }
};
// The work items per (sequence, head): query tiles, or in clusters pairs of them (the kernel's
// num_m; the launcher sizes the grid from it too).
template <class K>
__host__ __device__ __forceinline__ int fwd_items_per_head(int seqlen_q) {
  return ((seqlen_q + K::kBlockM - 1) / K::kBlockM + K::kCluster - 1) / K::kCluster;
}
// The decode divides by multiply and shift (FastDivmod, set up on the host; exact for the item
// counts the launcher admits, under 2^31), where a signed division by a run-time value takes about
// 20 instructions on the item's path before its first product: d 64 causal 512 1.018-1.026x, d 128
// / 256 below 2k keys 0.99-1.03x (sm90a v85). The wide tile keeps its divisions, in their order,
// and so its code (its PTX is as before): as with every other change of its layout, it lost 2-5%
// to this change (v36) and 1.2% to its statements merely reordered (v85's first form).
template <class K, bool kScoreMods>
__device__ __forceinline__ FwdTile fwd_tile(const FwdSm90Args<K>& args, int t, int num_m) {
  const FwdParams& p = args.p;
  FwdTile w;
  int bh, m_from_last;
  if constexpr (K::kWideTile) {
    bh = t / num_m, m_from_last = t - bh * num_m;
  } else {
    args.items_per_head(bh, m_from_last, t);
  }
  const int m_item = num_m - 1 - m_from_last;
  if constexpr (K::kWideTile) {
    w.h = bh % p.heads_q, w.b = bh / p.heads_q;
  } else {
    args.heads_q(w.b, w.h, bh);
  }
  const int item_rows = K::kBlockM * K::kCluster, first = m_item * item_rows;
  if constexpr (K::kCluster > 1) {
    w.m_start = first + 64 * int(cute::block_rank_in_cluster());
    w.wg_stride = 64 * K::kCluster;
  } else {
    w.m_start = first;
    w.wg_stride = 64;
  }
  w.slope = kScoreMods && p.alibi_slopes ? p.alibi_slopes[w.b * p.alibi_batch_stride + w.h] : 0.f;
  const auto mod = score_mod(p, w.slope);
  w.keys = key_tiles(mod, first, min(first + item_rows, p.seqlen_q) - 1, K::kBlockN);
  w.unmasked = unmasked_key_tiles(mod, first, first + item_rows - 1, K::kBlockN);
  return w;
}

// One consumer warpgroup's 64 rows of a work item. Under a causal mask or a window's right edge
// their last key may come a whole key tile before the item's (64-row warpgroups against 96- or
// 80-key tiles at d 192 / d 256's pairs, the interleaved rows of a cluster pair, the wide tile's
// 192 rows against 128-key tiles, or keys past the queries): in the kernel with kWarpgroupKeys the
// warpgroup skips the item's first `skip` key tiles (the loop takes them from the last), which hold
// no key of its rows, and masks only the tiles that its own rows do not keep whole. It always takes
// the item's last tile (its first keys), so that its reads of Q and of the last K / V stages end
// there as the other warpgroups' do. Without a right edge, or in the kernel without kWarpgroupKeys,
// the item's range: the work before an item's first product is on its critical path
// (docs/performance.md, sm90a v24). In the wide tile a warpgroup whose rows all lie past the
// queries (at 512 / 1k rows one or two of the three in every head's last item) takes that last tile
// alone in every kernel (sm90a v51); not in the 128-row tiles, whose kernels without kWarpgroupKeys
// then held the skipping code (d 64 causal 1k 0.965x) for rows that the usual lengths fill.
struct WarpgroupKeys {
  int skip;
  KeyTiles unmasked;  // the key tiles that every row of the warpgroup keeps whole: no mask
};
template <class K, bool kWarpgroupKeys>
__device__ __forceinline__ WarpgroupKeys warpgroup_keys(const FwdParams& p, const FwdTile& w, int wg) {
  if (K::kWideTile && w.wg_row0(wg) >= p.seqlen_q) return {max(0, w.n_keys() - 1), w.unmasked};
  if (!kWarpgroupKeys || p.window_right < 0) return {0, w.unmasked};
  const auto mod = score_mod(p, w.slope);
  const int row0 = w.wg_row0(wg);
  int last_tile = w.keys.min + 1;  // rows past the queries: only the tile every warpgroup takes
  if (row0 < p.seqlen_q) {
    last_tile = max(last_tile, key_tiles(mod, row0, min(row0 + 63, p.seqlen_q - 1), K::kBlockN).max);
  }
  return {max(0, w.keys.max - last_tile), unmasked_key_tiles(mod, row0, row0 + 63, K::kBlockN)};
}

// The producer thread: hands out the work items (the schedule's positions, schedule_item: its CTA's
// first is position blockIdx.x, the others come from the global counter) through a two-slot ring in
// shared memory, and for each loads Q once and its K / V tiles into their rings (K::kStages and
// K::kVStages deep), the rings' position running on across items. In clusters of two (K::kCluster)
// an item is a pair of query tiles (fwd_tile): rank 0's producer takes it (the cluster's index
// first, then the counter) and hands it to rank 1's through a second ring (handoff); each writes it
// into its CTA's ring for its consumers, and loads its CTA's rows of Q and one half of every K / V
// tile into both CTAs' stages. kOneBoxKv: a K / V tile (or its half) in one box, the head dim as
// (atom columns, atoms) (K::one_box_kv, mainloop_fwd_sm90.h).
template <class K, bool kOneBoxKv>
__device__ __forceinline__ void produce_fwd_sm90(const FwdSm90Args<K>& args, typename K::SharedStorage& shared,
                                                 int num_m, int num_tiles) {
  using namespace cute;
  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Empty = cutlass::arch::ClusterBarrier;
  const FwdParams& p = args.p;
  const int heads_kv = p.heads_q / p.group;
  Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename K::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename K::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(shared.v.data()), typename K::SmemLayoutVt{});
  Tensor mQ = args.tma_q.get_tma_tensor(make_shape(p.seqlen_q, p.d, p.heads_q, p.batch));
  const auto& tma_k = [&]() -> const auto& {
    if constexpr (kOneBoxKv) return args.tma_k_one_box; else return args.tma_k;
  }();
  const auto& tma_v = [&]() -> const auto& {
    if constexpr (kOneBoxKv) return args.tma_v_one_box; else return args.tma_v;
  }();
  // The coordinates' extents only shape the tiling: TMA bounds the boxes by the descriptor's.
  auto head_dim_coords = [](int d) {
    if constexpr (kOneBoxKv) {
      return make_shape(Int<K::kAtomCols>{}, Int<K::kHeadDim / K::kAtomCols>{});
    } else {
      return d;
    }
  };
  Tensor mK = tma_k.get_tma_tensor(make_shape(p.seqlen_k, head_dim_coords(p.d), heads_kv, p.batch));
  Tensor mVt = tma_v.get_tma_tensor(make_shape(head_dim_coords(p.d_v), p.seqlen_k, heads_kv, p.batch));
  constexpr int kCluster = K::kCluster;
  const int rank = kCluster > 1 ? int(cute::block_rank_in_cluster()) : 0;
  constexpr uint16_t kAllCtas = (1 << kCluster) - 1;  // the multicast mask (a plain load ignores it)
  int kv_loads = 0;
  int t = rank == 0 ? schedule_item(blockIdx.x / kCluster, p.tail, num_m) : 0;  // rank 1's: the hand-out
  // The counter's values past the CTAs' first items: CTA 0 zeroes it as it starts, in place of a
  // memset launched before each call. A CTA that fetches before that reset reads what the
  // workspace held: a value that names no item past the first ones ends its loop (items are left
  // to the CTAs that fetch after the reset, CTA 0 among them), one that names an item has it run
  // twice with the same result. The CTAs of a persistent launch start together and fetch only after
  // their first item, so in practice every fetch follows the reset.
  if (blockIdx.x == 0) atomicExch(p.tile_counter, 0);
  const unsigned first_fetched = gridDim.x / kCluster;
  const unsigned fetched_items = unsigned(max(num_tiles - int(first_fetched), 0));
  for (int item = 0;; ++item) {
    const int slot = item % 2;
    if constexpr (kCluster > 1) {
      if (rank == 0) {
        // Its empty barrier counts its consumers and rank 1's producer (remote, once it has read
        // the hand-out).
        wait_cluster_scope(&shared.tile_empty[slot], ((item / 2) & 1) ^ 1);
        store_in_cta(&shared.handoff[slot], 1, t);
        arrive_in_cta(&shared.handoff_full[slot], 1);
      } else {
        wait_cluster_scope(&shared.handoff_full[slot], (item / 2) & 1);
        t = shared.handoff[slot];
        arrive_in_cta(&shared.tile_empty[slot], 0);
        Empty::wait(&shared.tile_empty[slot], ((item / 2) & 1) ^ 1);
      }
    } else {
      Empty::wait(&shared.tile_empty[slot], ((item / 2) & 1) ^ 1);
    }
    // One thread runs this loop, which ptxas cannot know: an item read from shared memory or the
    // counter sits in a vector register, and each TMA copy then moves its operands to uniform
    // registers in a loop over the active lanes, on the K / V stages' path (sm90a v49d). A shuffle
    // from lane 0 marks the item warp-uniform.
    t = __shfl_sync(1u, t, 0);
    shared.tile[slot] = t;
    compiler_barrier();
    Empty::arrive(&shared.tile_full[slot]);  // releases the write to the consumers
    if (t >= num_tiles) return;
    const FwdTile w = fwd_tile<K, false>(args, t, num_m);  // the slope is not needed here
    const int hk = w.h / p.group;
    Tensor gK = local_tile(mK(_, _, hk, w.b), Shape<Int<K::kBlockN>, Int<K::kHeadDim>>{}, make_coord(_, _0{}));
    Tensor gVt = local_tile(mVt(_, _, hk, w.b), Shape<Int<K::kHeadDim>, Int<K::kBlockN>>{}, make_coord(_0{}, _));
    auto [tKg, tKs] =
        tma_partition(tma_k, rank, Layout<Int<kCluster>>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto [tVg, tVs] =
        tma_partition(tma_v, rank, Layout<Int<kCluster>>{}, group_modes<0, 2>(sVt), group_modes<0, 2>(gVt));
    // Q's buffer is free once every consumer warpgroup's last S = Q K^T of the previous item is
    // done (an item without keys: at once, or with K::kStageOInKv once its output stores have read
    // it). Every item loads Q, even one without keys (rare), so that Q's barrier phases follow the
    // item count. A fresh barrier counts as having completed the phase before its first: round 0
    // passes.
    Empty::wait(&shared.q_empty, (item & 1) ^ 1);
    Full::arrive_and_expect_tx(&shared.q_full, K::kQBytes);
    if constexpr (kCluster > 1) {
      // Each warpgroup's 64 rows (not contiguous in a pair), a box per atom column c, into its
      // rows of Q's buffer (whose atom columns hold kBlockM rows each).
      for (int wg = 0; wg < K::kConsumerWarpgroups; ++wg) {
#pragma unroll
        for (int c = 0; c < K::kHeadDim / K::kOBoxCols; ++c) {
          Tensor sBox = make_tensor(make_smem_ptr(shared.q.data() + (c * K::kBlockM + wg * 64) * K::kOBoxCols),
                                    typename K::SmemLayoutOBox{});
          Tensor gBox = local_tile(mQ(_, _, w.h, w.b), Shape<_64, Int<K::kOBoxCols>>{},
                                   make_coord(w.wg_row0(wg) / 64, c));
          auto [tQg, tQs] =
              tma_partition(args.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sBox), group_modes<0, 2>(gBox));
          copy(args.tma_q.with(shared.q_full), tQg, tQs);
        }
      }
    } else {
      Tensor gQ = local_tile(mQ(_, _, w.h, w.b), typename K::TileQ{}, make_coord(w.m_start / K::kBlockM, _0{}));
      auto [tQg, tQs] = tma_partition(args.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
      copy(args.tma_q.with(shared.q_full), tQg, tQs);
    }
    // Key tiles from the last to the first, as the consumers take them. Not unrolled: the
    // producer's 24 registers hold one iteration's state (unrolled by 4 it spilled).
#pragma unroll 1
    for (int i = 0; i < w.n_keys(); ++i, ++kv_loads) {
      const int n_block = w.keys.max - 1 - i, stage = kv_loads % K::kStages;
      const uint32_t phase = (kv_loads / K::kStages) & 1;
      // The stage's full barrier expects the whole tile: in a cluster, this CTA's half and the
      // other's land on it.
      Empty::wait(&shared.k_empty[stage], phase ^ 1);
      Full::arrive_and_expect_tx(&shared.k_full[stage], K::kKvBytes);
      copy(tma_k.with(shared.k_full[stage], kAllCtas), tKg(_, n_block), tKs(_, stage));
      const int v_stage = kv_loads % K::kVStages;
      Empty::wait(&shared.v_empty[v_stage], ((kv_loads / K::kVStages) & 1) ^ 1);
      Full::arrive_and_expect_tx(&shared.v_full[v_stage], K::kKvBytes);
      copy(tma_v.with(shared.v_full[v_stage], kAllCtas), tVg(_, n_block), tVs(_, v_stage));
    }
    if (rank == 0) {
      const unsigned fetched = atomicAdd(reinterpret_cast<unsigned*>(p.tile_counter), 1u);
      t = fetched < fetched_items ? schedule_item(int(first_fetched + fetched), p.tail, num_m) : num_tiles;
    }
  }
}

// The first of the two named barriers (ids after CUTLASS's reserved ones) that order the consumer
// warpgroups' turns at the tensor cores.
constexpr uint32_t kTurnBarrier = 0;
// The first of the consumer warpgroups' own named barriers (one each, up to three), for the
// output's staging.
constexpr uint32_t kEpilogueBarrier = 2;
// With K::kStageOInKv, the first of two named barriers, one per consumer warpgroup, on which it
// waits before staging its output until the other warpgroup's last product has read that stage
// (warpgroup 0 stages in the last K stage, read by warpgroup 1's last S; warpgroup 1 in the last V
// stage, read by warpgroup 0's last O).
constexpr uint32_t kStageReadBarrier = 5;
static_assert(kEpilogueBarrier + 3 <= kStageReadBarrier && kStageReadBarrier + 2 <= 8,
              "named barriers: 8 ids after CUTLASS's reserved ones");

// kScoreMods: the instantiation that serves softcap and ALiBi (dropout stays on the sm80 path).
// kWarpgroupKeys: each consumer warpgroup's own key range under a right edge (warpgroup_keys).
// kLeftEdge: the call may have a window's left edge; without one the mask tests one edge per
// element (the diagonal tile of short causal calls is a large share of their work); a template
// argument so that no kernel carries both masks (a run-time choice put both in every kernel and
// cost the wide tile 5% without a mask: sm90a v34).
template <class K, bool kScoreMods, bool kWarpgroupKeys, bool kLeftEdge>
__global__ void __launch_bounds__(K::kThreads, 1) fwd_kernel_sm90(const __grid_constant__ FwdSm90Args<K> args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma and setmaxnreg exist on sm_90a only
  using namespace cute;
  using Element = typename K::Element;
  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Empty = cutlass::arch::ClusterBarrier;
  using cutlass::arch::NamedBarrier;
  const FwdParams& p = args.p;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& shared = *reinterpret_cast<typename K::SharedStorage*>(smem_raw);
  const int num_m = fwd_items_per_head<K>(p.seqlen_q);
  const int num_tiles = num_m * p.heads_q * p.batch;

  if (threadIdx.x == 0) {
    Full::init(&shared.q_full, 1);
    Empty::init(&shared.q_empty, K::kConsumerWarpgroups);
    for (int s = 0; s < K::kStages; ++s) {
      Full::init(&shared.k_full[s], 1);
      Empty::init(&shared.k_empty[s], K::kConsumerWarpgroups * K::kCluster);
    }
    for (int s = 0; s < K::kVStages; ++s) {
      Full::init(&shared.v_full[s], 1);
      Empty::init(&shared.v_empty[s], K::kConsumerWarpgroups * K::kCluster);
    }
    for (int s = 0; s < 2; ++s) {
      Empty::init(&shared.tile_full[s], 1);
      // In a cluster rank 0's also counts rank 1's producer, which has read the item's hand-out.
      Empty::init(&shared.tile_empty[s], K::kConsumerThreads + (K::kCluster > 1 && cute::block_rank_in_cluster() == 0));
      Empty::init(&shared.handoff_full[s], 1);
    }
    cutlass::arch::fence_barrier_init();
  }
  // In a cluster the other CTA's loads and consumers signal this CTA's barriers: it must have made
  // them first, and it may leave only once the other CTA is done with them (the end below). The
  // cluster barrier is an .aligned instruction: warp 0 reconverges first, as its thread 0 comes
  // from the producer's loop.
  auto sync_with_peer = [] {
    if constexpr (K::kCluster > 1) {
      __syncwarp();
      cute::cluster_sync();
    }
  };
  if constexpr (K::kCluster > 1) {
    sync_with_peer();
  } else {
    __syncthreads();
  }

  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<K::kProducerRegisters>();
    if (threadIdx.x == 0) {
      if (K::one_box_kv(args.p.d, args.p.d_v)) {
        produce_fwd_sm90<K, true>(args, shared, num_m, num_tiles);
      } else {
        produce_fwd_sm90<K, false>(args, shared, num_m, num_tiles);
      }
    }
    sync_with_peer();
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<K::kConsumerRegisters>();

  const int tid = threadIdx.x - 128;  // among the consumers
  const int wg = tid / 128;
  Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename K::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(shared.v.data()), typename K::SmemLayoutVt{});
  typename K::MmaS mma_s;
  typename K::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor tSrK = thr_s.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stage)
  Tensor tOrV = thr_o.partition_fragment_B(sVt);  // (MMA, MMA_N, MMA_K, stage)
  Tensor tSrS = partition_fragment_C(mma_s, typename K::TileS{});
  Tensor tOrO = partition_fragment_C(mma_o, typename K::TileO{});
  Tensor tOrP = make_tensor<Element>(partition_shape_A(mma_o, typename K::TileS{}));
  static_assert(decltype(size(tSrS))::value == K::kNTiles * 4 && decltype(size(tOrO))::value == K::kDTiles * 4 &&
                decltype(size(tOrP))::value == K::kNTiles * 4, "one 64-row warpgroup tile per thread");
  // O's accumulators as the sm80 score pipeline indexes them: [m-tile][n8 group][4] (S's likewise,
  // in softmax_tile).
  auto& acc_o = *reinterpret_cast<float(*)[1][K::kDTiles][4]>(raw_pointer_cast(tOrO.data()));
  // One thread per consumer warpgroup: its arrivals on the empty barriers and its output stores.
  const bool leader = tid % 128 == 0;
  // The leader's release of a K or V stage: in a cluster, to both CTAs (either CTA's next load
  // writes both).
  auto release_stage = [](uint64_t& empty) {
    if constexpr (K::kCluster > 1) {
      for (uint32_t cta = 0; cta < K::kCluster; ++cta) Empty::arrive(&empty, cta, 1u);
    } else {
      Empty::arrive(&empty);
    }
  };

  // Turns at the tensor cores (ping-pong; with two consumer warpgroups only, three issue freely):
  // warpgroup w waits on turn barrier w for the other warpgroup's arrival (its products issued),
  // issues its own and arrives on the other's barrier.
  // The turns run on across work items: both warpgroups take the same turns (n_keys + 1 per item,
  // with K::kSplitTurns 2 n_keys, one empty turn for an item without keys); warpgroup 1 opens the
  // first and warpgroup 0 takes up its last arrival at the end, so that every arrival meets a
  // wait. An arrival never runs ahead of the wait it is meant for, as each follows the other
  // warpgroup's previous turn.
  constexpr bool kPingPong = K::kConsumerWarpgroups == 2;
  auto turn_begin = [&] {
    if constexpr (kPingPong) NamedBarrier::sync(256, kTurnBarrier + wg);
  };
  auto turn_end = [&] {
    if constexpr (kPingPong) NamedBarrier::arrive(256, kTurnBarrier + 1 - wg);
  };
  if (kPingPong && wg == 1) NamedBarrier::arrive(256, kTurnBarrier);

  int kv_loads = 0;  // the producer's count, followed here for the barrier phases
  // With K::kStageOInKv: the K / V stage that holds the previous item's staged output (-1: none).
  // The leader gives it back once the stores have read it, which it waits for only after the next
  // item's first S product is issued (before an item without keys takes its turn), so that the
  // warpgroup does not stall on the read. After the last item it is not given back: the producer
  // has returned.
  int pending_stage = -1;
  auto release_pending_stage = [&] {
    if constexpr (K::kStageOInKv) {
      if (leader && pending_stage >= 0) {
        tma_store_wait<0>();
        release_stage(shared.k_empty[pending_stage]);
        release_stage(shared.v_empty[pending_stage]);
        pending_stage = -1;
      }
    }
  };
  for (int item = 0;; ++item) {
    const int slot = item % 2;
    Empty::wait(&shared.tile_full[slot], (item / 2) & 1);
    compiler_barrier();
    const int t = shared.tile[slot];
    compiler_barrier();
    Empty::arrive(&shared.tile_empty[slot]);  // every consumer thread, once it has read the slot
    if (t >= num_tiles) break;
    const FwdTile w = fwd_tile<K, kScoreMods>(args, t, num_m);
    const int n_keys = w.n_keys();
    // The warpgroup's index made warp-uniform to the compiler (a shuffle), so that the key-tile
    // indices that start at own.skip stay in uniform registers (from the thread index, the loop's
    // descriptors took 48 moves into them per iteration at d 128).
    const WarpgroupKeys own = warpgroup_keys<K, kWarpgroupKeys>(p, w, cutlass::canonical_warp_group_idx() - 1);
    const bool plain_scores = !kScoreMods || (p.softcap == 0.f && w.slope == 0.f);
    OnlineSoftmax<1, K::kMaxSlack, Element> softmax(plain_scores ? p.scale * kLog2e : 1.f);
    // The thread's place is read again per item rather than held across items (at d 256 the
    // register allocator spilled it).
    const int lane = cutlass::canonical_lane_idx(), warp = cutlass::canonical_warp_idx_sync() - 4;
    FragmentOrigin origin{w.wg_row0(warp / 4) + warp % 4 * 16, 0, lane / 4, lane % 4, 1};
    clear(tOrO);

    // S = Q K^T of key tile i into tSrS, issued and committed (not waited for).
    auto issue_s = [&](int i) {
      const int stage = (kv_loads + i) % K::kStages;
      Full::wait(&shared.k_full[stage], ((kv_loads + i) / K::kStages) & 1);
      // Q's shared-memory descriptors, one per 16 columns, made here (opaque_zero).
      Tensor tSrQ = thr_s.partition_fragment_A(
          make_tensor(make_smem_ptr(shared.q.data() + opaque_zero()), typename K::SmemLayoutQ{}));
      warpgroup_fence_operand(tSrS);
      warpgroup_arrive();
      mma_s.accumulate_ = GMMA::ScaleOut::Zero;
      CUTE_UNROLL
      for (int kb = 0; kb < size<2>(tSrQ); ++kb) {
        gemm(mma_s, tSrQ(_, _, kb), tSrK(_, _, kb, stage), tSrS);
        mma_s.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
    };
    // O += P V of key tile i, issued and committed.
    auto issue_o = [&](int i) {
      const int stage = (kv_loads + i) % K::kVStages;
      Full::wait(&shared.v_full[stage], ((kv_loads + i) / K::kVStages) & 1);
      warpgroup_fence_operand(tOrO);
      warpgroup_fence_operand(tOrP);
      warpgroup_arrive();
      CUTE_UNROLL
      for (int kb = 0; kb < size<2>(tOrP); ++kb) gemm(mma_o, tOrP(_, _, kb), tOrV(_, _, kb, stage), tOrO);
      warpgroup_commit_batch();
    };
    auto release_v = [&](int i) {
      warpgroup_fence_operand(tOrO);
      const bool staged_in = K::kStageOInKv && i == n_keys - 1;  // released after the stores
      if (leader && !staged_in) release_stage(shared.v_empty[(kv_loads + i) % K::kVStages]);
    };
    // The scores of key tile i (S landed) into weights; each row's O correction, and whether any of
    // the warp's rows needs one (with the softmax's slack the rows keep their max while it grows by
    // at most that, so after the first tiles the rescale is mostly skipped). The last tile's S is
    // the item's last read of Q: its buffer goes back to the producer. With K::kStageOInKv the last
    // K and V stages go back after the epilogue's stores, and warpgroup 1 tells warpgroup 0 here
    // that its last S has read the K stage. These releases open the softmax, or with
    // K::kSoftmaxOverlapsO close it (tile_size.h). cols: the n8 groups of S that take the softmax,
    // from the first; the others' weights are 0 (softmax_first_tile).
    float correction[1][2];
    bool rescale_o = true;
    auto softmax_tile = [&](int i, auto cols) {
      constexpr int kCols = decltype(cols)::value;
      auto& s = *reinterpret_cast<float(*)[1][kCols][4]>(raw_pointer_cast(tSrS.data()));  // its first kCols
      warpgroup_fence_operand(tSrS);
      const bool last = i == n_keys - 1;
      auto release_read_stages = [&] {
        if (leader) {
          if (!(K::kStageOInKv && last)) release_stage(shared.k_empty[(kv_loads + i) % K::kStages]);
          if (last) Empty::arrive(&shared.q_empty);
        }
        if (K::kStageOInKv && last && wg == 1) NamedBarrier::arrive(256, kStageReadBarrier);
      };
      if constexpr (!K::kSoftmaxOverlapsO) release_read_stages();
      const int n_block = w.keys.max - 1 - i;
      origin.col0 = n_block * K::kBlockN;
      if (!plain_scores) apply_score_mods(s, score_mod(p, w.slope), p.softcap_in, origin);
      auto update = [&] {
        softmax.template update_scores<K::kTreeReduce>(
            s, [&](int mt, int half, float c) { correction[mt][half] = c; }, [](float&, float&, int, int, int) {});
      };
      // With K::kSoftmaxBranches the masked and the unmasked tiles' softmax are two branches that
      // rejoin after the exponentials, so that the wait for the previous O product, which ptxas
      // moves up to the start of its basic block, stays after them (tile_size.h).
      if (n_block < own.unmasked.min || n_block >= own.unmasked.max) {
        apply_mask</*kRelativeRange=*/true, kLeftEdge>(s, score_mod(p, w.slope), origin);
        if constexpr (K::kSoftmaxBranches) update();
      } else if constexpr (K::kSoftmaxBranches) {
        update();
      }
      if constexpr (!K::kSoftmaxBranches) update();
      if constexpr (decltype(softmax)::kSlack > 0) {
        rescale_o = __any_sync(0xffffffffu, correction[0][0] != 1.f || correction[0][1] != 1.f);
      }
      if constexpr (K::kSoftmaxOverlapsO) release_read_stages();
#pragma unroll
      for (int nt = kCols; nt < K::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) tSrS(4 * nt + e) = 0.f;
    };
    auto softmax_full = [&](int i) { softmax_tile(i, Int<K::kNTiles>{}); };
    // The warpgroup's first tile (the one that holds its rows' last keys), with
    // K::kNarrowFirstSoftmax: where every row of the warpgroup drops the second half of its keys (a
    // causal diagonal aligned to the tiles: the first 64 rows of a 128-row item), the mask and
    // softmax take the first half only, half the exponentials of that tile (the limit of short
    // causal calls at d 64). The S and O products stay whole: cut to the half they made ptxas
    // serialise the wgmma (sm90a v52, v84). No product is in flight across this branch.
    auto softmax_first_tile = [&](int i) {
      if constexpr (K::kNarrowFirstSoftmax) {
        const int own_last_key = score_mod(p, w.slope).last_key(w.wg_row0(warp / 4) + 63);
        if (own_last_key <= (w.keys.max - 1 - i) * K::kBlockN + K::kBlockN / 2) {
          softmax_tile(i, Int<K::kNTiles / 2>{});
          return;
        }
      }
      softmax_full(i);
    };
    auto rescale = [&] {
      if (rescale_o) decltype(softmax)::rescale(acc_o, correction);
    };
    // P of the last softmax into the O product's register operand: the accumulator's register
    // order is the A operand's, so element by element.
    auto convert_p = [&] {
      CUTE_UNROLL
      for (int e = 0; e < size(tOrP); ++e) tOrP(e) = static_cast<Element>(tSrS(e));
      warpgroup_fence_operand(tOrP);
    };

    // A tile that holds no key of this warpgroup's rows (the item's first own.skip): no products,
    // its turns empty, and its stages go back once loaded (an earlier arrival could count towards the
    // stage's previous use, which another warpgroup may still read).
    // With K::kSplitTurns (one stage) K goes back before the first empty turn and V before the
    // second, as the products would give them back: V loads only after every warpgroup's previous O
    // product, and the other warpgroup's S product must not wait for it.
    auto pass_tile = [&](int i) {
      const int stage = (kv_loads + i) % K::kStages;
      const uint32_t phase = ((kv_loads + i) / K::kStages) & 1;
      auto pass_v = [&] {
        if (leader) {
          const int v_stage = (kv_loads + i) % K::kVStages;
          Full::wait(&shared.v_full[v_stage], ((kv_loads + i) / K::kVStages) & 1);
          release_stage(shared.v_empty[v_stage]);
        }
      };
      if (leader) {
        Full::wait(&shared.k_full[stage], phase);
        release_stage(shared.k_empty[stage]);
      }
      if constexpr (!K::kSplitTurns) pass_v();
      turn_begin();
      turn_end();
      if constexpr (K::kSplitTurns) {
        pass_v();
        turn_begin();
        turn_end();
      }
    };

    // Key tiles from the last to the first. Tile i's S = Q K^T runs on the tensor cores while
    // this warpgroup waits for nothing but it; without K::kSplitTurns, from the second tile on,
    // the next tile's S and this tile's O += P V are in flight together, and with
    // K::kSoftmaxOverlapsO or K::kSoftmaxBranches the softmax of the next tile overlaps the O product.
    Full::wait(&shared.q_full, item & 1);
    if (n_keys == 0) {
      release_pending_stage();
      if (leader && !K::kStageOInKv) Empty::arrive(&shared.q_empty);
      turn_begin();
      turn_end();
    } else if constexpr (K::kSplitTurns) {
      // One K / V stage, and no S product in flight beside the warpgroup's own O product (the
      // registers hold S, P and O once each): two turns per tile, S then O, so that the tensor
      // cores take S of warpgroup 0, S of 1, O of 0, O of 1: warpgroup 0's softmax runs under
      // warpgroup 1's S product and warpgroup 1's under warpgroup 0's O product, the next tile's K
      // loads under the two O products and its V under the next S products.
      static_assert(!K::kWideTile && !K::kStageOInKv, "split turns: two warpgroups, the output staged apart");
      for (int i = 0; i < own.skip; ++i) pass_tile(i);
      for (int i = own.skip; i < n_keys; ++i) {
        turn_begin();
        issue_s(i);
        turn_end();
        warpgroup_wait<0>();
        softmax_full(i);
        if (i > own.skip) rescale();  // O of the tiles before, to this tile's maxima
        convert_p();
        turn_begin();
        issue_o(i);
        turn_end();
        warpgroup_wait<0>();
        release_v(i);
      }
      kv_loads += n_keys;
    } else {
      // The previous item's staged output goes back first: the producer may need its stage for
      // the tiles skipped.
      if (own.skip > 0) release_pending_stage();
      for (int i = 0; i < own.skip; ++i) pass_tile(i);
      turn_begin();
      issue_s(own.skip);
      turn_end();
      release_pending_stage();
      warpgroup_wait<0>();
      softmax_first_tile(own.skip);
      convert_p();
      // O (tiles < i, at the old maxima) takes the last softmax's corrections before the next O
      // product: with kRescaleInTurn in the turn, between the S and O products' issue, where it
      // runs under the tensor cores' work instead of lengthening the softmax's span between turns
      // (tile_size.h).
      for (int i = own.skip + 1; i < n_keys; ++i) {
        turn_begin();
        issue_s(i);
        if constexpr (K::kRescaleInTurn) rescale();
        issue_o(i - 1);
        turn_end();
        // S of tile i; O += P V of tile i - 1 may still run, reading tOrP (without
        // K::kSoftmaxOverlapsO or K::kSoftmaxBranches ptxas moves the full wait below up to before
        // the exponentials). The score modifiers' kernel too, since their softcap takes a few
        // registers (sm90a v65).
        warpgroup_wait<1>();
        softmax_full(i);
        warpgroup_wait<0>();
        release_v(i - 1);
        if constexpr (!K::kRescaleInTurn) rescale();
        convert_p();
      }
      turn_begin();
      if constexpr (K::kRescaleInTurn) rescale();
      issue_o(n_keys - 1);
      turn_end();
      warpgroup_wait<0>();
      release_v(n_keys - 1);
      if (K::kStageOInKv && wg == 0) NamedBarrier::arrive(256, kStageReadBarrier + 1);  // its last O read V
      kv_loads += n_keys;
    }

    // Epilogue: rows normalised by their sums (empty rows: out 0, lse -inf), written into the
    // staging tile and taken out by TMA stores (whole rows in wide writes, rows past the queries
    // and columns past d clipped by the tensor map), which the threads do not wait for; lse by the
    // threads. (The threads' own 4-byte stores of O, which this replaced, measured 0.89-0.99x of
    // it, least at 512 keys: docs/performance.md, sm90a v17 / v18.)
    float inv[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = softmax.sum(0, half);
      // By the special-function unit: a row's sum lies in [2^-kSlack, keys] (OnlineSoftmax), far
      // inside __fdividef's range (+2% at d 64 causal below 8k keys, sm90a v55).
      inv[half] = sum > 0.f ? __fdividef(1.f, sum) : 0.f;
      const int row = origin.row0 + origin.g + 8 * half;
      if (p.lse != nullptr && origin.t == 0 && row < p.seqlen_q) {
        p.lse[int64_t(w.b) * p.lse_batch_stride + int64_t(w.h) * p.lse_head_stride + int64_t(row) * p.lse_row_stride] =
            softmax.lse(0, half, sum);
      }
    }
    // The warpgroup's staging tile, its address made here (opaque_zero). With K::kStageOInKv the
    // item's last K and V stages are one ring position (K::kVStages == K::kStages there).
    const int last_stage = (kv_loads + K::kStages - 1) % K::kStages;
    constexpr int kTileElements = cosize_v<typename K::SmemLayoutO>;
    Element* const last_kv = (wg == 0 ? shared.k.data() : shared.v.data()) + last_stage * K::kKvStageElements;
    Element* staging = (!K::kStageOInKv ? shared.o.data() + wg * kTileElements
                        : n_keys == 0    ? shared.q.data() + wg * kTileElements
                                         : last_kv) +
                       opaque_zero();
    // The accumulators' pairs (rows 16 (warp % 4) + g + 8 half, columns 8 dt + 2t, 2t + 1) as 32-bit
    // words of the tile, by their shared-memory addresses. The tile is boxes of kOBoxCols columns,
    // a row of kRowBytes each; the swizzle XORs a row's 16-byte chunk index with the row's bits from
    // 7 up, which for this thread's rows come from g alone: one base and one XOR term per thread, a
    // constant per word. (Through CuTe's swizzled pointer each word took a generic store with a
    // 64-bit address of its own, 6 instructions: sm90a v57.)
    using Swizzle = decltype(get_swizzle_portion(typename K::SmemLayoutO{}));
    constexpr int kRowBytes = K::kOBoxCols * sizeof(Element), kChunks = kRowBytes / 16;
    static_assert(Swizzle::num_base == 4 && Swizzle::num_shft == 3 && kChunks == 1 << Swizzle::num_bits,
                  "a box row is one swizzle row: its chunks XORed with the row's bits from 7 up");
    static_assert(kTileElements * sizeof(Element) % 1024 == 0 &&
                      (!K::kStageOInKv || K::kKvStageElements * sizeof(Element) % 1024 == 0),
                  "every staging tile starts on a 1024-byte boundary, a period of the swizzle");
    const uint32_t row_address =
        cast_smem_ptr_to_uint(staging) + (warp % 4 * 16 + origin.g) * kRowBytes + 4 * origin.t;
    const uint32_t chunk_xor = (origin.g * kRowBytes >> 7 & (kChunks - 1)) << 4;
    auto store_pair = [&](int dt, int half, uint32_t word) {
      const uint32_t address = row_address + ((dt % (K::kOBoxCols / 8) << 4) ^ chunk_xor) +
                               (dt / (K::kOBoxCols / 8) * 64 + half * 8) * kRowBytes;
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(address), "r"(word) : "memory");
    };
    // The output's boxes pass through the staging tile: all at once where it spans the head dim,
    // else one at a time through its slots in turn (d 256: four boxes, two slots), each box's stores
    // committed on their own, so that a slot is filled again once its last stores have read it
    // while the other slot's are still in flight.
    constexpr int kBoxes = K::kHeadDim / K::kOBoxCols, kSlots = K::kOStagingSlots;
    constexpr int kPassBoxes = kSlots == kBoxes ? kBoxes : 1, kBoxDTiles = K::kOBoxCols / 8;
#pragma unroll
    for (int box0 = 0; box0 < kBoxes; box0 += kPassBoxes) {
      const int slot0 = box0 % kSlots;
      if constexpr (K::kStageOInKv) {
        // The other warpgroup's last product has read the stage. (Without keys, Q's buffer: it has
        // just landed, and the stores that read it for an earlier item were waited for before its
        // release.)
        if (n_keys > 0) NamedBarrier::sync(256, kStageReadBarrier + wg);
      } else if (box0 == 0 || box0 >= kSlots) {
        // The slot's last stores have read it: the previous item's (issued a whole item ago: no
        // wait in practice), or this item's box kSlots before, with the boxes after it in flight.
        if (leader) {
          if (box0 == 0) {
            tma_store_wait<0>();
          } else {
            tma_store_wait<kSlots - 1>();
          }
        }
        NamedBarrier::sync(128, kEpilogueBarrier + wg);
      }
      compiler_barrier();  // CUTLASS's bar.sync has no memory clobber: the writes stay after it
#pragma unroll
      for (int dt = 0; dt < kPassBoxes * kBoxDTiles; ++dt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const auto& pair = acc_o[0][box0 * kBoxDTiles + dt];
          store_pair(slot0 * kBoxDTiles + dt, half,
                     pack2<Element>(pair[2 * half] * inv[half], pair[2 * half + 1] * inv[half]));
        }
      tma_store_fence();  // the threads' writes, visible to the TMA unit
      NamedBarrier::sync(128, kEpilogueBarrier + wg);
      if (leader) {
        // The warpgroup's 64 rows, a box per atom column.
        Tensor mO = args.tma_o.get_tma_tensor(make_shape(p.seqlen_q, p.d, p.heads_q, p.batch));
#pragma unroll
        for (int c = 0; c < kPassBoxes; ++c) {
          Tensor sBox = make_tensor(make_smem_ptr(staging + (slot0 + c) * 64 * K::kOBoxCols),
                                    typename K::SmemLayoutOBox{});
          Tensor gBox = local_tile(mO(_, _, w.h, w.b), Shape<_64, Int<K::kOBoxCols>>{},
                                   make_coord(w.wg_row0(wg) / 64, box0 + c));
          auto [tOg, tOs] =
              tma_partition(args.tma_o, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sBox), group_modes<0, 2>(gBox));
          copy(args.tma_o, tOs, tOg);
        }
        tma_store_arrive();
        if constexpr (K::kStageOInKv) {  // the staging buffer goes back to the producer once the stores read it
          if (n_keys > 0) {
            pending_stage = last_stage;  // given back in the next item (release_pending_stage)
          } else {
            tma_store_wait<0>();  // Q: before the next item's Q can load
            Empty::arrive(&shared.q_empty);
          }
        }
      }
    }
  }
  // The last TMA stores have read their tile before the CTA's shared memory goes.
  if (leader) tma_store_wait<0>();
  if (kPingPong && wg == 0) NamedBarrier::sync(256, kTurnBarrier);  // warpgroup 1's last arrival
  sync_with_peer();
#else
  __trap();  // an sm_90a kernel launched from another arch's code: never silently do nothing
#endif
}

}  // namespace flashattn::cuda
