// The sm80 backward, dq pass: one CTA per (query tile, head, sequence). With its rows' statistics
// from the row-statistics kernel it sweeps the rows' keys with K and V double-buffered:
// S = Q K^T, dP = dout V^T, dS, dq += dS K.
// dq accumulates in f32 registers and is written once, so the result is bitwise reproducible.
#pragma once

#include <cstdint>

#include "core/philox.h"
#include "core/score_mod.h"
#include "cuda/bwd_params.h"
#include "cuda/epilogue_bwd_sm80.h"
#include "cuda/mainloop_bwd_sm80.h"
#include "cuda/seq_info.h"
#include "cuda/softmax_bwd_sm80.h"

namespace flashattn::cuda {

template <class K, bool kScoreMods, bool kLongestFirst = false>
__global__ void __launch_bounds__(K::kThreads, 1) bwd_dq_kernel_sm80(const __grid_constant__ BwdParams p) {
  using Element = typename K::Element;
  using Gemm = typename K::Gemm;
  constexpr int kM = K::kWarpMTiles;
  extern __shared__ __align__(128) unsigned char smem_raw[];  // swizzled tiles start on 128-byte boundaries
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  Element* sdO = sQ + K::kBlockM * K::kSmemStride;
  Element* sKV = sdO + K::kBlockM * K::kSmemStride;  // stage s: K at 2s, V at 2s + 1
  RowStats* sStats = reinterpret_cast<RowStats*>(sKV + 4 * K::kBlockN * K::kSmemStride);
  auto stage_k = [&](int stage) { return sKV + (2 * stage) * K::kBlockN * K::kSmemStride; };
  auto stage_v = [&](int stage) { return sKV + (2 * stage + 1) * K::kBlockN * K::kSmemStride; };

  // The CTA's query tile and head: x and y of the grid, or with kLongestFirst y from the last tile
  // down and x (launch_bwd_sm80.h: under a causal mask the later tiles keep more keys).
  const int m_block = kLongestFirst ? gridDim.y - 1 - blockIdx.y : blockIdx.x;
  const int h = kLongestFirst ? blockIdx.x : blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const SeqInfo seq = seq_info(p, b);
  const int m_start = m_block * K::kBlockM;
  if (m_start >= seq.seqlen_q) return;
  const int m_rows = min(K::kBlockM, seq.seqlen_q - m_start);
  const int hk = h / p.group;
  const int warp_row0 = warp * 16 * kM;
  const bool varlen_q = p.cu_seqlens_q != nullptr;

  const float slope = kScoreMods && p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;
  const BwdScores scores{
      ScoreMod<float>{p.scale, p.softcap, slope, seq.seqlen_k - seq.seqlen_q, seq.seqlen_k,
                      p.window_left, p.window_right},
      !kScoreMods || (p.softcap == 0.f && slope == 0.f), p.scale * kLog2e,
      make_dropout_rng(p.dropout_seed, p.dropout_offset, p.dropout_threshold, b, p.heads_q, h),
      p.dropout_scale, p.softcap_in};
  const ScoreMod<float>& mod = scores.mod;
  const KeyTiles keys = key_tiles(mod, m_start, m_start + m_rows - 1, K::kBlockN);
  const int n_block_min = keys.min, n_block_max = keys.max;
  const KeyTiles unmasked = unmasked_key_tiles(mod, m_start, m_start + K::kBlockM - 1, K::kBlockN);

  const Element* k = static_cast<const Element*>(p.k);
  const Element* v = static_cast<const Element*>(p.v);
  const Element* k_seq = k + k_row_offset(p, seq, b, 0, hk, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  const Element* v_seq = v + k_row_offset(p, seq, b, 0, hk, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  auto load_kv = [&](int n_block, int stage) {
    const int n0 = n_block * K::kBlockN;
    load_rows_async<K, K::kBlockN>(stage_k(stage), k_seq + n0 * p.k_row_stride, p.k_row_stride,
                                   seq.seqlen_k - n0, p.d);
    load_rows_async<K, K::kBlockN>(stage_v(stage), v_seq + n0 * p.v_row_stride, p.v_row_stride,
                                   seq.seqlen_k - n0, p.d_v);
  };

  load_rows_async<K, K::kBlockM>(
      sQ, static_cast<const Element*>(p.q) + q_row_offset(seq, varlen_q, b, m_start, h, p.q_batch_stride,
                                                          p.q_row_stride, p.q_head_stride),
      p.q_row_stride, m_rows, p.d);
  load_rows_async<K, K::kBlockM>(
      sdO, static_cast<const Element*>(p.dout) + q_row_offset(seq, varlen_q, b, m_start, h, p.dout_batch_stride,
                                                              p.dout_row_stride, p.dout_head_stride),
      p.dout_row_stride, m_rows, p.d_v);
  if (n_block_max > n_block_min) load_kv(n_block_min, 0);
  cp_async_commit();
  for (int r = threadIdx.x; r < K::kBlockM; r += K::kThreads) {
    sStats[r] = r < m_rows ? p.stats[int64_t(h) * p.stats_rows_per_head + workspace_row(p, seq, b, m_start + r)]
                           : RowStats{INFINITY, 0.f};
  }
  cp_async_wait<0>();
  __syncthreads();

  float acc_dq[kM][Gemm::kDTiles][4];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int dt = 0; dt < Gemm::kDTiles; ++dt) acc_dq[mt][dt][0] = acc_dq[mt][dt][1] = acc_dq[mt][dt][2] = acc_dq[mt][dt][3] = 0.f;
  FragmentOrigin origin{m_start + warp_row0, 0, lane / 4, lane % 4};
  const RowStats* warp_stats = sStats + warp_row0;

  for (int n_block = n_block_min; n_block < n_block_max; ++n_block) {
    const int stage = (n_block - n_block_min) % 2;
    if (n_block + 1 < n_block_max) load_kv(n_block + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // K, V (n_block) landed for every warp

    float s[kM][Gemm::kNTiles][4], dp[kM][Gemm::kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int nt = 0; nt < Gemm::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = dp[mt][nt][e] = 0.f;
    gemm_qk<Gemm>(sQ, stage_k(stage), s, warp_row0, lane);
    gemm_qk<Gemm>(sdO, stage_v(stage), dp, warp_row0, lane);

    origin.col0 = n_block * K::kBlockN;
    const bool need_mask = n_block < unmasked.min || n_block >= unmasked.max;
    auto stats = [&](int r) { return warp_stats[r]; };
    if (need_mask) {
      probabilities_and_ds<false, kScoreMods, true>(s, dp, scores, origin, stats);
    } else {
      probabilities_and_ds<false, kScoreMods, false>(s, dp, scores, origin, stats);
    }
    gemm_pv<Gemm>(dp, stage_k(stage), 0, acc_dq, lane);
    __syncthreads();  // every warp is done with this stage before the next load refills it
  }

  cp_async_wait<0>();
  store_rows_scaled<K, K::kBlockM, K::kHeadDim, Gemm>(acc_dq, p.scale, sQ, warp_row0, 0, m_rows, p.d, 0,
                             [&](int r) {
                               return static_cast<Element*>(p.dq) +
                                      q_row_offset(seq, varlen_q, b, m_start + r, h, p.dq_batch_stride,
                                                   p.dq_row_stride, p.dq_head_stride);
                             });
}

}  // namespace flashattn::cuda
