// The sm80 forward kernel (FlashAttention-2's schedule, V's copy issued earlier): one CTA per
// (query tile, head, sequence); K and V tiles stream through shared memory by cp.async,
// S = Q K^T and O += P V run on mma.sync m16n8k16, and the online softmax stays in registers.
// Runs on sm80 and newer. This file only composes the mainloop, the score pipeline and the
// epilogue.
#pragma once

#include <cstdint>

#include "core/philox.h"
#include "core/score_mod.h"
#include "cuda/epilogue_fwd_sm80.h"
#include "cuda/fwd_params.h"
#include "cuda/mainloop_fwd_sm80.h"
#include "cuda/rotary_sm80.h"
#include "cuda/seq_info.h"
#include "cuda/softmax_sm80.h"

namespace flashattn::cuda {

// kScoreMods: the instantiation that serves softcap, ALiBi and dropout; the plain one leaves their
// code out, which saves registers and per-element work on the common path.
template <class K, bool kScoreMods>
__global__ void __launch_bounds__(K::kThreads, K::kMinCtasPerSm) fwd_kernel_sm80(const __grid_constant__ FwdParams p) {
  using Element = typename K::Element;
  constexpr int kM = K::kWarpMTiles;
  extern __shared__ __align__(128) unsigned char smem_raw[];  // swizzled tiles start on 128-byte boundaries
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  Element* sK = sQ + K::kBlockM * K::kSmemStride;
  Element* sV = sK + K::kBlockN * K::kSmemStride;

  const int m_block = blockIdx.x / p.num_splits, split = blockIdx.x % p.num_splits;
  const int h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const SeqInfo seq = seq_info(p, b);
  const int m_start = m_block * K::kBlockM;
  if (m_start >= seq.seqlen_q) return;
  const int m_rows = min(K::kBlockM, seq.seqlen_q - m_start);
  const int hk = h / p.group;
  const int warp_row0 = warp * 16 * kM;
  // In the few-rows variant a warp whose rows all lie past the tile's end (decoding tiles hold a
  // few rows) only loads and synchronises: its O stays 0 and its rows are never stored. (The
  // table's tiles keep the test out: it costs their main loop 100 bytes of spills at d 128.)
  const bool warp_has_rows = !K::kSkipsEmptyWarps || warp_row0 < m_rows;

  const float slope = kScoreMods && p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;
  const int pack = p.pack_gqa;  // rows per query: masks index queries by row / pack
  const ScoreMod<float> mod{p.scale, p.softcap, slope, seq.seqlen_k - seq.seqlen_q / pack, seq.seqlen_k,
                            p.window_left, p.window_right};
  const bool plain_scores = !kScoreMods || (p.softcap == 0.f && slope == 0.f);  // s = scale * dot
  const DropoutRng rng = make_dropout_rng(p.dropout_seed, p.dropout_offset, p.dropout_threshold, b,
                                          p.heads_q, h);

  // The key tiles some row of this tile keeps, and this split's share of them.
  const KeyTiles keys = key_tiles(mod, m_start / pack, (m_start + m_rows - 1) / pack, K::kBlockN);
  int n_block_min = keys.min, n_block_max = keys.max;
  // Only tiles that cross a window edge or the end of the keys need the per-element mask; it and
  // the score modifiers run as their own passes so that an interior plain tile pays for neither.
  const KeyTiles unmasked =
      unmasked_key_tiles(mod, m_start / pack, (m_start + K::kBlockM - 1) / pack, K::kBlockN);
  if (p.num_splits > 1) {
    const int per_split = (n_block_max - n_block_min + p.num_splits - 1) / p.num_splits;
    n_block_min = min(n_block_max, n_block_min + split * per_split);
    n_block_max = min(n_block_max, n_block_min + per_split);
  }

  const Element* q = static_cast<const Element*>(p.q);
  const Element* k = static_cast<const Element*>(p.k);
  const Element* v = static_cast<const Element*>(p.v);
  load_rows_async<K, K::kBlockM>(
      sQ, q + q_row_offset(seq, p.cu_seqlens_q != nullptr, b, m_start, h, p.q_batch_stride,
                           p.q_row_stride, p.q_head_stride),
      p.q_row_stride, m_rows, p.d);
  if (p.rotary_cos != nullptr) {  // queries rotate at cache_seqlens[b] + i, in shared memory
    cp_async_wait<0>();
    __syncthreads();  // the loop's first barrier orders these writes before any read of sQ
    const int pairs = p.rotary_dim / 2;
    for (int c = threadIdx.x; c < m_rows * pairs; c += K::kThreads) {
      const int row = c / pairs;
      const int64_t position = int64_t(p.cache_seqlens[b]) + (m_start + row) / pack;
      rotate_pair<Element, float>(p, position, c % pairs,
                                  [&](int col) -> Element& { return sQ[K::Rows::offset(row, col)]; });
    }
  }
  // Row 0 of this sequence and kv head in k and v (paged caches address rows page by page).
  const bool paged = p.block_table != nullptr;
  const Element* k_seq =
      paged ? k : k + k_row_offset(p, seq, b, 0, hk, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  const Element* v_seq =
      paged ? v : v + k_row_offset(p, seq, b, 0, hk, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  auto load_k = [&](int n_block) {
    const int n0 = n_block * K::kBlockN;
    if (!paged) {
      load_rows_async<K, K::kBlockN>(sK, k_seq + n0 * p.k_row_stride, p.k_row_stride, seq.seqlen_k - n0, p.d);
    } else {
      load_paged_rows_async<K, K::kBlockN>(sK, k, seq.seqlen_k - n0, p.d, [&](int r) {
        return k_row_offset(p, seq, b, n0 + r, hk, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
      });
    }
  };
  auto load_v = [&](int n_block) {
    const int n0 = n_block * K::kBlockN;
    if (!paged) {
      load_rows_async<K, K::kBlockN>(sV, v_seq + n0 * p.v_row_stride, p.v_row_stride, seq.seqlen_k - n0, p.d_v);
    } else {
      load_paged_rows_async<K, K::kBlockN>(sV, v, seq.seqlen_k - n0, p.d_v, [&](int r) {
        return k_row_offset(p, seq, b, n0 + r, hk, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
      });
    }
  };
  if (n_block_max > n_block_min) load_k(n_block_max - 1);
  cp_async_commit();

  float acc_o[kM][K::kDTiles][4];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int dt = 0; dt < K::kDTiles; ++dt) acc_o[mt][dt][0] = acc_o[mt][dt][1] = acc_o[mt][dt][2] = acc_o[mt][dt][3] = 0.f;
  // The slack only without score modifiers: their instantiation's spills grew with it (not timed).
  constexpr int kMaxSlack = kScoreMods ? 0 : K::kMaxSlack;
  OnlineSoftmax<kM, kMaxSlack, Element> softmax(plain_scores ? p.scale * kLog2e : 1.f);
  FragmentOrigin origin{m_start + warp_row0, 0, lane / 4, lane % 4, pack};

  // Key tiles from the last to the first: with causal masks the masked diagonal tile comes first.
  // V's copy goes out once sV is free, before the wait for K (FlashAttention-2 waits for K first):
  // one barrier more per tile, and V's copy no longer queues behind a late K (sm80 forward v10 in
  // docs/performance.md: up to +3% at 512-1k keys).
  for (int n_block = n_block_max - 1; n_block >= n_block_min; --n_block) {
    __syncthreads();  // every warp is done with the previous V
    load_v(n_block);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // K(n_block) (and Q) landed

    float s[kM][K::kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int nt = 0; nt < K::kNTiles; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
    if (warp_has_rows) gemm_qk<K>(sQ, sK, s, warp_row0, lane);

    cp_async_wait<0>();
    __syncthreads();  // V(n_block) landed; every warp is done reading K
    if (n_block > n_block_min) load_k(n_block - 1);
    cp_async_commit();

    if (!warp_has_rows) continue;
    origin.col0 = n_block * K::kBlockN;
    if (!plain_scores) apply_score_mods(s, mod, p.softcap_in, origin);
    if (n_block < unmasked.min || n_block >= unmasked.max) apply_mask(s, mod, origin);
    uint32_t p16[kM][K::kNTiles][2];  // P in 16 bits, with K::kRoundPEarly (tile_size.h)
    softmax.update(s, acc_o, [&](float& x0, float& x1, int mt, int half, int nt) {
      if (kScoreMods && p.dropout_threshold != 0) {
        dropout_pair(x0, x1, rng, p.dropout_scale, origin.row0 + mt * 16 + origin.g + 8 * half,
                     origin.col0 + nt * 8 + 2 * origin.t);
      }
      if constexpr (K::kRoundPEarly) p16[mt][nt][half] = pack2<Element>(x0, x1);
    });
    if constexpr (K::kRoundPEarly) {
      gemm_pv<K>(p16, sV, 0, acc_o, lane);
    } else {
      gemm_pv<K>(s, sV, 0, acc_o, lane);
    }
  }

  cp_async_wait<0>();  // a tile with no key never waited for its Q copy
  __syncthreads();     // every warp is done with sQ and sV
  if (p.num_splits > 1) {
    store_fwd_partial<K>(p, b, h, split, m_start, m_rows, origin, acc_o, softmax);
  } else {
    store_fwd_tile<K>(p, seq, b, h, m_start, m_rows, origin, acc_o, softmax, sQ);
  }
}

}  // namespace flashattn::cuda
