// The sm80 backward, dk/dv pass: one CTA per (key tile, kv head, sequence) and column slice. It
// keeps its K and V rows in shared memory and sweeps the queries of every head of the kv head's
// group, with Q and dout double-buffered: S^T = K Q^T, dP^T = V dout^T, dS^T, dv += P^T dout,
// dk += dS^T Q. The group's heads are summed in registers in a fixed order, so dk and dv are
// bitwise reproducible. It reads the row-statistics kernel's output. Two modes: after the dq pass
// (deterministic), or as the single pass of the backward (kDqAtomic: it also stages dS^T in shared
// memory and adds dq = dS K into an f32 accumulator by atomics, which FlashAttention-2 does too:
// 5 matrix products per tile instead of 7; its warps split the columns and exchange P^T and dS^T
// in shared memory, except in the compact tile for smaller devices, mainloop_bwd_sm80.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/philox.h"
#include "core/score_mod.h"
#include "cuda/bwd_params.h"
#include "cuda/epilogue_bwd_sm80.h"
#include "cuda/mainloop_bwd_sm80.h"
#include "cuda/seq_info.h"
#include "cuda/softmax_bwd_sm80.h"

namespace flashattn::cuda {

// One warp's fragments (rows = keys from key0, columns = queries from query0) into a [key][query]
// tile of shared memory, as 32-bit pairs.
template <class K, int kM, int kNTiles>
__device__ __forceinline__ void stage_transposed(const float (&f)[kM][kNTiles][4], typename K::Element* s,
                                                 int key0, int query0, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = key0 + mt * 16 + g + 8 * half, query = query0 + nt * 8 + 2 * t;
        *reinterpret_cast<uint32_t*>(s + key * K::kDsStride + query) =
            pack2<typename K::Element>(f[mt][nt][2 * half], f[mt][nt][2 * half + 1]);
      }
}

// The single pass's dq step, once every warp's dS^T is in sdSt (keys x queries): each warp
// multiplies kDqWarpMTiles m16 tiles of queries by its share of this CTA's K columns and adds the
// product to the tiled dq accumulator (dq_tiles: this step's first 16-row tile, bwd_params.h), one
// 16-byte atomic per n8 tile where the device has it, coalesced over the warp. Query rows past the
// sequence's end (rows: the step's rows that exist) add their dS, which is 0: guarded, to the
// padding of its last tile, tiles past that one skipped; with kUnguardedDqAtomics, without a test
// on the rows, into the tiles that follow (the next sequence's or head's, past the last head the
// accumulator's kDqAccumPadTiles). n8 tiles past d (a head dim served by a larger instantiation)
// are skipped, or with kUnguardedDqAtomics added to the padding. The columns go in
// kDqColumnRounds rounds: all of them, or only_round's alone (the caller interleaves the rounds
// with other work).
template <class K, bool kHeadsFirst>
__device__ __forceinline__ void add_dq(const BwdParams& p, float* dq_tiles, int rows, int col0,
                                       const typename K::Element* sK, const typename K::Element* sdSt,
                                       int lane, int only_round = -1) {
  constexpr int kM = K::kDqWarpMTiles;
  static_assert(!K::kUnguardedDqAtomics || K::kBlockM / kDqAccumTileRows - 1 <= kDqAccumPadTiles,
                "a step's rows past the last sequence's tiles stay inside the accumulator's padding");
  const int warp = threadIdx.x / 32;
  const int q_tile0 = (warp % K::kDqMWarps) * kM;
  if (warp / K::kDqMWarps >= K::kDqWarpsN) return;  // a compile-time false where every warp takes part
  if (!K::kUnguardedDqAtomics && q_tile0 * kDqAccumTileRows >= rows) return;
  const int c0 = col0 + (warp / K::kDqMWarps) * K::kDqDTiles * 8;
  // The warp's columns in kDqColumnRounds rounds: fewer accumulators live at once, and one
  // round's atomics drain under the next round's products.
  constexpr int kDT = K::kDqDTiles / K::kDqColumnRounds;
  // The sink's offsets reach (kDqAccumPadTiles - 1) * (d / 8) + kDT - 1 n8 tiles past the padding's
  // start: inside the padding's rows and the kDqAccumSinkTiles after them for any d.
  static_assert(!K::kUnguardedDqAtomics || (kM <= kDqAccumPadTiles && kDT <= kDqAccumSinkTiles + 1),
                "a warp's n8 tiles past d land in the accumulator's padding");
  // With kUnguardedDqAtomics, n8 tiles past d go to the accumulator's padding, which nothing reads:
  // a select, not a branch, so that the compiler may schedule the atomics among the products that
  // follow. The padding row varies with the CTA's key tile (the grid's x, or y where it runs heads
  // first), so that the CTAs do not all add to one address.
  [[maybe_unused]] float* const sink =
      p.dq_accum + ((int64_t(p.heads_q) * p.dq_accum_tiles_per_head +
                     (kHeadsFirst ? blockIdx.y : blockIdx.x) % (kDqAccumPadTiles - kM + 1)) *
                        (p.d / 8) * kDqAccumTileFloats +
                    lane * 4);
#pragma unroll
  for (int round = 0; round < K::kDqColumnRounds; ++round) {
    if (only_round >= 0 && round != only_round) continue;
    const int cr = c0 + round * kDT * 8;  // the round's first column
    float acc[kM][kDT][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) acc[mt][dt][0] = acc[mt][dt][1] = acc[mt][dt][2] = acc[mt][dt][3] = 0.f;
    gemm_smem<true, typename K::Element, kM, K::kBlockN, kDT, K::kDsStride, typename K::Rows>(
        sdSt + q_tile0 * 16, sK, cr, acc, lane);
    // One address computation, then constant offsets.
    float* dst = dq_tiles + ((q_tile0 * (p.d / 8) + cr / 8) * kDqAccumTileFloats + lane * 4);
    const int tiles = (p.d - cr) / 8;
    if constexpr (K::kUnguardedDqAtomics) {
#pragma unroll
      for (int mt = 0; mt < kM; ++mt)
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt)
          atomic_add_f32x4((dt < tiles ? dst : sink) + (mt * (p.d / 8) + dt) * kDqAccumTileFloats, acc[mt][dt]);
    } else {
      // The test for n8 tiles past d stays off the common path.
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
        if (mt > 0 && (q_tile0 + mt) * kDqAccumTileRows >= rows) break;
        float* tile_dst = dst + mt * (p.d / 8) * kDqAccumTileFloats;
        if (tiles >= kDT) {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) atomic_add_f32x4(tile_dst + dt * kDqAccumTileFloats, acc[mt][dt]);
        } else {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt)
            if (dt < tiles) atomic_add_f32x4(tile_dst + dt * kDqAccumTileFloats, acc[mt][dt]);
        }
      }
    }
  }
}

template <class K, bool kScoreMods, bool kDqAtomic, bool kHeadsFirst = false>
__global__ void __launch_bounds__(K::kThreads, 1) bwd_dkdv_kernel_sm80(const __grid_constant__ BwdParams p) {
  using Element = typename K::Element;
  using Gemm = typename K::Gemm;
  constexpr int kM = K::kWarpMTiles;
  extern __shared__ __align__(128) unsigned char smem_raw[];  // swizzled tiles start on 128-byte boundaries
  Element* sK = reinterpret_cast<Element*>(smem_raw);
  Element* sV = sK + K::kBlockN * K::kSmemStride;
  Element* sQdO = sV + K::kBlockN * K::kSmemStride;  // stage s: Q at 2s, dout at 2s + 1
  RowStats* sStats = reinterpret_cast<RowStats*>(sQdO + 4 * K::kBlockM * K::kSmemStride);
  Element* sdSt = reinterpret_cast<Element*>(sStats + 2 * K::kBlockM);  // [key][query]
  Element* sPt = sdSt + K::kBlockN * K::kDsStride;                       // with split columns
  static_assert(K::kColSplit == 1 || kDqAtomic, "split columns exchange P^T and dS^T in the single pass only");
  auto stage_q = [&](int stage) { return sQdO + (2 * stage) * K::kBlockM * K::kSmemStride; };
  auto stage_do = [&](int stage) { return sQdO + (2 * stage + 1) * K::kBlockM * K::kSmemStride; };

  // The tail launch runs beside the main one (programmatic dependent launch) and finishes only
  // after it, so that the dq conversion that follows on the stream sees both launches' atomics:
  // its last CTA waits for the main launch before it exits (the others leave their SMs at once).
  struct WaitForMainLaunch {
    __device__ ~WaitForMainLaunch() {
      if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 && blockIdx.z == gridDim.z - 1) {
        wait_for_prerequisite_grid();
      }
    }
  };
  struct Nothing {};
  [[maybe_unused]] std::conditional_t<K::kTail, WaitForMainLaunch, Nothing> wait_at_exit;
  if constexpr (K::kSinglePass && !K::kTail) launch_dependents();
  // The CTA's key tile (times column slice) and kv head: x and y of the grid, or with kHeadsFirst y
  // and x (launch_bwd_sm80.h: under a causal mask the tiles start longest first across the heads).
  // A template argument, not a runtime flag: a select cost the kernel 0.7% without a mask at d 128.
  const unsigned tile_slice = kHeadsFirst ? blockIdx.y : blockIdx.x;
  const int n_block = tile_slice / K::kOutSplit, col0 = (tile_slice % K::kOutSplit) * K::kCtaCols;
  const int hk = kHeadsFirst ? blockIdx.x : blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const SeqInfo seq = seq_info(p, b);
  const int stored = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : seq.seqlen_k;
  const int n_start = (K::kTail ? p.dkv_first_key : 0) + n_block * K::kBlockN;  // the main launch reads no first key
  if (n_start >= stored) return;
  const int stored_rows = min(K::kBlockN, stored - n_start);
  const int keys = max(0, min(stored_rows, seq.seqlen_k - n_start));  // rows past seqused_k: 0
  // This warp's keys, its columns of S^T / dP^T (queries of the step) and of dk / dv.
  const int key_group = warp % K::kKeyGroups, col_part = warp / K::kKeyGroups;
  const int warp_row0 = key_group * 16 * kM;
  const int warp_q0 = col_part * K::kWarpQueries, warp_c0 = col_part * K::kWarpCols;
  const bool varlen_q = p.cu_seqlens_q != nullptr;

  const Element* k = static_cast<const Element*>(p.k);
  const Element* v = static_cast<const Element*>(p.v);
  load_rows_async<K, K::kBlockN>(
      sK, k + k_row_offset(p, seq, b, n_start, hk, p.k_batch_stride, p.k_row_stride, p.k_head_stride),
      p.k_row_stride, keys, p.d);
  load_rows_async<K, K::kBlockN>(
      sV, v + k_row_offset(p, seq, b, n_start, hk, p.v_batch_stride, p.v_row_stride, p.v_head_stride),
      p.v_row_stride, keys, p.d_v);

  // Queries that keep any key of [n_start, n_start + keys): the same range for every head.
  const ScoreMod<float> bounds{p.scale, p.softcap, 0.f, seq.seqlen_k - seq.seqlen_q, seq.seqlen_k,
                               p.window_left, p.window_right};
  const int64_t off = bounds.off;
  const int64_t i_lo = p.window_right >= 0 ? max(int64_t(0), n_start - off - p.window_right) : 0;
  const int64_t i_hi = p.window_left >= 0 ? min(int64_t(seq.seqlen_q), n_start + keys - off + p.window_left)
                                          : int64_t(seq.seqlen_q);
  const int m_lo = int(i_lo / K::kBlockM);
  const int m_blocks = keys > 0 && i_hi > i_lo ? int((i_hi + K::kBlockM - 1) / K::kBlockM) - m_lo : 0;
  const int steps = m_blocks * p.group;

  // Steps walk the query tiles of each head of the group in turn: (head, query tile) of a step,
  // advanced by one per step (no division in the loop).
  struct StepPlace {
    int h, m_block;
  };
  auto next_place = [&](StepPlace at) {
    return at.m_block + 1 < m_lo + m_blocks ? StepPlace{at.h, at.m_block + 1} : StepPlace{at.h + 1, m_lo};
  };
  const Element* q = static_cast<const Element*>(p.q);
  const Element* dout = static_cast<const Element*>(p.dout);
  auto load_step = [&](StepPlace at, int stage) {
    const int h = at.h, m_start = at.m_block * K::kBlockM;
    const int rows = min(K::kBlockM, seq.seqlen_q - m_start);
    load_rows_async<K, K::kBlockM>(
        stage_q(stage), q + q_row_offset(seq, varlen_q, b, m_start, h, p.q_batch_stride, p.q_row_stride, p.q_head_stride),
        p.q_row_stride, rows, p.d);
    load_rows_async<K, K::kBlockM>(
        stage_do(stage), dout + q_row_offset(seq, varlen_q, b, m_start, h, p.dout_batch_stride,
                                             p.dout_row_stride, p.dout_head_stride),
        p.dout_row_stride, rows, p.d_v);
    // Rows past the queries get lse +inf, so P is exactly 0 (a zero lse would let a negative
    // ALiBi slope overflow 2^x); the step's first barrier publishes the plain store too.
    if (threadIdx.x < K::kBlockM) {
      const int r = threadIdx.x;
      if (r < rows) {
        cp_async_8(sStats + stage * K::kBlockM + r,
                   p.stats + int64_t(h) * p.stats_rows_per_head + workspace_row(p, seq, b, m_start + r), true);
      } else {
        sStats[stage * K::kBlockM + r] = RowStats{INFINITY, 0.f};
      }
    }
  };

  float acc_dk[kM][Gemm::kDTiles][4], acc_dv[kM][Gemm::kDTiles][4];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int dt = 0; dt < Gemm::kDTiles; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_dk[mt][dt][e] = acc_dv[mt][dt][e] = 0.f;

  StepPlace place{hk * p.group, m_lo};
  if (steps > 0) load_step(place, 0);
  cp_async_commit();
  for (int step = 0; step < steps; ++step, place = next_place(place)) {
    const int stage = step % 2;
    if constexpr (!K::kCopiesAfterTopBarrier) {
      if (step + 1 < steps) load_step(next_place(place), stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    // K, V and this step's Q, dout, statistics landed for every warp; with kCopiesAfterTopBarrier
    // also every warp is done with the previous step (its stage, refilled next, and sdSt, sPt).
    __syncthreads();
    if constexpr (K::kCopiesAfterTopBarrier) {
      if (step + 1 < steps) load_step(next_place(place), stage ^ 1);
      cp_async_commit();
    }

    const int h = place.h, m_start = place.m_block * K::kBlockM;
    const float slope = kScoreMods && p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;
    BwdScores scores{bounds, !kScoreMods || (p.softcap == 0.f && slope == 0.f), p.scale * kLog2e,
                     make_dropout_rng(p.dropout_seed, p.dropout_offset, p.dropout_threshold, b, p.heads_q, h),
                     p.dropout_scale, p.softcap_in};
    scores.mod.alibi_slope = slope;

    float st[kM][Gemm::kNTiles][4], dpt[kM][Gemm::kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int nt = 0; nt < Gemm::kNTiles; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[mt][nt][e] = dpt[mt][nt][e] = 0.f;
    gemm_qk<Gemm>(sK, stage_q(stage) + warp_q0 * K::kSmemStride, st, warp_row0, lane);
    gemm_qk<Gemm>(sV, stage_do(stage) + warp_q0 * K::kSmemStride, dpt, warp_row0, lane);

    const FragmentOrigin origin{n_start + warp_row0, m_start + warp_q0, lane / 4, lane % 4};
    const bool need_mask = n_start + K::kBlockN > seq.seqlen_k ||
                           (p.window_left >= 0 && n_start < bounds.first_key(m_start + K::kBlockM - 1)) ||
                           (p.window_right >= 0 && n_start + K::kBlockN > bounds.last_key(m_start));
    const RowStats* stats = sStats + stage * K::kBlockM + warp_q0;
    auto stats_of = [&](int c) { return stats[c]; };
    if (need_mask) {
      probabilities_and_ds<true, kScoreMods, true>(st, dpt, scores, origin, stats_of);
    } else {
      probabilities_and_ds<true, kScoreMods, false>(st, dpt, scores, origin, stats_of);
    }
    if constexpr (K::kColSplit == 1) {  // P^T and dS^T are the A operands, from the registers
      gemm_pv<Gemm>(st, stage_do(stage), col0, acc_dv, lane);
      gemm_pv<Gemm>(dpt, stage_q(stage), col0, acc_dk, lane);
      if constexpr (kDqAtomic) stage_transposed<K>(dpt, sdSt, warp_row0, warp_q0, lane);
    } else {
      stage_transposed<K>(st, sPt, warp_row0, warp_q0, lane);
      stage_transposed<K>(dpt, sdSt, warp_row0, warp_q0, lane);
    }
    if constexpr (kDqAtomic) {
      __syncthreads();  // every warp's dS^T (and P^T) landed
      float* dq_tiles = p.dq_accum + (int64_t(h) * p.dq_accum_tiles_per_head + dq_accum_first_tile(p, seq, b) +
                                      m_start / kDqAccumTileRows) * (p.d / 8) * kDqAccumTileFloats;
      const int step_rows = seq.seqlen_q - m_start;  // the step's query rows that exist (add_dq)
      if constexpr (K::kColSplit > 1) {  // the step's P^T and dS^T rows of this warp's keys
        const int row = warp_row0 * K::kDsStride;
        gemm_smem<false, Element, kM, K::kBlockM, Gemm::kDTiles, K::kDsStride, typename K::Rows>(
            sPt + row, stage_do(stage), col0 + warp_c0, acc_dv, lane);
        // With kDqBeforeDk, dq's rounds alternate with parts of the dK product over the step's
        // queries, so that each round's atomics drain under a part of dK (one round: all of dq,
        // then all of dK).
        constexpr int kRounds = K::kDqBeforeDk ? K::kDqColumnRounds : 1;
        constexpr int kPart = K::kBlockM / kRounds;
        static_assert(kPart % 16 == 0, "dK's parts are whole k16 steps");
#pragma unroll
        for (int r = 0; r < kRounds; ++r) {
          if constexpr (K::kDqBeforeDk) add_dq<K, kHeadsFirst>(p, dq_tiles, step_rows, col0, sK, sdSt, lane, r);
          gemm_smem<false, Element, kM, kPart, Gemm::kDTiles, K::kDsStride, typename K::Rows>(
              sdSt + row + r * kPart, stage_q(stage) + r * kPart * K::kSmemStride, col0 + warp_c0, acc_dk, lane);
        }
      }
      if constexpr (!K::kDqBeforeDk) add_dq<K, kHeadsFirst>(p, dq_tiles, step_rows, col0, sK, sdSt, lane);
    }
    // Every warp is done with this stage (and sdSt, sPt) before the next step refills it.
    if constexpr (!K::kCopiesAfterTopBarrier) __syncthreads();
  }

  cp_async_wait<0>();
  __syncthreads();  // with no step, the K / V copies may still be landing in the staging space
  auto kv_row = [&](void* base, int64_t batch_stride, int64_t row_stride, int64_t head_stride) {
    return [=, &seq](int r) {
      return static_cast<Element*>(base) +
             k_row_offset(p, seq, b, n_start + r, hk, batch_stride, row_stride, head_stride);
    };
  };
  store_rows_scaled<K, K::kBlockN, K::kCtaCols, Gemm>(acc_dk, p.scale, sK, warp_row0, warp_c0, stored_rows,
                                                      p.d - col0, col0,
                                                      kv_row(p.dk, p.dk_batch_stride, p.dk_row_stride, p.dk_head_stride));
  store_rows_scaled<K, K::kBlockN, K::kCtaCols, Gemm>(acc_dv, 1.f, sV, warp_row0, warp_c0, stored_rows,
                                                      p.d_v - col0, col0,
                                                      kv_row(p.dv, p.dv_batch_stride, p.dv_row_stride, p.dv_head_stride));
}

}  // namespace flashattn::cuda
