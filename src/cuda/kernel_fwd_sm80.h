// The sm80 forward kernel (FlashAttention-2's schedule): one CTA of 4 warps per (query tile, head,
// sequence); K and V tiles stream through shared memory by cp.async, S = Q K^T and O += P V run on
// mma.sync m16n8k16, and the online softmax stays in registers. Runs on sm80 and newer.
#pragma once

#include <cstdint>

#include "core/philox.h"
#include "core/score_mod.h"
#include "cuda/fwd_params.h"
#include "cuda/seq_info.h"
#include "cuda/sm80_primitives.h"
#include "cuda/tile_size.h"

namespace flashattn::cuda {

constexpr float kLog2e = 1.4426950408889634f;  // softmax in base 2: exp(x) = exp2(x * log2(e))
constexpr float kLn2 = 0.6931471805599453f;

template <int kHeadDim_, class Element_>
struct FwdSm80 {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = FwdTileSm80<kHeadDim>::kWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpMTiles = FwdTileSm80<kHeadDim>::kWarpMTiles;
  static constexpr int kBlockM = kWarps * 16 * kWarpMTiles;
  static constexpr int kBlockN = FwdTileSm80<kHeadDim>::kBlockN;
  static constexpr int kNTiles = kBlockN / 8;   // n8 tiles of S per warp
  static constexpr int kDTiles = kHeadDim / 8;  // n8 tiles of O per warp
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per smem row
  // Rows are padded by 16 bytes so that the 8 rows one ldmatrix phase reads hit distinct banks.
  static constexpr int kSmemStride = kHeadDim + 8;
  static constexpr int kSmemBytes = (kBlockM + 2 * kBlockN) * kSmemStride * int(sizeof(Element));
  static_assert(kHeadDim % 32 == 0 && kBlockN % 16 == 0, "tile shapes must fit m16n8k16 steps");
};

// Copies kRows x kHeadDim elements of rows laid out at a constant stride (dense and varlen
// tensors) into shared memory with cp.async: rows >= valid_rows and columns >= d are zero-filled.
// Each thread keeps one column and walks its rows by pointer increments, so a tile costs one add
// and one predicate per 16 bytes.
template <class K, int kRows>
__device__ __forceinline__ void load_rows_async(typename K::Element* smem,
                                                const typename K::Element* row0,
                                                int64_t row_stride, int valid_rows, int d) {
  constexpr int kRowsPerPass = K::kThreads / K::kChunksPerRow;
  if constexpr (K::kThreads % K::kChunksPerRow == 0 && kRows % kRowsPerPass == 0) {
    const int r = threadIdx.x / K::kChunksPerRow, col = (threadIdx.x % K::kChunksPerRow) * 8;
    const typename K::Element* src = row0 + r * row_stride + col;
    typename K::Element* dst = smem + r * K::kSmemStride + col;
#pragma unroll
    for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
      const bool valid = col < d && r + pass * kRowsPerPass < valid_rows;
      cp_async_16(dst + pass * kRowsPerPass * K::kSmemStride, valid ? src : row0, valid);
      src += kRowsPerPass * row_stride;
    }
  } else {  // head dims whose rows do not split evenly over the threads (96, 160, ...)
#pragma unroll
    for (int c = threadIdx.x; c < kRows * K::kChunksPerRow; c += K::kThreads) {
      const int r = c / K::kChunksPerRow, col = (c % K::kChunksPerRow) * 8;
      const bool valid = r < valid_rows && col < d;
      cp_async_16(smem + r * K::kSmemStride + col, valid ? row0 + r * row_stride + col : row0, valid);
    }
  }
}

// The same for key rows of a paged cache, whose page is looked up row by row.
template <class K, int kRows, class RowOffset>
__device__ __forceinline__ void load_paged_rows_async(typename K::Element* smem,
                                                      const typename K::Element* base,
                                                      int valid_rows, int d, RowOffset row_offset) {
  for (int c = threadIdx.x; c < kRows * K::kChunksPerRow; c += K::kThreads) {
    int r = c / K::kChunksPerRow, col = (c % K::kChunksPerRow) * 8;
    bool valid = r < valid_rows && col < d;
    const typename K::Element* src = valid ? base + row_offset(r) + col : base;
    cp_async_16(smem + r * K::kSmemStride + col, src, valid);
  }
}

// acc[mt][nt] += Q[warp rows] K[tile]^T over the full head dim (both operands in smem).
template <class K>
__device__ __forceinline__ void gemm_qk(const typename K::Element* sQ,
                                        const typename K::Element* sK,
                                        float (&acc)[K::kWarpMTiles][K::kNTiles][4], int warp_row0,
                                        int lane) {
#pragma unroll
  for (int kk = 0; kk < K::kHeadDim / 16; ++kk) {
    uint32_t a[K::kWarpMTiles][4];
#pragma unroll
    for (int mt = 0; mt < K::kWarpMTiles; ++mt) {
      ldmatrix_x4(sQ + (warp_row0 + mt * 16 + lane % 16) * K::kSmemStride + kk * 16 + (lane / 16) * 8,
                  a[mt]);
    }
#pragma unroll
    for (int np = 0; np < K::kNTiles / 2; ++np) {
      uint32_t b[4];
      ldmatrix_x4(sK + (np * 16 + lane % 8 + (lane / 16) * 8) * K::kSmemStride + kk * 16 +
                      ((lane / 8) % 2) * 8,
                  b);
#pragma unroll
      for (int mt = 0; mt < K::kWarpMTiles; ++mt) {
        mma_16x8x16<typename K::Element>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma_16x8x16<typename K::Element>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// acc_o[mt][dt] += P V[tile]: P comes from the S accumulators (the C layout of two n8 tiles is the
// A layout of one k16 step), V from smem through the transposing ldmatrix.
template <class K>
__device__ __forceinline__ void gemm_pv(const float (&p)[K::kWarpMTiles][K::kNTiles][4],
                                        const typename K::Element* sV,
                                        float (&acc_o)[K::kWarpMTiles][K::kDTiles][4], int lane) {
  using Element = typename K::Element;
#pragma unroll
  for (int kc = 0; kc < K::kBlockN / 16; ++kc) {
    uint32_t a[K::kWarpMTiles][4];
#pragma unroll
    for (int mt = 0; mt < K::kWarpMTiles; ++mt) {
      a[mt][0] = pack2<Element>(p[mt][2 * kc][0], p[mt][2 * kc][1]);
      a[mt][1] = pack2<Element>(p[mt][2 * kc][2], p[mt][2 * kc][3]);
      a[mt][2] = pack2<Element>(p[mt][2 * kc + 1][0], p[mt][2 * kc + 1][1]);
      a[mt][3] = pack2<Element>(p[mt][2 * kc + 1][2], p[mt][2 * kc + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < K::kDTiles / 2; ++dp) {
      uint32_t b[4];
      ldmatrix_x4_trans(sV + (kc * 16 + lane % 8 + ((lane / 8) % 2) * 8) * K::kSmemStride + dp * 16 +
                            (lane / 16) * 8,
                        b);
#pragma unroll
      for (int mt = 0; mt < K::kWarpMTiles; ++mt) {
        mma_16x8x16<Element>(acc_o[mt][2 * dp], a[mt], b[0], b[1]);
        mma_16x8x16<Element>(acc_o[mt][2 * dp + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// Max and sum over the 4 threads of a quad, which together hold one accumulator row.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// kScoreMods: the instantiation that serves softcap, ALiBi and dropout; the plain one leaves their
// code out, which saves registers and per-element work on the common path.
template <class K, bool kScoreMods>
__global__ void __launch_bounds__(K::kThreads, 1) fwd_kernel_sm80(const __grid_constant__ FwdParams p) {
  using Element = typename K::Element;
  constexpr int kM = K::kWarpMTiles;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  Element* sK = sQ + K::kBlockM * K::kSmemStride;
  Element* sV = sK + K::kBlockN * K::kSmemStride;

  const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const SeqInfo seq = seq_info(p, b);
  const int m_start = m_block * K::kBlockM;
  if (m_start >= seq.seqlen_q) return;
  const int m_rows = min(K::kBlockM, seq.seqlen_q - m_start);
  const int hk = h / p.group;
  const bool varlen_q = p.cu_seqlens_q != nullptr;

  const float slope = kScoreMods && p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.f;
  const ScoreMod<float> mod{p.scale, p.softcap, slope, seq.seqlen_k - seq.seqlen_q, seq.seqlen_k,
                            p.window_left, p.window_right};
  const bool plain_scores = !kScoreMods || (p.softcap == 0.f && slope == 0.f);  // s = scale * dot
  // On the plain path scores stay raw dot products and the scale folds into one FFMA per element:
  // p = 2^(dot * scale * log2(e) - max * scale * log2(e)); otherwise scores are log2-scaled first.
  const float score_scale = plain_scores ? p.scale * kLog2e : 1.f;
  const DropoutRng rng = make_dropout_rng(p.dropout_seed, p.dropout_offset, p.dropout_threshold, b,
                                          p.heads_q, h);

  // Keys any row of this tile keeps (first_key and last_key grow with the row).
  const int key_lo = int(mod.first_key(m_start)), key_hi = int(mod.last_key(m_start + m_rows - 1));
  const int n_block_min = key_lo / K::kBlockN;
  const int n_block_max = key_hi > key_lo ? (key_hi + K::kBlockN - 1) / K::kBlockN : n_block_min;

  const Element* q = static_cast<const Element*>(p.q);
  const Element* k = static_cast<const Element*>(p.k);
  const Element* v = static_cast<const Element*>(p.v);
  load_rows_async<K, K::kBlockM>(
      sQ, q + q_row_offset(seq, varlen_q, b, m_start, h, p.q_batch_stride, p.q_row_stride, p.q_head_stride),
      p.q_row_stride, m_rows, p.d);
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
  // row_max: the running max in the units of s (raw dots on the plain path, log2-scaled scores
  // otherwise; times score_scale it is in log2 units); row_sum: this thread's partial sum.
  float row_max[kM][2], row_sum[kM][2];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int dt = 0; dt < K::kDTiles; ++dt) acc_o[mt][dt][0] = acc_o[mt][dt][1] = acc_o[mt][dt][2] = acc_o[mt][dt][3] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  const int warp_row0 = warp * 16 * kM;

  // Key tiles from the last to the first: with causal masks the masked diagonal tile comes first.
  for (int n_block = n_block_max - 1; n_block >= n_block_min; --n_block) {
    cp_async_wait<0>();
    __syncthreads();  // K(n_block) (and Q) landed; every warp is done with the previous V
    load_v(n_block);
    cp_async_commit();

    float s[kM][K::kNTiles][4];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int nt = 0; nt < K::kNTiles; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
    gemm_qk<K>(sQ, sK, s, warp_row0, lane);

    cp_async_wait<0>();
    __syncthreads();  // V(n_block) landed; every warp is done reading K
    if (n_block > n_block_min) load_k(n_block - 1);
    cp_async_commit();

    // Only tiles that cross a window edge or the end of the keys need the per-element mask.
    const int n0 = n_block * K::kBlockN;
    const int m_last = m_start + K::kBlockM - 1;
    const bool need_mask = n0 + K::kBlockN > seq.seqlen_k ||
                           (p.window_left >= 0 && n0 < mod.first_key(m_last)) ||
                           (p.window_right >= 0 && n0 + K::kBlockN > mod.last_key(m_start));
    // Score modifiers and the mask run as their own passes, so that the common case (no modifier,
    // an interior tile) leaves the softmax loop free of per-element compares.
    if (!plain_scores) {
#pragma unroll
      for (int mt = 0; mt < kM; ++mt)
#pragma unroll
        for (int nt = 0; nt < K::kNTiles; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = m_start + warp_row0 + mt * 16 + g + 8 * (e / 2);
            const int j = n0 + nt * 8 + 2 * t + e % 2;
            s[mt][nt][e] = mod.score(s[mt][nt][e], i, j) * kLog2e;
          }
    }
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < kM; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i = m_start + warp_row0 + mt * 16 + g + 8 * half;
          const int lo = int(mod.first_key(i)) - n0, hi = int(mod.last_key(i)) - n0;
#pragma unroll
          for (int nt = 0; nt < K::kNTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int jj = nt * 8 + 2 * t + e;
              if (jj < lo || jj >= hi) s[mt][nt][2 * half + e] = -INFINITY;
            }
        }
    }
    // Online softmax in base 2 (see score_scale).
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = m_start + warp_row0 + mt * 16 + g + 8 * half;
        float tile_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < K::kNTiles; ++nt) {
          tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
        }
        const float new_max = fmaxf(row_max[mt][half], quad_max(tile_max));
        // A row with no key yet keeps max -inf; its weights are 0 and must not become NaN.
        const float base = new_max == -INFINITY ? 0.f : new_max * score_scale;
        const float correction = fast_exp2(row_max[mt][half] * score_scale - base);
        row_max[mt][half] = new_max;
        row_sum[mt][half] *= correction;
#pragma unroll
        for (int dt = 0; dt < K::kDTiles; ++dt) {
          acc_o[mt][dt][2 * half] *= correction;
          acc_o[mt][dt][2 * half + 1] *= correction;
        }
#pragma unroll
        for (int nt = 0; nt < K::kNTiles; ++nt) {
          float& x0 = s[mt][nt][2 * half];
          float& x1 = s[mt][nt][2 * half + 1];
          x0 = fast_exp2(fmaf(x0, score_scale, -base));
          x1 = fast_exp2(fmaf(x1, score_scale, -base));
          row_sum[mt][half] += x0 + x1;
          if (kScoreMods && p.dropout_threshold != 0) {
            const int j = n0 + nt * 8 + 2 * t;  // even, so j and j + 1 share one Philox block
            const Philox4 bits = rng.block(i, j >> 2);
            const bool upper = (j & 2) != 0;  // a constant index keeps bits in registers
            const uint32_t w0 = upper ? bits.x[2] : bits.x[0], w1 = upper ? bits.x[3] : bits.x[1];
            x0 = w0 >= p.dropout_threshold ? x0 * p.dropout_scale : 0.f;
            x1 = w1 >= p.dropout_threshold ? x1 * p.dropout_scale : 0.f;
          }
        }
      }
    }
    gemm_pv<K>(s, sV, acc_o, lane);
  }

  // Epilogue: normalise, stage O through sQ for 16-byte stores, write lse.
  cp_async_wait<0>();  // a tile with no key never waited for its Q copy
  __syncthreads();     // every warp is done with sQ and sV
  Element* out = static_cast<Element*>(p.out);
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float sum = quad_sum(row_sum[mt][half]);
      const float inv = sum > 0.f ? 1.f / sum : 0.f;  // empty rows: out = 0
      const int r = warp_row0 + mt * 16 + g + 8 * half;
#pragma unroll
      for (int dt = 0; dt < K::kDTiles; ++dt) {
        *reinterpret_cast<uint32_t*>(sQ + r * K::kSmemStride + dt * 8 + 2 * t) =
            pack2<Element>(acc_o[mt][dt][2 * half] * inv, acc_o[mt][dt][2 * half + 1] * inv);
      }
      if (p.lse != nullptr && t == 0 && r < m_rows) {
        const float lse = sum > 0.f ? row_max[mt][half] * score_scale * kLn2 + logf(sum) : -INFINITY;
        const int64_t row = varlen_q ? seq.q_start + m_start + r : m_start + r;
        p.lse[(varlen_q ? 0 : int64_t(b) * p.lse_batch_stride) + int64_t(h) * p.lse_head_stride +
              row * p.lse_row_stride] = lse;
      }
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < K::kBlockM * K::kChunksPerRow; c += K::kThreads) {
    const int r = c / K::kChunksPerRow, col = (c % K::kChunksPerRow) * 8;
    if (r >= m_rows || col >= p.d_v) continue;
    const int64_t offset = q_row_offset(seq, varlen_q, b, m_start + r, h, p.out_batch_stride,
                                        p.out_row_stride, p.out_head_stride);
    *reinterpret_cast<uint4*>(out + offset + col) =
        *reinterpret_cast<const uint4*>(sQ + r * K::kSmemStride + col);
  }
}

}  // namespace flashattn::cuda
