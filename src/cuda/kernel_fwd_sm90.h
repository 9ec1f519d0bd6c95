// The sm90a forward kernel: one CTA per (query tile, head, sequence) with warp specialization.
// Warpgroup 0 produces: one thread loads Q once and K / V tiles into a kStages-deep ring by TMA,
// each stage guarded by a "full" mbarrier (the copy's bytes landed) and an "empty" one (every
// consumer warpgroup is done with it). Warpgroups 1.. consume, 64 query rows each: S = Q K^T by
// wgmma from shared memory, the online softmax of the sm80 kernel on the accumulators (same
// per-thread fragment order: rows g and g + 8, columns 2t and 2t + 1 of each n8 group), P packed
// to 16 bits in registers and O += P V by wgmma with P as the register operand; a tile's softmax
// runs while the previous tile's O product is in flight (the softcap / ALiBi instantiation waits
// for both products first). Two consumer warpgroups take turns at the tensor cores (ping-pong):
// each issues its products only after the other has issued its own, so that one warpgroup's
// softmax runs while the other's products occupy the tensor cores.
#pragma once

#include <cstdint>

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include "core/score_mod.h"
#include "cuda/fwd_params.h"
#include "cuda/mainloop_fwd_sm90.h"
#include "cuda/softmax_sm80.h"

namespace flashattn::cuda {

template <class K>
__device__ __forceinline__ void produce_fwd_sm90(const FwdSm90Args<K>& args, typename K::SharedStorage& shared,
                                                 int m_block, int h, int b, KeyTiles tiles) {
  using namespace cute;
  const FwdParams& p = args.p;
  const int hk = h / p.group, heads_kv = p.heads_q / p.group;
  Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename K::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename K::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(shared.v.data()), typename K::SmemLayoutVt{});
  Tensor mQ = args.tma_q.get_tma_tensor(make_shape(p.seqlen_q, p.d, p.heads_q, p.batch));
  Tensor mK = args.tma_k.get_tma_tensor(make_shape(p.seqlen_k, p.d, heads_kv, p.batch));
  Tensor mVt = args.tma_v.get_tma_tensor(make_shape(p.d_v, p.seqlen_k, heads_kv, p.batch));
  Tensor gQ = local_tile(mQ(_, _, h, b), typename K::TileQ{}, make_coord(m_block, _0{}));
  Tensor gK = local_tile(mK(_, _, hk, b), Shape<Int<K::kBlockN>, Int<K::kHeadDim>>{}, make_coord(_, _0{}));
  Tensor gVt = local_tile(mVt(_, _, hk, b), Shape<Int<K::kHeadDim>, Int<K::kBlockN>>{}, make_coord(_0{}, _));
  auto [tQg, tQs] = tma_partition(args.tma_q, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sQ), group_modes<0, 2>(gQ));
  auto [tKg, tKs] = tma_partition(args.tma_k, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sK), group_modes<0, 2>(gK));
  auto [tVg, tVs] = tma_partition(args.tma_v, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sVt), group_modes<0, 2>(gVt));

  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Empty = cutlass::arch::ClusterBarrier;
  Full::arrive_and_expect_tx(&shared.q_full, K::kQBytes);
  copy(args.tma_q.with(shared.q_full), tQg, tQs);
  // Key tiles from the last to the first, as the consumers take them.
  for (int i = 0; i < tiles.max - tiles.min; ++i) {
    const int n_block = tiles.max - 1 - i, stage = i % K::kStages;
    const uint32_t phase = (i / K::kStages) & 1;
    // A fresh barrier counts as having completed the phase before its first: round 0 passes.
    Empty::wait(&shared.k_empty[stage], phase ^ 1);
    Full::arrive_and_expect_tx(&shared.k_full[stage], K::kKvBytes);
    copy(args.tma_k.with(shared.k_full[stage]), tKg(_, n_block), tKs(_, stage));
    Empty::wait(&shared.v_empty[stage], phase ^ 1);
    Full::arrive_and_expect_tx(&shared.v_full[stage], K::kKvBytes);
    copy(args.tma_v.with(shared.v_full[stage]), tVg(_, n_block), tVs(_, stage));
  }
}

// The first of the two named barriers (ids after CUTLASS's reserved ones) that order the consumer
// warpgroups' turns at the tensor cores.
constexpr uint32_t kTurnBarrier = 0;

// kScoreMods: the instantiation that serves softcap and ALiBi (dropout stays on the sm80 path).
template <class K, bool kScoreMods>
__global__ void __launch_bounds__(K::kThreads, 1) fwd_kernel_sm90(const __grid_constant__ FwdSm90Args<K> args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // wgmma and setmaxnreg exist on sm_90a only
  using namespace cute;
  using Element = typename K::Element;
  using Full = cutlass::arch::ClusterTransactionBarrier;
  using Empty = cutlass::arch::ClusterBarrier;
  const FwdParams& p = args.p;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  auto& shared = *reinterpret_cast<typename K::SharedStorage*>(smem_raw);

  // Query tiles in reverse: under a causal mask the last tiles have the most keys and start first.
  const int m_block = int(gridDim.x) - 1 - int(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int m_start = m_block * K::kBlockM, m_rows = min(K::kBlockM, p.seqlen_q - m_start);
  const float slope = kScoreMods && p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;
  const ScoreMod<float> mod{p.scale, p.softcap, slope, p.seqlen_k - p.seqlen_q, p.seqlen_k,
                            p.window_left, p.window_right};
  const KeyTiles tiles = key_tiles(mod, m_start, m_start + m_rows - 1, K::kBlockN);

  if (threadIdx.x == 0) {
    Full::init(&shared.q_full, 1);
    for (int s = 0; s < K::kStages; ++s) {
      Full::init(&shared.k_full[s], 1);
      Full::init(&shared.v_full[s], 1);
      Empty::init(&shared.k_empty[s], K::kConsumerWarpgroups);
      Empty::init(&shared.v_empty[s], K::kConsumerWarpgroups);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    cutlass::arch::warpgroup_reg_dealloc<K::kProducerRegisters>();
    if (threadIdx.x == 0) produce_fwd_sm90<K>(args, shared, m_block, h, b, tiles);
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<K::kConsumerRegisters>();

  const int tid = threadIdx.x - 128;  // among the consumers
  const int lane = tid % 32, warp = tid / 32;
  Tensor sQ = make_tensor(make_smem_ptr(shared.q.data()), typename K::SmemLayoutQ{});
  Tensor sK = make_tensor(make_smem_ptr(shared.k.data()), typename K::SmemLayoutK{});
  Tensor sVt = make_tensor(make_smem_ptr(shared.v.data()), typename K::SmemLayoutVt{});
  typename K::MmaS mma_s;
  typename K::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor tSrQ = thr_s.partition_fragment_A(sQ);   // shared-memory descriptors
  Tensor tSrK = thr_s.partition_fragment_B(sK);   // (MMA, MMA_N, MMA_K, stage)
  Tensor tOrV = thr_o.partition_fragment_B(sVt);  // (MMA, MMA_N, MMA_K, stage)
  Tensor tSrS = partition_fragment_C(mma_s, typename K::TileS{});
  Tensor tOrO = partition_fragment_C(mma_o, typename K::TileO{});
  Tensor tOrP = make_tensor<Element>(partition_shape_A(mma_o, typename K::TileS{}));
  static_assert(decltype(size(tSrS))::value == K::kNTiles * 4 && decltype(size(tOrO))::value == K::kDTiles * 4 &&
                decltype(size(tOrP))::value == K::kNTiles * 4, "one 64-row warpgroup tile per thread");
  // The accumulators as the sm80 score pipeline indexes them: [m-tile][n8 group][4].
  auto& s = *reinterpret_cast<float(*)[1][K::kNTiles][4]>(raw_pointer_cast(tSrS.data()));
  auto& acc_o = *reinterpret_cast<float(*)[1][K::kDTiles][4]>(raw_pointer_cast(tOrO.data()));
  clear(tOrO);

  const bool plain_scores = !kScoreMods || (p.softcap == 0.f && slope == 0.f);
  OnlineSoftmax<1> softmax(plain_scores ? p.scale * kLog2e : 1.f);
  FragmentOrigin origin{m_start + warp * 16, 0, lane / 4, lane % 4, 1};
  const bool releases = tid % 128 == 0;  // one arrival per consumer warpgroup on the empty barriers

  // S = Q K^T of key tile i into tSrS, issued and committed (not waited for).
  auto issue_s = [&](int i) {
    const int stage = i % K::kStages;
    Full::wait(&shared.k_full[stage], (i / K::kStages) & 1);
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
    const int stage = i % K::kStages;
    Full::wait(&shared.v_full[stage], (i / K::kStages) & 1);
    warpgroup_fence_operand(tOrO);
    warpgroup_fence_operand(tOrP);
    warpgroup_arrive();
    CUTE_UNROLL
    for (int kb = 0; kb < size<2>(tOrP); ++kb) gemm(mma_o, tOrP(_, _, kb), tOrV(_, _, kb, stage), tOrO);
    warpgroup_commit_batch();
  };
  // The scores of key tile i (S landed) into weights; each row's O correction.
  float correction[1][2];
  auto softmax_tile = [&](int i) {
    warpgroup_fence_operand(tSrS);
    if (releases) Empty::arrive(&shared.k_empty[i % K::kStages]);
    // Only tiles that cross a window edge or the end of the keys pay for the per-element mask.
    origin.col0 = (tiles.max - 1 - i) * K::kBlockN;
    const int q_last = m_start + K::kBlockM - 1;
    const bool need_mask = origin.col0 + K::kBlockN > p.seqlen_k ||
                           (p.window_left >= 0 && origin.col0 < mod.first_key(q_last)) ||
                           (p.window_right >= 0 && origin.col0 + K::kBlockN > mod.last_key(m_start));
    if (!plain_scores) apply_score_mods(s, mod, origin);
    if (need_mask) apply_mask(s, mod, origin);
    softmax.update_scores(
        s, [&](int mt, int half, float c) { correction[mt][half] = c; }, [](float&, float&, int, int, int) {});
  };
  // P of the last softmax into the O product's register operand: the accumulator's register order
  // is the A operand's, so element by element.
  auto convert_p = [&] {
    CUTE_UNROLL
    for (int e = 0; e < size(tOrP); ++e) tOrP(e) = static_cast<Element>(tSrS(e));
    warpgroup_fence_operand(tOrP);
  };

  // Turns at the tensor cores: warpgroup w waits on barrier w for the other warpgroup's arrival
  // (its products issued), issues its own and arrives on the other's barrier. Both warpgroups
  // take n_tiles + 1 turns; warpgroup 1 opens the first turn for warpgroup 0 and leaves out its
  // last arrival, so that every arrival is matched by a wait.
  const int n_tiles = tiles.max - tiles.min;
  const int wg = tid / 128;
  constexpr bool kPingPong = K::kConsumerWarpgroups == 2;
  auto turn_begin = [&] {
    if constexpr (kPingPong) cutlass::arch::NamedBarrier::sync(256, kTurnBarrier + wg);
  };
  auto turn_end = [&](bool last) {
    if constexpr (kPingPong) {
      if (!(last && wg == 1)) cutlass::arch::NamedBarrier::arrive(256, kTurnBarrier + 1 - wg);
    }
  };
  if (kPingPong && wg == 1 && n_tiles > 0) cutlass::arch::NamedBarrier::arrive(256, kTurnBarrier);

  // Key tiles from the last to the first. Tile i's S = Q K^T runs on the tensor cores while this
  // warpgroup waits for nothing but it; from the second tile on, the next tile's S and this tile's
  // O += P V are in flight together, and the softmax of the next tile overlaps the O product.
  Full::wait(&shared.q_full, 0);
  if (n_tiles > 0) {
    turn_begin();
    issue_s(0);
    turn_end(false);
    warpgroup_wait<0>();
    softmax_tile(0);
    convert_p();
  }
  for (int i = 1; i < n_tiles; ++i) {
    turn_begin();
    issue_s(i);
    issue_o(i - 1);
    turn_end(false);
    // S of tile i; O += P V of tile i - 1 may still run, reading tOrP. The score modifiers' extra
    // registers do not fit beside a live P at d 128 (20 bytes of spills): that instantiation
    // waits for both products before its softmax.
    warpgroup_wait<kScoreMods ? 0 : 1>();
    softmax_tile(i);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    if (releases) Empty::arrive(&shared.v_empty[(i - 1) % K::kStages]);
    OnlineSoftmax<1>::rescale(acc_o, correction);  // O holds tiles < i, at the old max
    convert_p();
  }
  if (n_tiles > 0) {
    turn_begin();
    issue_o(n_tiles - 1);
    turn_end(true);
    warpgroup_wait<0>();
    warpgroup_fence_operand(tOrO);
    if (releases) Empty::arrive(&shared.v_empty[(n_tiles - 1) % K::kStages]);
  }

  // Epilogue: rows normalised by their sums (empty rows: out 0, lse -inf), 4-byte stores.
  Element* out = static_cast<Element*>(p.out);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float sum = softmax.sum(0, half);
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    const int row = origin.row0 + origin.g + 8 * half;
    if (row >= p.seqlen_q) continue;
    Element* dst = out + int64_t(b) * p.out_batch_stride + int64_t(row) * p.out_row_stride +
                   int64_t(h) * p.out_head_stride;
#pragma unroll
    for (int dt = 0; dt < K::kDTiles; ++dt) {
      const int col = dt * 8 + 2 * origin.t;
      if (col < p.d_v) {
        *reinterpret_cast<uint32_t*>(dst + col) = pack2<Element>(acc_o[0][dt][2 * half] * inv, acc_o[0][dt][2 * half + 1] * inv);
      }
    }
    if (p.lse != nullptr && origin.t == 0) {
      p.lse[int64_t(b) * p.lse_batch_stride + int64_t(h) * p.lse_head_stride + int64_t(row) * p.lse_row_stride] =
          softmax.lse(0, half, sum);
    }
  }
#else
  __trap();  // an sm_90a kernel launched from another arch's code: never silently do nothing
#endif
}

}  // namespace flashattn::cuda
